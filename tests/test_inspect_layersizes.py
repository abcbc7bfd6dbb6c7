"""Bytes per layer and shadowed bytes: the stacking rules (overwrite, whiteout, opaque folder),
a real ``docker save`` layout read through verify's tar reader, and the size budget."""

from __future__ import annotations

import gzip
import io
import json
import tarfile

import pytest

from edgevllm.inspect.layersizes import (
    LayerFiles,
    SizeBudgetError,
    check_budget,
    layers_of_save,
    measure,
    summary,
)
from support.tars import tar_bytes


def layer(step: str, files: dict[str, int], whiteouts=(), opaque=()) -> LayerFiles:
    return LayerFiles(step, dict(files), list(whiteouts), list(opaque))


def test_overwritten_and_deleted_bytes_count_against_the_layer_that_wrote_them():
    sizes = measure([
        layer("base", {"a": 100, "d/b": 50, "d/c": 25, "dx": 7}),
        layer("rewrite a, delete d/b", {"a": 10, "n": 1}, whiteouts=["d/b"]),
        layer("opaque d", {"d/new": 3}, opaque=["d"]),
        layer("delete n", {}, whiteouts=["n"]),
    ])
    assert [s.bytes for s in sizes] == [182, 11, 3, 0]
    assert [s.files for s in sizes] == [4, 2, 1, 0]
    # a, d/b (whiteout), d/c (opaque d) of the base; dx is not under d; n of layer 1
    assert [s.shadowed_bytes for s in sizes] == [175, 1, 0, 0]
    assert summary(sizes)["shadowed_bytes"] == 176 and summary(sizes)["total_bytes"] == 196


def test_a_whiteout_of_a_folder_shadows_everything_under_it_and_nothing_beside_it():
    sizes = measure([layer("", {"v/x/1": 5, "v/x/2": 6, "v/xy": 9, "v/x0": 2}),
                     layer("", {}, whiteouts=["v/x"])])
    assert sizes[0].shadowed_bytes == 11


def test_nothing_shadowed_when_layers_only_add():
    sizes = measure([layer("", {"a": 1}), layer("", {"b": 2})])
    assert [s.shadowed_bytes for s in sizes] == [0, 0]


def _tar(members: dict[str, bytes | None]) -> bytes:
    """A tar of regular files (bytes) and folders (None)."""
    return tar_bytes((name, data, 0) for name, data in members.items())


def docker_save(layers: list[bytes], history: list[dict]) -> bytes:
    names = [f"{i}/layer.tar" for i in range(len(layers))]
    config = json.dumps({"history": history,
                         "rootfs": {"diff_ids": [f"sha256:{i}" for i in range(len(layers))]}})
    members: dict[str, bytes | None] = {"cfg.json": config.encode()}
    members |= dict(zip(names, layers, strict=True))
    members["manifest.json"] = json.dumps([{"Config": "cfg.json", "Layers": names}]).encode()
    return _tar(members)


def test_a_docker_save_archive_gives_each_layer_its_step_and_shadowed_bytes():
    base = _tar({"opt/": None, "opt/venv/": None, "opt/venv/vllm.so": b"x" * 900,
                 "opt/venv/a.py": b"y" * 40})
    tree = gzip.compress(_tar({"opt/venv/": None, "opt/venv/vllm.so": b"z" * 300}))
    mods = _tar({"opt/venv/.wh.a.py": b""})
    history: list[dict] = [{"created_by": "RUN install the release"}, {"created_by": "ENV A=1",
                                                           "empty_layer": True},
               {"created_by": "RUN install the tree"}, {"created_by": "RUN mods"}]
    layers = layers_of_save(io.BytesIO(docker_save([base, tree, mods], history)), "test")
    sizes = measure(layers)
    assert [s.step for s in sizes] == ["RUN install the release", "RUN install the tree",
                                       "RUN mods"]
    assert [s.bytes for s in sizes] == [940, 300, 0]
    assert sizes[0].shadowed_bytes == 940   # the release's vllm.so under the tree's, a.py deleted


def test_an_image_over_its_budget_fails_in_one_line_naming_its_largest_layers():
    sizes = measure([layer("RUN install", {"a": 2_500_000_000}), layer("RUN mods", {"b": 10})])
    check_budget(sizes, None, "spark")
    check_budget(sizes, 3, "spark")
    with pytest.raises(SizeBudgetError) as raised:
        check_budget(sizes, 2, "spark")
    message = str(raised.value)
    assert raised.value.exit_code == 6 and "\n" not in message
    assert "2.50 GB, over target 'spark' field 'size_budget_gb' (2 GB)" in message
    assert "2.500 GB  RUN install" in message
