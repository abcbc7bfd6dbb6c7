"""Every build flag of cli/flags.py lands on the spec field it names: each flag given alone, with
a value a user would give, is read by the spec model (``load_spec``) into the same value at the
flag's field, so a flag whose field is misspelt, renamed or read another way fails here, and a
new flag fails until it has an example below. Then the rules ``spec_overrides`` adds to the
table: ``--compile`` against ``--mode``, a custom repository's default branch, FlashInfer's
source defaults and a FlashInfer PR of a fork."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from edgevllm.cli.flags import BUILD_FLAGS, by_name, spec_overrides
from edgevllm.common.errors import ConfigError, SpecError
from edgevllm.specs.buildspec import load_spec
from edgevllm.specs.moderecord import mode_records
from edgevllm.specs.refs import UPSTREAM_REPOS

HERE = str(Path(__file__).resolve().parent)
# flag -> (what Invoke hands the task, what the spec then holds at the flag's field)
EXAMPLES: dict[str, tuple[Any, Any]] = {
    "vllm_repo": ("https://github.com/someone/vllm.git", "https://github.com/someone/vllm.git"),
    "vllm_ref": ("v0.33.0", "v0.33.0"),
    "vllm_pr": ("12345", 12345),
    "cherry_pick": (["111,222", "333"], ["111", "222", "333"]),
    "allow_doc_conflicts": (True, True),
    "flashinfer_version": ("0.6.1", "0.6.1"),
    "flashinfer_repo": ("https://github.com/me/flashinfer.git",
                        "https://github.com/me/flashinfer.git"),
    "flashinfer_ref": ("v0.6.1", "v0.6.1"),
    "flashinfer_pr": ("77", 77),
    "flashinfer_cherry_pick": (["88"], ["88"]),
    "mod": (["fastsafetensors"], ["fastsafetensors"]),
    "add_mod": (["fastsafetensors"], ["fastsafetensors"]),
    "no_mod": (["fused-moe-configs"], ["fused-moe-configs"]),
    "max_jobs": (" 6 ", 6),
    "nvcc_threads": ("3", 3),
    "image_repo": ("registry.example/edge/vllm", "registry.example/edge/vllm"),
    "tag": (["registry.example/edge/vllm:a"], ["registry.example/edge/vllm:a"]),
    "build_arg": (["A=1", "B=x=y"], {"A": "1", "B": "x=y"}),
    "env": (["VLLM_LOGGING_LEVEL=DEBUG"], {"VLLM_LOGGING_LEVEL": "DEBUG"}),
    "package": (["numpy=2.2.6"], {"numpy": "2.2.6"}),
    "compile_cache_id": ("team-a", "team-a"),
    "compile_cache": ("redis://127.0.0.1:6379", "redis://127.0.0.1:6379"),
    "dist": ("http://127.0.0.1:10600", "http://127.0.0.1:10600"),
    "dist_token_file": ("/run/token", "/run/token"),
    "wheel_cache": ("registry.example/edge/wheels", "registry.example/edge/wheels"),
    "rerun_steps": (True, True),
    "reproducible": (True, True),
    "platform": ("linux/arm64", "linux/arm64"),
    "mode": ("compile", "compile"),
    "toolchain": ("cross", "cross"),
    "extensions": (["cumem_allocator"], ["cumem_allocator"]),
    "vllm_wheel": ("0.33.0", "0.33.0"),
    "override": (["certifi>=2026.10.18"], ["certifi>=2026.10.18"]),
    "base_image": ("docker.io/library/ubuntu:24.04", "docker.io/library/ubuntu:24.04"),
    "publish_cache": (True, True),
    "aot": ("aot.json", "aot.json"),
    "compile": (True, "compile"),
    "cmake_dep": ([f"cutlass={HERE}"], {"cutlass": HERE}),  # a folder that is there
}
# Flags that name no spec field: read by the task itself (a file, a recipe, an old name).
NOT_FIELDS = {"target", "spec", "lock", "recipe", "warm"}


def _at(spec: Any, path: str) -> Any:
    value = spec
    for part in path.split("."):
        value = getattr(value, part)
    return value


def test_every_flag_with_a_field_has_an_example_here():
    fields = {f.name for f in BUILD_FLAGS if f.field not in (None, "target")}
    assert fields == set(EXAMPLES), ("a build flag without an example: add it to EXAMPLES",
                                     fields ^ set(EXAMPLES))
    assert {f.name for f in BUILD_FLAGS} - fields == NOT_FIELDS


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_a_flag_alone_lands_on_its_field_as_given(name):
    given, held = EXAMPLES[name]
    flag = by_name(BUILD_FLAGS)[name]
    assert flag.field is not None
    overrides = spec_overrides({name: given})
    spec = load_spec("spark", overrides=overrides)
    value = _at(spec, flag.field)
    if isinstance(held, dict):
        value = {k: str(v) for k, v in value.items()}  # a folder is read as a path
    assert value == held, (flag.option, overrides)


def test_compile_asks_for_the_compile_mode_and_refuses_another():
    compile_mode = by_name(BUILD_FLAGS)["compile"].const
    assert compile_mode in mode_records()
    assert spec_overrides({"compile": True})["mode"] == compile_mode
    assert spec_overrides({"compile": True, "mode": compile_mode})["mode"] == compile_mode
    other = next(m for m in sorted(mode_records()) if m != compile_mode)
    with pytest.raises(SpecError, match=f"--compile and --mode {other}: give one of them"):
        spec_overrides({"compile": True, "mode": other})


def test_a_custom_repository_without_a_ref_builds_its_default_branch():
    data = spec_overrides({"vllm_repo": "someone/vllm"})
    assert data["vllm"] == {"repo": "someone/vllm", "ref": None}
    assert spec_overrides({"vllm_repo": "someone/vllm", "vllm_ref": "main"})["vllm"]["ref"] == \
        "main"
    assert "ref" not in spec_overrides({"vllm_repo": "someone/vllm", "vllm_pr": "5"})["vllm"]


def test_a_flashinfer_source_flag_makes_a_source_from_upstream_with_the_vllm_allowance():
    data = spec_overrides({"flashinfer_ref": "v0.6.1"})
    assert data["flashinfer"]["source"] == {"ref": "v0.6.1", "repo": UPSTREAM_REPOS["flashinfer"]}
    data = spec_overrides({"flashinfer_pr": "9", "allow_doc_conflicts": True})
    assert data["flashinfer"]["source"]["allow_doc_conflicts"] is True
    assert data["vllm"]["allow_doc_conflicts"] is True
    assert "source" not in spec_overrides({"flashinfer_version": "0.6.1"})["flashinfer"]


def test_a_flashinfer_pr_of_a_fork_builds_the_fork_and_another_repo_is_refused():
    data = spec_overrides({"flashinfer_pr": "https://github.com/me/flashinfer/pull/41"})
    assert data["flashinfer"]["source"] == {"pr": 41,
                                            "repo": "https://github.com/me/flashinfer.git"}
    with pytest.raises(SpecError, match="is a PR of another repository than --flashinfer-repo "
                                        "other/flashinfer"):
        spec_overrides({"flashinfer_pr": "https://github.com/me/flashinfer/pull/41",
                        "flashinfer_repo": "other/flashinfer"})


@pytest.mark.parametrize(("values", "said"), [
    ({"max_jobs": "6 jobs"}, "--max-jobs '6 jobs': expected a whole number"),
    ({"max_jobs": ""}, None),  # not given: nothing lands
    ({"cherry_pick": ["12", ""]}, None),
    ({"build_arg": ["=1"]}, "--build-arg"),
    ({"package": ["numpy"]}, "--package"),
], ids=["words", "empty", "empty-pick", "no-key", "no-version"])
def test_values_at_the_edges(values, said):
    if said is None:
        data = spec_overrides(values)
        assert "max_jobs" not in data
        return
    with pytest.raises(ConfigError, match=said):
        spec_overrides(values)
