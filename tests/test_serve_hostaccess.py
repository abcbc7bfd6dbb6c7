"""What a recipe's container may ask of the host (serve/recipe/hostaccess.py): the shipped
recipes pass, ``--privileged``, host namespaces, capabilities and devices beyond the target's,
mounts of ``/``, ``/etc``, ``$HOME`` or the Docker socket are one line at render time (so for
``inv serve``, its clusters, ``inv compose``, ``inv warm`` and ``inv bench``), unless
``--allow-host-access``."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgevllm.common.errors import RecipeError
from edgevllm.serve.compose import compose_document
from edgevllm.serve.launch import run_options
from edgevllm.serve.recipe.hostaccess import check_host_access
from edgevllm.serve.recipe.load import all_recipes, parse_recipe, render
from support.properties import PROPERTY, bounded

HOME = os.path.expanduser("~")


def recipe(target: str = "spark", mode: str = "solo", **container) -> dict:
    data = {"name": "r", "description": "d", "targets": [target], "status": {target: "untested"},
            "image": "edgevllm/vllm:x", "model": "org/m", "serve": {"args": []},
            "container": container}
    if mode != "solo":
        data["topology"] = {"mode": mode, "nodes": 2, "tensor_parallel": 2}
    return data


def rendered(data: dict, allow: bool = False):
    return render(parse_recipe(data, "r.yaml"), allow_host_access=allow)


def test_every_shipped_recipe_asks_nothing_of_the_host():
    for loaded in all_recipes():
        for target in loaded.recipe.status:
            forms = [False, True] if loaded.recipe.topology.cluster else [False]
            for clustered in forms:
                values: dict[str, object] = {"target": target,
                                             **{k: "x" for k in loaded.recipe.required}}
                render(loaded, values, clustered=clustered)  # raises on a host request


HOSTILE_EXTRA = [
    ["--privileged"], ["--pid=host"], ["--pid", "host"], ["--uts=host"], ["--userns=host"],
    ["--cgroupns=host"], ["--network=host"], ["--net", "host"], ["--network=container:db"],
    ["--ipc=container:db"], ["--cap-add=SYS_ADMIN"], ["--cap-add", "ALL"],
    ["--cap-add=cap_sys_ptrace"], ["--security-opt", "seccomp=unconfined"],
    ["--security-opt=apparmor=unconfined"], ["--device=/dev/mem"], ["--device", "/dev/sda:/d"],
    ["--volumes-from", "other"], ["--group-add", "docker"], ["--env-file", "/etc/shadow"],
    ["--device-cgroup-rule", "a *:* rwm"], ["--sysctl", "kernel.x=1"], ["-v", "/:/host"],
    ["--volume=/etc:/etc2"], ["-v", "~:/h"], ["-v", "$HOME:/h"], ["-v", f"{HOME}/.ssh:/s:ro"],
    ["-v", "/var/run/docker.sock:/var/run/docker.sock"], ["-v", "/run:/r"], ["-v", "/var:/v"],
    ["--mount", "type=bind,source=/,target=/host"], ["--mount=type=bind,src=/etc,dst=/e"],
    ["--runtime=sysbox-runc"], ["-e", "A=1", "--privileged"], ["--oom-kill-disable"],
    ["--init", "--entrypoint"],  # a flag without its value would take edgevllm's next word
]


@pytest.mark.parametrize("extra", HOSTILE_EXTRA, ids=[" ".join(e) for e in HOSTILE_EXTRA])
def test_a_hostile_docker_run_flag_is_one_line(extra):
    with pytest.raises(RecipeError, match="--allow-host-access") as info:
        rendered(recipe(extra=extra))
    assert "\n" not in str(info.value) and "container.extra" in str(info.value)


@pytest.mark.parametrize("volume", [
    "/:/host", "/etc:/x", "/etc/passwd:/p:ro", "~:/h", "$HOME:/h", "~/.ssh:/s", "~/.docker:/d",
    "/home:/h", "/var:/v", "/var/run/docker.sock:/s", "/run/docker.sock:/s", "/proc:/p",
    "/sys/fs:/s", "/dev:/d", "/var/lib/docker:/d", f"{HOME}/:/h", "/tmp/../etc:/e",
    "/tmp/x.sock:/s", "/" + "../" * 40 + ":/x",
])
def test_a_mount_of_the_host_is_one_line(volume):
    with pytest.raises(RecipeError, match=r"container\.volumes\[0\]") as info:
        rendered(recipe(volumes=[volume]))
    assert "--allow-host-access" in str(info.value)


@pytest.mark.parametrize("options", [
    {"ipc": "container:other"}, {"runtime": "kata"}, {"network": "host"},
    {"network": "container:x"},
])
def test_namespaces_and_runtimes_beyond_serving_are_refused(options):
    with pytest.raises(RecipeError, match="--allow-host-access"):
        rendered(recipe(**options))


def test_a_recipe_launch_cannot_root_the_jit_caches_in_the_host():
    data = {**recipe(), "launch": {"jit_cache_root": "/etc"}}
    with pytest.raises(RecipeError, match="launch.jit_cache_root"):
        rendered(data)


def test_what_serving_needs_passes():
    rendered(recipe(extra=["--device=/dev/infiniband", "--cap-add=IPC_LOCK", "--ulimit",
                           "memlock=-1", "-e", "A=1", "--shm-size=8g", "--init",
                           "--ipc=host", "--runtime=nvidia"],
                    volumes=["~/.cache/huggingface:/root/.cache/huggingface",
                             "models:/models", "/data/models:/models:ro", "/scratch"]))
    rendered(recipe(mode="ray", network="host", extra=["--network=host"]))  # a cluster


def test_the_targets_own_lists_decide_devices_and_capabilities():
    with pytest.raises(RecipeError, match="not one of the target's devices: none"):
        rendered(recipe(target="thor", extra=["--device=/dev/infiniband"]))
    with pytest.raises(RecipeError, match="IPC_LOCK"):
        rendered(recipe(extra=["--cap-add=NET_ADMIN"]))


def test_allow_host_access_grants_and_names_each(capsys):
    found = rendered(recipe(extra=["--privileged"], volumes=["/:/host"]), allow=True)
    err = capsys.readouterr().err
    assert "--allow-host-access" in err and "'--privileged'" in err and "'/'" in err
    options = run_options(found, _Local(), name="x")  # type: ignore[arg-type]
    assert "--privileged" in options.argv() and any("/:/host" in a for a in options.argv())
    assert compose_document(found)["services"]


class _Local:
    """The local engine as run_options reads it (no daemon asked)."""

    context = host = None


BASE = rendered(recipe())
SAFE = [["-e", "A=1"], ["--shm-size=1g"], ["--init"], ["--ulimit", "nofile=1024"],
        ["-v", "cache:/c"]]
UNSAFE = [["--privileged"], ["--pid=host"], ["-v", "/:/h"], ["--cap-add=SYS_ADMIN"],
          ["--security-opt", "label=disable"], ["--mount", "type=bind,src=/etc,dst=/e"],
          ["--device", "/dev/kmsg"], ["--userns", "host"]]


@PROPERTY
@given(st.lists(st.sampled_from(SAFE) | st.sampled_from(UNSAFE)
                | st.lists(st.text(alphabet="-=:/,.a-z$~ ", max_size=16), max_size=2),
                max_size=6))
def test_any_extra_flags_pass_or_are_one_line(groups):
    extra = [word for group in groups for word in group]
    changed = replace(BASE, container=BASE.container.model_copy(update={"extra": extra}))
    found = bounded(check_host_access, changed)
    if any(group in UNSAFE for group in groups):
        assert isinstance(found, RecipeError) and "--allow-host-access" in str(found)
