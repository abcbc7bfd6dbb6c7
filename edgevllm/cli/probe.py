"""``inv probe``: start-up probe of a built image (level 1 anywhere, level 2 on the device)."""

from __future__ import annotations

import os

from edgevllm.cli._common import cli_task
from edgevllm.common import console
from edgevllm.common.errors import ConfigError, ProbeError
from edgevllm.common.escape import terminal
from edgevllm.common.grammar import EnvName, Line, check, flag_float, flag_int, flag_port
from edgevllm.common.kv import parse_pairs, split_csv
from edgevllm.common.secrets import secret_problem
from edgevllm.containers.docker import DockerEngine


@cli_task(
    help={
        "image": "image to probe (tag or id)",
        "target": "target name (thor, spark): arch, runtime env, required imports, serve flags",
        "level": "1: imports and build facts, no GPU; 2: serve a model on the device (default 1)",
        "model": "level 2: model to serve (default: the target's probe.level2_model)",
        "json": "write the result as JSON to this file (atomically); '-' prints it to stdout",
        "timeout": "level 1: seconds for the whole check; level 2: seconds to wait for /health",
        "port": "level 2: host port on 127.0.0.1 (default: a free one)",
        "serve_arg": "level 2: a `vllm serve` argument (repeat; replaces the target's serve_args)",
        "require": "level 1: components that must import (repeat or comma list; default: target's)",
        "gpus": "level 2: docker --gpus value (default all; 'none' for no GPU flag)",
        "runtime": "level 2: docker --runtime (e.g. nvidia on Jetson)",
        "env": "level 2: extra KEY=VALUE for the server container (repeat)",
        "name": "level 2: container name (default edgevllm-probe-<random>)",
        "volume": "level 2: docker -v for the server (repeat), e.g. "
                  "~/.cache/huggingface:/root/.cache/huggingface",
        "context": "docker context to run on (default: the current one)",
        "engine": "the engine the image is on, where the probe runs: ssh://[user@]host[:port] "
                  "or a docker context (as inv build --engine)",
    },
    iterable=["serve_arg", "require", "env", "volume"],
)
def probe(c, image, target, level="1", model=None, json=None, timeout=None, port=None,
          serve_arg=None, require=None, gpus="all", runtime=None, env=None, name=None,
          volume=None, context=None, engine=None):
    """Probe an image: level 1 imports and build facts; level 2 serves a model and reads the log."""
    from edgevllm.probe import ServeSettings, probe_level1, probe_level2
    from edgevllm.probe.level1 import LEVEL1_TIMEOUT_S

    if engine and context:
        raise ConfigError("--engine and --context: give one of them")
    on = DockerEngine.named(engine or context)
    level = flag_int(level, "--level", 1, 2)
    timeout = flag_float(timeout, "--timeout") if timeout is not None else None
    port = flag_port(port, "--port") if port is not None else None
    if level == 1:
        required = split_csv(require) or None
        result = probe_level1(on, image, target, required=required,
                              timeout=timeout or LEVEL1_TIMEOUT_S)
    elif level == 2:
        # HF_TOKEN goes by name: its value stays out of argv, labels and the result.
        settings = ServeSettings(gpus=None if gpus in (None, "", "none") else gpus,
                                 runtime=runtime, env=_runtime_env(env),
                                 env_names=["HF_TOKEN"],
                                 volumes=[os.path.expanduser(v) for v in volume or []])
        result = probe_level2(on, image, target, model=model,
                              timeout=timeout or 900,
                              serve_args=list(serve_arg) if serve_arg else None,
                              port=port, container_name=name,
                              settings=settings)
    else:
        raise ConfigError(f"--level {level}: use 1 or 2")
    _report(result, json)
    if not result.passed:
        raise ProbeError(f"probe of {image} failed: {result.summary()}")


def _runtime_env(values) -> dict[str, str]:
    # the server container's environment: names and values as a build's --env takes them
    pairs = check(dict[EnvName, Line], parse_pairs(values, "--env", ConfigError), "--env")
    for key, value in pairs.items():
        problem = secret_problem(key, value)
        if problem:  # a value given here is in argv and the probe's record
            raise ConfigError(f"--env: {problem}; export HF_TOKEN in the environment of inv "
                              "probe instead (it is passed to the container by name)")
    return pairs


def _report(result, json_path) -> None:
    if json_path == "-":
        print(result.to_json(), end="")
        console.info(result.render())
        return
    print(terminal(result.render()))  # what the image printed is others' text
    if json_path:
        result.write_json(json_path)
        console.info(f"result written to {json_path}")
