"""The cross roads (specs/cross.py + crossroads.yaml): which builder cross-compiles which target
platform, with which compiler and nvcc flags, and the one-line refusals."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from edgevllm.common.errors import ConfigError, MissingToolError, SpecError
from edgevllm.common.schema import parse_model
from edgevllm.specs import cross
from edgevllm.specs.cross import CrossRoad, CrossRoads, cross_road, gcc_major, road_for_target
from edgevllm.specs.targets import all_targets
from support.checks import present


def test_every_arm64_target_has_a_road_from_amd64_and_none_goes_back():
    for target in all_targets():
        road = road_for_target("linux/amd64", target.platform, target.cuda_version, target.name)
        assert road.cuda_target_dir == "sbsa-linux"
        assert road.nvcc_flags() == ["-ccbin", "aarch64-linux-gnu-g++", "-target-dir",
                                     "sbsa-linux"]
    assert cross_road("linux/arm64", "linux/amd64") is None
    with pytest.raises(SpecError, match="no cross road from linux/arm64 to linux/amd64"):
        road_for_target("linux/arm64", "linux/amd64", "13.0.2", "x86-box")


def test_a_target_before_cuda_13_is_not_on_the_sbsa_road():
    with pytest.raises(SpecError, match=r"CUDA 12\.6.*needs CUDA >= 13\.0"):
        road_for_target("linux/amd64", "linux/arm64", "12.6.3", "orin")


@pytest.mark.parametrize("field,value", [
    ("triple", "aarch64-linux-gnu; rm -rf /"),
    ("cuda_target_dir", "../sbsa"),
    ("apt_packages", ["g++ --allow-unauthenticated"]),
    ("build_platform", "linux/amd64\n"),
    ("min_gcc", 1000),
])
def test_a_road_field_that_would_reach_a_shell_line_is_checked(field, value):
    data = yaml.safe_load(cross.ROADS_FILE.read_text())
    data["roads"][0][field] = value
    with pytest.raises(ConfigError, match=field):
        parse_model(CrossRoads, data, "crossroads.yaml")


@pytest.mark.parametrize("text,major", [("14.2.0", 14), ("13", 13), ("12.2.0\n", 12),
                                        ("gcc", None), ("", None)])
def test_gcc_major(text, major):
    assert gcc_major(text) == major


def test_the_host_compiler_is_checked_by_its_version(tmp_path, monkeypatch):
    """A real g++ that is too old for the road: here the host's own g++ stands in for a cross
    g++ under the road's name (a PATH of one link), and the road asks for more than it is."""
    gxx = shutil.which("g++")
    assert gxx, "g++ is missing: apt-get install g++"
    version = subprocess.run([gxx, "-dumpfullversion"], capture_output=True, text=True).stdout
    road = CrossRoad(**{**yaml.safe_load(cross.ROADS_FILE.read_text())["roads"][0],
                        "min_gcc": present(gcc_major(version), version) + 1})
    (tmp_path / road.host_compiler).symlink_to(gxx)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(MissingToolError, match=rf"is gcc {version.strip()}; .* >= "):
        cross.check_host_compiler(road)
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    with pytest.raises(MissingToolError, match="aarch64-linux-gnu-g.. is missing: install"):
        cross.check_host_compiler(road)
