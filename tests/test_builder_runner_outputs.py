"""What the build driver (``builder/runner.py``) decides and writes without running BuildKit: the
compile key's inputs (which changes must and must not give a new key), the render context written
whole, compiled wheels reused only when they are the user's, the build summary, and the workspace's
layout. Real files, real permissions; no engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgevllm.builder.runner import (
    BuildResult,
    Workspace,
    compile_key,
    engine_gone,
    export_wheels,
    own_wheels,
    summary_json,
    with_options,
    write_context,
    write_summary,
)
from edgevllm.containers.docker import BuildOptions, DockerEngine
from edgevllm.specs.lock import BaseImageLock

DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64

DOCKERFILE = """# syntax=docker/dockerfile:1
FROM nvcr.io/nvidia/cuda:13.0.0-devel-ubuntu24.04 AS build
RUN --mount=type=cache,target=/root/.ccache,id=ccache-spark make
FROM build AS wheels
RUN python -m build --wheel
FROM nvcr.io/nvidia/cuda:13.0.0-runtime-ubuntu24.04 AS runtime
COPY --from=wheels /dist /wheels
RUN pip install /wheels/*.whl
"""
SOURCES = {"vllm": "tree-1"}
ARGS = {"VLLM_VERSION": "0.1.0"}


def key(text: str = DOCKERFILE, sources=None, args=None, bases=None) -> str:
    return compile_key(text, sources or SOURCES, args or ARGS, bases)


# -- the compile key -------------------------------------------------------------------------------
def test_the_key_is_sixteen_hex_digits_and_stable():
    first = key()
    assert len(first) == 16 and int(first, 16) >= 0
    assert key() == first


@pytest.mark.parametrize("change", [
    lambda t: t.replace("make\n", "make -j8\n"),  # a compile step
    lambda t: t.replace("python -m build --wheel", "python -m build --wheel --no-isolation"),
    lambda t: t.replace("13.0.0-devel", "13.1.0-devel"),  # the build stage's base
])
def test_a_change_in_a_stage_the_wheels_need_is_a_new_key(change):
    assert key(change(DOCKERFILE)) != key()


def test_a_change_in_the_runtime_stage_keeps_the_key():
    changed = DOCKERFILE.replace("pip install /wheels/*.whl", "pip install --no-deps /wheels/*")
    assert key(changed) == key()


def test_sources_and_build_args_are_inputs():
    assert key(sources={"vllm": "tree-2"}) != key()
    assert key(args={"VLLM_VERSION": "0.1.1"}) != key()
    assert key(args={**ARGS, "MAX_JOBS": "12"}) != key()


def test_a_cache_mounts_id_is_not_an_input():
    renamed = DOCKERFILE.replace("id=ccache-spark", "id=my-own-builder")
    assert key(renamed) == key()
    unnamed = DOCKERFILE.replace(",id=ccache-spark", "")
    assert key(unnamed) == key()
    moved = DOCKERFILE.replace("target=/root/.ccache", "target=/ccache")
    assert key(moved) != key()


def test_a_bases_digest_counts_once_written_or_locked():
    pinned = DOCKERFILE.replace("13.0.0-devel-ubuntu24.04 AS build",
                                f"13.0.0-devel-ubuntu24.04@{DIGEST_A} AS build")
    bases = {"build": BaseImageLock(ref="nvcr.io/nvidia/cuda:13.0.0-devel-ubuntu24.04",
                                    digest=DIGEST_A)}
    # the first build renders the ref, the lock rebuild ref@digest: one key for both
    assert key(pinned, bases=bases) == key(DOCKERFILE, bases=bases)
    other = {"build": BaseImageLock(ref=bases["build"].ref, digest=DIGEST_B)}
    assert key(DOCKERFILE, bases=other) != key(DOCKERFILE, bases=bases)
    # a base only the engine has (no digest) adds nothing
    local = {"build": BaseImageLock(ref=bases["build"].ref)}
    assert key(DOCKERFILE, bases=local) == key()


def test_a_platform_flag_keeps_the_digest_rule():
    plain = DOCKERFILE.replace("FROM nvcr", "FROM --platform=linux/arm64 nvcr", 1)
    pinned = plain.replace("ubuntu24.04 AS build", f"ubuntu24.04@{DIGEST_A} AS build")
    assert key(pinned) == key(plain)


def test_a_dockerfile_without_a_wheels_stage_has_no_key():
    with pytest.raises(KeyError, match="no stage named 'wheels'"):
        key(DOCKERFILE.replace("AS wheels", "AS other").replace("--from=wheels", "--from=other"))


# -- the context -----------------------------------------------------------------------------------
def test_write_context_writes_the_dockerfile_and_meta_whole(tmp_path):
    ws = Workspace(tmp_path / "out")
    write_context(ws, "FROM scratch\n", {"lock.json": "{}\n", "note": "one"})
    assert (ws.context / "Dockerfile").read_text() == "FROM scratch\n"
    meta = ws.context / "edgevllm-meta"
    assert {p.name: p.read_text() for p in meta.iterdir()} == {"lock.json": "{}\n",
                                                             "note": "one"}
    # a second render replaces the meta folder: nothing of the first is left in it
    write_context(ws, "FROM busybox\n", {"lock.json": "{\"a\": 1}\n"})
    assert sorted(p.name for p in meta.iterdir()) == ["lock.json"]
    assert (ws.context / "Dockerfile").read_text() == "FROM busybox\n"
    assert not [p for p in ws.context.rglob("*") if ".tmp" in p.name]


def test_workspace_layout_and_a_render_folder(tmp_path):
    ws = Workspace(tmp_path)
    assert ws.context == tmp_path / "context" and ws.logs == tmp_path / "logs"
    assert ws.wheels("abcd") == tmp_path / "wheels" / "abcd"
    assert Workspace(tmp_path, context_dir=tmp_path / "r").context == tmp_path / "r"


# -- compiled wheels reused ------------------------------------------------------------------------
def wheels_folder(root: Path, mode: int = 0o755) -> Path:
    folder = root / "wheels" / "0123456789abcdef"
    folder.mkdir(parents=True)
    (folder / "vllm-0.1.0-cp312-cp312-linux_aarch64.whl").write_bytes(b"PK")
    for path in (root, root / "wheels", folder):
        path.chmod(mode)
    return folder


def test_the_users_compiled_wheels_are_reused_without_a_build(tmp_path):
    folder = wheels_folder(tmp_path / "spark")
    options = BuildOptions(context=tmp_path, dockerfile=tmp_path / "Dockerfile")
    # no runner is needed: a reuse never reaches BuildKit (None would fail if it did)
    assert export_wheels(None, options, folder) is False  # type: ignore[arg-type]
    assert own_wheels(folder, tmp_path / "spark")


def test_wheels_others_can_write_are_not_the_users(tmp_path, capsys):
    folder = wheels_folder(tmp_path / "spark")
    folder.chmod(0o777)
    assert not own_wheels(folder, tmp_path / "spark")
    assert "compiled wheels in" in capsys.readouterr().err


def test_a_wheel_file_others_can_write_is_not_the_users(tmp_path, capsys):
    folder = wheels_folder(tmp_path / "spark")
    wheel = next(folder.glob("*.whl"))
    wheel.chmod(0o666)
    assert not own_wheels(folder, tmp_path / "spark")


def test_a_linked_wheel_is_not_the_users(tmp_path):
    folder = wheels_folder(tmp_path / "spark")
    elsewhere = tmp_path / "elsewhere.whl"
    elsewhere.write_bytes(b"PK")
    (folder / "vllm-0.2.0-cp312-cp312-linux_aarch64.whl").symlink_to(elsewhere)
    assert not own_wheels(folder, tmp_path / "spark")


# -- options and the summary -----------------------------------------------------------------------
def test_with_options_changes_a_copy():
    base = BuildOptions(context=Path("/c"), dockerfile=Path("/c/Dockerfile"), tags=["a:1"])
    changed = with_options(base, target="wheels", tags=())
    assert (changed.target, list(changed.tags)) == ("wheels", [])
    assert base.tags == ["a:1"] and base.target != "wheels"
    assert changed.context == base.context


def result(tmp_path: Path) -> BuildResult:
    return BuildResult(image="r/vllm:1", tags=["r/vllm:1", "r/vllm:dev"], image_id=DIGEST_A,
                       lock_path=tmp_path / "1.lock.json", log_path=tmp_path / "b.log",
                       wheels_dir=tmp_path / "w", compiled=True,
                       verify={"passed": True}, layers={"total_bytes": 3})


def test_the_summary_is_json_with_paths_as_text(tmp_path):
    path = tmp_path / "summary.json"
    write_summary(result(tmp_path), path)
    written = json.loads(path.read_text())
    assert written == json.loads(json.dumps(summary_json(result(tmp_path))))
    assert written["lock"] == str(tmp_path / "1.lock.json")
    assert written["verify"] == {"passed": True} and written["compiled"] is True
    assert written["tool_version"]


def test_the_summary_carries_every_outcome_of_the_result(tmp_path):
    # a field added to BuildResult must reach the summary ``--json`` readers use (or be named
    # here as a local path the summary leaves out)
    left_out = {"wheels_dir"}
    renamed = {"lock_path": "lock", "log_path": "log", "mods_record": "mods"}
    fields = set(BuildResult.__dataclass_fields__) - left_out
    assert {renamed.get(f, f) for f in fields} <= set(summary_json(result(tmp_path)))


def test_a_local_engine_is_never_gone():
    assert engine_gone(DockerEngine()) is False
