"""What a recipe may ask of the host: its container options against an allow-list.

A recipe is data from others (a shared folder, an eugr import). ``container.extra`` goes to
``docker run`` verbatim and ``container.volumes`` are bind mounts, so a recipe could ask for
``--privileged``, the host's namespaces, any capability or device, a mount of ``/``, ``/etc``,
``$HOME`` or the Docker socket: the keys to the machine. This is the one check every launch of
a rendered recipe passes (``serve.recipe.load.render``: ``inv serve``, its clusters, ``inv
compose``): only what serving needs passes (the target's own devices and capabilities, host
networking for a cluster, mounts of ordinary folders); anything else is one line, unless the
user says ``--allow-host-access``, and then each grant is named in a warning.
"""

from __future__ import annotations

import csv
import os
import posixpath
from typing import Any

from edgevllm.common import console
from edgevllm.common.errors import RecipeError

Rendered = Any  # serve.recipe.load.Rendered (which calls this module: no import back)
ALLOW_FLAG = "--allow-host-access"

# docker run flags a recipe may pass as they are (each takes a value unless in _SWITCHES).
_PLAIN = {"--env", "-e", "--label", "-l", "--ulimit", "--shm-size", "--memory", "-m",
          "--memory-swap", "--memory-reservation", "--cpus", "--cpuset-cpus", "--cpu-shares",
          "--restart", "--log-driver", "--log-opt", "--stop-signal", "--stop-timeout",
          "--workdir", "-w", "--user", "-u", "--hostname", "--add-host", "--dns",
          "--dns-search", "--tmpfs", "--gpus", "--health-cmd", "--health-interval",
          "--health-retries", "--health-timeout", "--health-start-period", "--pids-limit",
          "--oom-score-adj", "--cap-drop", "--platform", "--publish", "-p", "--expose",
          "--entrypoint", "--init", "--rm", "--read-only", "--no-healthcheck", "-i", "-t",
          "--interactive", "--tty"}
_SWITCHES = {"--init", "--rm", "--read-only", "--no-healthcheck", "-i", "-t", "--interactive",
             "--tty"}
# Flags checked by value; everything not named here or above is refused.
_CHECKED = {"--ipc", "--runtime", "--network", "--net", "--device", "--cap-add", "--volume",
            "-v", "--mount"}
_IPC = {"", "host", "private", "shareable", "none"}  # host: vLLM's shared memory (the default)
_RUNTIMES = {"", "nvidia", "runc"}
# Host paths no recipe mounts: themselves, anything inside, or any folder holding them.
_PROTECTED = ("/etc", "/proc", "/sys", "/dev", "/boot", "/run", "/var/run", "/var/lib/docker",
              "/var/lib/containerd", "/usr/bin", "/usr/sbin", "/bin", "/sbin")
_HOMES = ("/home", "/root", "/Users")  # every user's home: neither these nor a folder holding them
_HOME_SECRETS = (".ssh", ".docker", ".gnupg", ".aws", ".kube", ".config", ".netrc",
                 ".git-credentials", ".cache/edgevllm")


def check_host_access(rendered: Rendered, allow: bool = False) -> None:
    """Refuse (one line) a rendered recipe that asks for the host, unless ``allow``; with
    ``allow``, warn once naming every grant."""
    asks = host_requests(rendered)
    if not asks:
        return
    if not allow:
        where, what = asks[0]
        more = f" (and {len(asks) - 1} more)" if len(asks) > 1 else ""
        raise RecipeError(f"{rendered.source}: field '{where}': {what}{more}; a recipe may not "
                          f"reach the host: remove it, or pass {ALLOW_FLAG} if you trust this "
                          "recipe")
    console.warn(f"{rendered.source}: {ALLOW_FLAG}: the container gets "
                 + "; ".join(what for _, what in asks))


def host_requests(rendered: Rendered) -> list[tuple[str, str]]:
    """Each (field, what it asks) of the recipe that reaches past the allow-list."""
    c, launch = rendered.container, rendered.launch
    clustered = rendered.topology.mode != "solo"
    found = []
    if (c.ipc or "") not in _IPC:
        found.append(("container.ipc", f"ipc '{c.ipc}' (another namespace)"))
    if (c.runtime or "") not in _RUNTIMES:
        found.append(("container.runtime", f"runtime '{c.runtime}'"))
    if c.network and not _network_ok(c.network, clustered):
        found.append(("container.network", f"network '{c.network}' (the host's network, for "
                                            "clusters only)" if c.network == "host" else
                      f"network '{c.network}'"))
    for i, volume in enumerate(rendered.volumes):
        found += [(f"container.volumes[{i}]", what) for what in _volume(volume)]
    found += [("launch.jit_cache_root", what)
              for what in _host_path(launch.jit_cache_root, "a JIT cache root")]
    devices, caps = set(launch.rdma.devices), set(launch.rdma.cap_add)
    found += [("container.extra", what)
              for what in _extra(list(c.extra), devices, caps, clustered)]
    return found


def _network_ok(network: str, clustered: bool) -> bool:
    if network.startswith("container:"):
        return False
    return network != "host" or clustered


def _extra(argv: list[str], devices: set[str], caps: set[str], clustered: bool) -> list[str]:
    found, i = [], 0
    while i < len(argv):
        word = str(argv[i])
        flag, eq, value = word.partition("=")
        i += 1
        if flag in _SWITCHES:
            continue
        if flag not in _PLAIN and flag not in _CHECKED:
            found.append(f"'{flag}' (not a flag a recipe may pass)")
            continue
        if not eq and i >= len(argv):
            found.append(f"'{flag}' without its value (it would take the next word of the"
                         " launch)")
            continue
        if not eq:
            value = str(argv[i])
            i += 1
        found += _flag_value(flag, value, devices, caps, clustered)
    return found


def _flag_value(flag: str, value: str, devices: set[str], caps: set[str],
                clustered: bool) -> list[str]:
    if flag == "--ipc" and value not in _IPC:
        return [f"'--ipc={value}' (another namespace)"]
    if flag == "--runtime" and value not in _RUNTIMES:
        return [f"'--runtime={value}'"]
    if flag in ("--network", "--net") and not _network_ok(value, clustered):
        return [f"'{flag}={value}' (the host's network is for clusters only)"]
    if flag == "--device" and value.split(":", 1)[0] not in devices:
        return [f"'--device={value}' (not one of the target's devices: "
                f"{', '.join(sorted(devices)) or 'none'})"]
    if flag == "--cap-add" and value.upper().removeprefix("CAP_") not in caps:
        allowed = ", ".join(sorted(caps)) or "none"
        return [f"'--cap-add={value}' (not one of the target's capabilities: {allowed})"]
    if flag in ("--volume", "-v"):
        return _volume(value)
    if flag == "--mount":
        return _mount(value)
    return []


def _volume(volume: str) -> list[str]:
    source, sep, _ = volume.partition(":")
    if not sep or not source.startswith(("/", "~", ".", "$")):
        return []  # a named or an anonymous volume: no host path
    return _host_path(source, f"a mount of '{source}'")


def _mount(spec: str) -> list[str]:
    """``--mount`` read as docker reads it: CSV fields (``"source=/"`` is ``source=/``), keys in
    any case, the last ``source``/``src`` winning; a volume with driver options is refused (the
    local driver's ``o=bind,device=/`` mounts any host folder)."""
    try:
        parts = next(csv.reader([spec]), [])
    except csv.Error:
        return [f"'--mount {spec}' (not a mount docker reads)"]
    fields, source = {}, ""
    for part in parts:
        key, _, value = part.partition("=")
        fields[key.lower()] = value
        source = value if key.lower() in ("source", "src") else source
    kind = fields.get("type", "volume")
    if kind == "volume" and {"volume-opt", "volume-driver"} & set(fields):
        return [f"'--mount {spec}' (a volume with driver options: it can bind any host folder)"]
    if kind != "bind":
        return [] if kind in ("volume", "tmpfs") else [f"'--mount {spec}' (type {kind})"]
    return _host_path(source, f"a mount of '{source}'")


def _host_path(path: str | None, what: str) -> list[str]:
    """Why a host path may not be mounted: ``/``, a protected folder (or one holding it), the
    home folder (or one holding it) or its secrets, a socket."""
    if not path:
        return []
    home = posixpath.normpath(os.path.expanduser("~"))
    expanded = os.path.expandvars(os.path.expanduser(path))
    if not expanded.startswith("/"):
        expanded = posixpath.join(os.getcwd(), expanded)
    found = posixpath.normpath(expanded).replace("//", "/")
    real = os.path.realpath(found)
    for candidate in {found, real}:
        protected = _PROTECTED + tuple(posixpath.join(home, s) for s in _HOME_SECRETS)
        if candidate == "/" or any(_inside(candidate, p) or _inside(p, candidate)
                                   for p in protected):
            return [f"{what} (a system folder or the host's secrets)"]
        if any(_inside(h, candidate) for h in (home, *_HOMES)):
            return [f"{what} (the home folder, or a folder holding it)"]
        if candidate.endswith(".sock"):
            return [f"{what} (a socket: the Docker socket is the whole host)"]
    return []


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")
