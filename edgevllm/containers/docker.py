"""The one container-engine abstraction: everything that talks to Docker goes through here.

It drives the ``docker`` CLI with argument lists (never a shell), so that ``--dry-run`` can print
the exact equivalent command, and so that buildx, contexts and ``ssh://`` hosts work exactly as
they do for the user. Each ``DockerEngine`` is bound to one daemon (the default one, a docker
context, or a ``DOCKER_HOST``-style URL), which is how a cluster talks to several nodes.

``DockerEngine`` is one face (``engine.x(...)``) over the engine's nouns, one module each: the
daemon itself (``daemon``: binding, deadlines, health), ``images``, ``container`` (containers),
``networks``, ``buildx`` (builds) and ``registry``.
"""

from __future__ import annotations

from edgevllm.containers.buildx import Buildx
from edgevllm.containers.container import Containers
from edgevllm.containers.daemon import DEFAULT_TIMEOUT_S, QUICK_TIMEOUT_S
from edgevllm.containers.enginespec import check_engine_spec, parse_ssh_url
from edgevllm.containers.images import Images
from edgevllm.containers.networks import Networks
from edgevllm.containers.options import BuildOptions, RunOptions
from edgevllm.containers.registry import Registry

__all__ = ["DEFAULT_TIMEOUT_S", "QUICK_TIMEOUT_S", "BuildOptions", "DockerEngine", "RunOptions",
           "parse_ssh_url"]


class DockerEngine(Images, Containers, Networks, Buildx, Registry):
    """A docker daemon reached through the docker CLI, with every noun's calls.

    ``context``: a docker context name; ``host``: a daemon URL (``unix://``, ``tcp://``, ``ssh://``).
    """

    @classmethod
    def named(cls, spec: str | None) -> "DockerEngine":
        """The engine a flag names: ``local``/``default``/nothing, a daemon URL (``ssh://me@node``,
        ``tcp://``, ``unix://``) or a docker context name."""
        if not spec or spec in ("local", "default"):
            return cls()
        check_engine_spec(spec)
        return cls(host=spec) if "://" in spec else cls(context=spec)
