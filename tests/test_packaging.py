"""A non-editable install works away from the checkout: the wheel carries the package data
(policy, signatures, CMake helpers) and the data folders (targets, mods, recipes, patches,
dockerfiles), and the console script runs from another folder."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(REPO),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    return next(out.glob("edgevllm-*.whl"))


def data_files() -> set[str]:
    """Every file the wheel must carry, from the checkout itself (no hand-kept list)."""
    files = {
        f"edgevllm/_data/{p.relative_to(REPO)}"
        for folder in ("targets", "mods", "recipes", "patches", "dockerfiles")
        for p in (REPO / folder).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    package = REPO / "edgevllm"
    files |= {
        f"edgevllm/{p.relative_to(package)}"
        for p in package.rglob("*")
        if p.is_file()
        and p.suffix in (".py", ".yaml", ".cmake")
        and "__pycache__" not in p.parts
        and "_data" not in p.parts
    }
    return files


def test_the_wheel_carries_code_and_data(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = sorted(data_files() - names)
    assert not missing, f"the wheel lacks {len(missing)} files, e.g. {missing[:5]}"


def test_installed_wheel_runs_outside_the_checkout(wheel, tmp_path):
    target = tmp_path / "site"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(target),
            str(wheel),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    env = {
        "PYTHONPATH": str(target),
        "PATH": "/usr/bin:/bin",
        "NO_COLOR": "1",
        "HOME": str(tmp_path),
    }
    site = [p for p in sys.path if p.endswith("site-packages")]
    env["PYTHONPATH"] += ":" + ":".join(site)  # the dependencies come from this environment

    def run(*args):
        return subprocess.run(
            [sys.executable, "-c", "from edgevllm.cli import main; main()", *args],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
        )

    assert run("probe", "--help").returncode == 0
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = run("verify", "--target", "spark", "--path", str(empty))
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "unknown target" not in proc.stderr and "policy" not in proc.stderr.lower(), proc.stderr
    targets = run("targets")
    assert targets.returncode == 0 and "spark" in targets.stdout and "thor" in targets.stdout
