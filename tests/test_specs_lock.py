"""The lock model: JSON/YAML round trips, atomic writes, a stable hash, deterministic tags, and
one-line errors for missing, malformed and newer lock files. Pure data; no git, no Docker."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from edgevllm.common.errors import LockError, MissingInputError
from edgevllm.specs.lock import (
    LOCK_FILENAME,
    BaseImageLock,
    Lock,
    ModLock,
    PickLock,
    SourceLock,
    image_tag,
    label_value,
    lock_hash,
    parse_lock,
    read_lock,
    write_lock,
)

SHA_A, SHA_B, SHA_C, SHA_D = ("a" * 40, "b" * 40, "c" * 40, "d" * 40)
DOCKER_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


def sample_lock(**overrides) -> Lock:
    pick = PickLock(
        spec="40082",
        kind="pr",
        repo="https://github.com/vllm-project/vllm.git",
        pr=40082,
        head_sha=SHA_B,
        merge_base=SHA_C,
        diff_sha256="e" * 64,
        commit=SHA_D,
    )
    vllm = SourceLock(
        name="vllm",
        repo="https://github.com/vllm-project/vllm.git",
        ref="v0.20.1",
        base_sha=SHA_A,
        picks=[pick],
        commit=SHA_D,
        tree=SHA_C,
        version="0.20.1",
    )
    fields: dict[str, Any] = dict(
        target="spark",
        created_at="2026-11-22T00:00:00Z",
        base_images={
            "devel": BaseImageLock(
                ref="nvcr.io/nvidia/cuda:13.0.0-devel-ubuntu24.04", digest="sha256:" + "1" * 64
            )
        },
        vllm=vllm,
        packages={"torch": "2.10.0+cu130", "nvidia-cutlass-dsl-libs-cu13": "4.4.2"},
        mods=[ModLock(name="nvfp4-b12x", version="1.0.0")],
        build_args={"MAX_JOBS": "8"},
        tags=["mine:latest"],
    )
    fields.update(overrides)
    return Lock(**fields)


@pytest.mark.parametrize("name", [LOCK_FILENAME, "spark.lock.yaml", "nested/dir/build-lock.yml"])
def test_round_trip_json_and_yaml(tmp_path, name):
    lock = sample_lock()
    path = write_lock(lock, tmp_path / name)
    assert read_lock(path) == lock
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporaries left behind
    if name.endswith(".json"):
        assert json.loads(path.read_text())["schema_version"] == 1


def test_lock_file_name_must_contain_lock(tmp_path):
    with pytest.raises(LockError, match="must contain 'lock'"):
        write_lock(sample_lock(), tmp_path / "build.json")
    assert not (tmp_path / "build.json").exists()


def test_hash_ignores_creation_time_and_user_tags():
    a = sample_lock()
    b = sample_lock(created_at="2030-01-01T00:00:00Z", tags=["other:tag"])
    assert lock_hash(a) == lock_hash(b) and image_tag(a) == image_tag(b)


@pytest.mark.parametrize(
    "change",
    [
        {"target": "thor"},
        {"packages": {"torch": "2.10.1"}},
        {"mods": []},
        {"build_args": {"MAX_JOBS": "4"}},
        {
            "base_images": {
                "devel": BaseImageLock(ref="nvcr.io/nvidia/cuda:13.0.1-devel-ubuntu24.04")
            }
        },
    ],
)
def test_hash_and_tag_follow_every_input(change):
    assert lock_hash(sample_lock(**change)) != lock_hash(sample_lock())
    assert image_tag(sample_lock(**change)) != image_tag(sample_lock())


def test_hash_follows_a_moved_pick_head():
    lock = sample_lock()
    moved = lock.model_copy(deep=True)
    assert moved.vllm is not None
    moved.vllm.picks[0].head_sha = SHA_A
    assert lock_hash(moved) != lock_hash(lock)


def test_image_tag_is_deterministic_and_valid():
    lock = sample_lock()
    tag = image_tag(lock)
    assert tag == f"0.20.1-spark-{lock_hash(lock)[:12]}"
    assert image_tag(Lock.model_validate_json(label_value(lock))) == tag
    odd = sample_lock(target=None)
    assert odd.vllm is not None
    odd.vllm.version = "0.20.1+5.gabcdef012345"
    assert DOCKER_TAG.match(image_tag(odd)) and image_tag(odd).startswith(
        "0.20.1-5.gabcdef012345-any-"
    )
    odd.vllm.version = "9" * 200
    assert DOCKER_TAG.match(image_tag(odd)) and image_tag(odd).endswith(lock_hash(odd)[:12])


def test_label_value_is_the_whole_lock():
    lock = sample_lock()
    assert Lock.model_validate_json(label_value(lock)) == lock


def test_secrets_are_refused_in_build_args():
    with pytest.raises(ValueError, match="HF_TOKEN looks like a secret"):
        sample_lock(build_args={"HF_TOKEN": "hf_x"})


def test_missing_lock_file(tmp_path):
    with pytest.raises(MissingInputError, match="no such lock file; check the path given to"):
        read_lock(tmp_path / "nope.lock.json")


@pytest.mark.parametrize(
    "text, needle",
    [
        ("{not json", "not valid JSON (line 1"),
        ("[1, 2]", "expected a mapping"),
        ('{"schema_version": 99}', "schema_version 99 is newer"),
        ('{"vllm": {"name": "vllm"}}', "field 'vllm.repo': Field required"),
        ('{"surprise": 1}', "unknown field 'surprise'"),
    ],
)
def test_malformed_locks_fail_with_one_line_naming_the_field(text, needle):
    with pytest.raises(LockError) as err:
        parse_lock(text, "x.lock.json")
    assert str(err.value).startswith("x.lock.json: ") and needle in str(err.value)


@pytest.mark.parametrize("field", ["base_sha", "commit", "tree", "picks.0.head_sha",
                                   "picks.0.merge_base", "picks.0.commit"])
def test_short_shas_are_refused_in_a_lock(field):
    data = json.loads(sample_lock().model_dump_json())
    where = data["vllm"]
    *path, last = field.split(".")
    for key in path:
        where = where[int(key)] if key.isdigit() else where[key]
    where[last] = "abc1234"
    with pytest.raises(LockError, match=f"field 'vllm.{field}'.*full lowercase hex SHA"):
        parse_lock(json.dumps(data), "x.lock.json")
    where[last] = "A" * 40  # upper case is another spelling of the same object: refused too
    with pytest.raises(LockError, match="full lowercase hex SHA"):
        parse_lock(json.dumps(data), "x.lock.json")


def test_yaml_lock_errors_name_the_file(tmp_path):
    path = tmp_path / "bad.lock.yaml"
    path.write_text("vllm: [unclosed\n")
    with pytest.raises(LockError, match="bad.lock.yaml: line [0-9]+: not valid YAML"):
        read_lock(path)


def test_cmake_deps_from_before_supplied_folders_hash_as_before():
    """A CMake dependency record from a lock made before --cmake-dep (no submodule trees, no
    ``supplied``) renders as it did: the same canonical JSON, so the same hash and tag."""
    from edgevllm.specs.lock import CMakeDepLock, canonical_json

    old: dict[str, Any] = {"repo": "https://github.com/NVIDIA/cutlass", "ref": "v4.7.1",
                           "commit": SHA_A, "tree": SHA_B, "env_var": "VLLM_CUTLASS_SRC_DIR",
                           "declared_at": "x.cmake:3", "submodules": {}}
    lock = sample_lock(cmake_deps={"cutlass": CMakeDepLock(**old)})
    assert json.loads(canonical_json(lock))["cmake_deps"] == {"cutlass": old}
    with_trees = sample_lock(cmake_deps={"cutlass": CMakeDepLock(
        **{**old, "submodules": {"x": SHA_C}}, submodule_trees={"x": SHA_D})})
    assert lock_hash(with_trees) != lock_hash(lock)


def test_a_supplied_dependency_has_a_tree_and_no_commit():
    from edgevllm.specs.lock import CMakeDepLock

    supplied = CMakeDepLock(repo="https://github.com/NVIDIA/cutlass", ref="v4.7.1", tree=SHA_B,
                            env_var="VLLM_CUTLASS_SRC_DIR", supplied=True)
    again = parse_lock(json.dumps(json.loads(sample_lock(cmake_deps={"cutlass": supplied})
                                             .model_dump_json())))
    assert again.cmake_deps["cutlass"] == supplied
    for bad in ({"supplied": True, "commit": SHA_A}, {"supplied": False}):
        data = json.loads(sample_lock(cmake_deps={"cutlass": supplied}).model_dump_json())
        data["cmake_deps"]["cutlass"].update(bad)
        data["cmake_deps"]["cutlass"].setdefault("commit", None)
        with pytest.raises(LockError, match="a fetched dependency has a commit, a supplied one"):
            parse_lock(json.dumps(data))


def test_the_plans_arches_are_read_with_every_type_checked():
    """One reader of ``kernel_plan.extensions`` for a lock edgevllm wrote and an image's label
    (others' data): entries of the wrong shape are skipped, no plan is None."""
    from edgevllm.specs.lock import planned_arches_of

    plan = {"extensions": {"_moe_C": {"arches": ["12.1a", "8.0+PTX"]}, "_C": {"arches": "12.1a"},
                           "x": ["12.1a"], "_qutlass_C": {"arches": []}}}
    assert planned_arches_of(plan) == {"_moe_C": ["12.1a", "8.0+PTX"], "_qutlass_C": []}
    assert planned_arches_of({}) is None and planned_arches_of(None) is None
    assert planned_arches_of({"extensions": ["_C"]}) is None and planned_arches_of("plan") is None


def test_a_picks_identity_is_one_set_of_fields_on_the_request_the_pick_and_the_record():
    """``PICK_IDENTITY`` names fields that the request, the resolved pick and the lock record
    all have; a lock's pick becomes a request that keeps its identity and pins its refs."""
    import dataclasses

    from edgevllm.sources.cherrypick import ResolvedPick
    from edgevllm.sources.requests import PickRequest
    from edgevllm.specs.lock import PICK_IDENTITY, PickLock, identity_of

    resolved = {f.name for f in dataclasses.fields(ResolvedPick)}
    for name in PICK_IDENTITY:
        assert name in PickLock.model_fields and name in PickRequest.model_fields
        assert name in resolved
    record = PickLock(spec="o/r#7", kind="pr", repo="https://github.com/o/r", pr=7,
                      head_sha="a" * 40, merge_base="b" * 40, diff_sha256="c" * 64)
    request = PickRequest.pinned(record)
    assert identity_of(request) == identity_of(record) == {
        "spec": "o/r#7", "kind": "pr", "repo": "https://github.com/o/r", "pr": 7}
    assert (request.sha, request.merge_base, request.diff_sha256) == \
        ("a" * 40, "b" * 40, "c" * 64)
