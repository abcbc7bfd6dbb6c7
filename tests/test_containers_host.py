"""Which device this machine is: read from the files a Jetson Thor and a DGX Spark have. There is
no device here: a folder holding those files (written as the devices write them) stands in for
the machine's root (EDGEVLLM_DEVICE_ROOT)."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgevllm.containers.host import device_description
from edgevllm.specs.targets import device_target


def thor_root(tmp_path: Path) -> Path:
    root = tmp_path / "thor"
    (root / "proc/device-tree").mkdir(parents=True, exist_ok=True)
    (root / "proc/device-tree/model").write_bytes(b"NVIDIA Jetson AGX Thor Developer Kit\0")
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/nv_tegra_release").write_text("# R38 (release), REVISION: 2.0\n")
    return root


def spark_root(tmp_path: Path) -> Path:
    root = tmp_path / "spark"
    info = root / "proc/driver/nvidia/gpus/0000:0f:01.0/information"
    info.parent.mkdir(parents=True, exist_ok=True)
    info.write_text("Model: \t\t NVIDIA GB10\nIRQ:   \t\t 42\nBus Type: \t PCIe\n")
    return root


def test_thor_spark_and_a_plain_machine(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEVLLM_DEVICE_ROOT", str(thor_root(tmp_path)))
    assert device_description() == "NVIDIA Jetson AGX Thor Developer Kit; Jetson (L4T)"
    assert device_target() == ("thor", "NVIDIA Jetson AGX Thor Developer Kit; Jetson (L4T)")
    monkeypatch.setenv("EDGEVLLM_DEVICE_ROOT", str(spark_root(tmp_path)))
    assert device_target() == ("spark", "NVIDIA GB10")
    monkeypatch.setenv("EDGEVLLM_DEVICE_ROOT", str(tmp_path / "plain"))
    assert device_description() == "" and device_target() is None


@pytest.mark.parametrize("device, target", [("thor", "thor"), ("spark", "spark")])
def test_serve_picks_the_device_and_says_so(device, target, tmp_path, cli):
    root = (thor_root if device == "thor" else spark_root)(tmp_path)
    code, out, err = cli("serve", "qwen3-8b-nvfp4", "--dry-run",
                         env={"EDGEVLLM_DEVICE_ROOT": str(root)})
    assert code == 0, err
    assert f": target {target}" in err and f"edgevllm/vllm:{target}" in out


def test_a_recipe_for_the_other_device_is_refused_in_one_line(tmp_path, cli):
    code, _, err = cli("serve", "nemotron-3-nano-nvfp4-thor", "--dry-run",
                       env={"EDGEVLLM_DEVICE_ROOT": str(spark_root(tmp_path))})
    assert code == 11
    assert "this machine is NVIDIA GB10 (target spark) but the recipe runs on thor: pass " \
           "--target thor to use it anyway" in err
    code, _, err = cli("serve", "nemotron-3-nano-nvfp4-thor", "--target", "thor", "--dry-run",
                       env={"EDGEVLLM_DEVICE_ROOT": str(spark_root(tmp_path))})
    assert code == 0, err


def test_build_without_target_on_a_device_builds_for_it(tmp_path, cli):
    code, _, err = cli("render", "--out", str(tmp_path / "r"),
                       env={"EDGEVLLM_DEVICE_ROOT": str(thor_root(tmp_path))})
    assert code == 0, err
    assert "this machine is NVIDIA Jetson AGX Thor Developer Kit; Jetson (L4T): target thor" in err
    code, _, err = cli("render", "--out", str(tmp_path / "r2"),
                       env={"EDGEVLLM_DEVICE_ROOT": str(tmp_path / "plain")})
    assert code != 0 and "no target given" in err
