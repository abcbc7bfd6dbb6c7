"""Fixtures shared by every test module. Prerequisites that are missing make tests FAIL with a
message saying what to install; nothing is skipped silently."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # tests/support as a package "support"
# Published layers are cached by the publisher; on a test machine keep that cache small (a
# real-image publish compresses ~4 GB of layers) so the suite fits the disk of a 2-core CI box.
os.environ.setdefault("EDGEVLLM_LAYER_CACHE_MAX", str(6 << 30))
# A shell starts a background job with SIGINT ignored, and a child process inherits that: the
# Ctrl-C tests would then signal processes that cannot hear it. A handler (not "ignore") is reset
# to the default in every child, so the commands under test react to SIGINT as in a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session", autouse=True)
def user_config_home(tmp_path_factory):
    """The user's recipe folder ($XDG_CONFIG_HOME/edgevllm/recipes, read by inv recipes) is an
    empty folder of the test session's: recipes a developer imported never reach the tests."""
    folder = tmp_path_factory.mktemp("xdg-config")
    # The developer's HF_HOME is theirs too: inv serve mounts it when set (tests that need one
    # set their own).
    before = {key: os.environ.pop(key, None) for key in ("XDG_CONFIG_HOME", "HF_HOME")}
    os.environ["XDG_CONFIG_HOME"] = str(folder)
    yield folder
    for key, value in before.items():
        os.environ.pop(key, None)
        if value is not None:
            os.environ[key] = value


@pytest.fixture(scope="session")
def engine():
    """The real Docker engine (bash .ci/install-engine.sh installs and starts it)."""
    from edgevllm.containers.docker import DockerEngine

    eng = DockerEngine()
    proc = (
        subprocess.run(["docker", "info"], capture_output=True) if shutil.which("docker") else None
    )
    if proc is None or proc.returncode != 0:
        pytest.fail(
            "these tests need a running Docker engine with buildx: "
            "run 'sudo bash .ci/install-engine.sh' (Debian) or start dockerd"
        )
    return eng


@pytest.fixture(scope="session")
def python_image_native(engine):
    """The Debian + Python base for this host's platform (support/platforms.py: native)."""
    from support.images import python_image
    from support.platforms import native_arch

    return python_image(engine, native_arch())


@pytest.fixture(scope="session")
def python_image_arm64(engine):
    """The Debian + Python base for linux/arm64 whatever the host, as the devices run: native on
    an arm64 host, under qemu on an x86_64 one."""
    from support.images import python_image
    from support.platforms import require_runnable

    require_runnable("arm64")
    return python_image(engine, "arm64")


@pytest.fixture(scope="session")
def cuda_image_native(engine):
    """The CUDA 13.0 base for this host's platform: the fast fixture builds."""
    from support.images import cuda_image
    from support.platforms import native_arch

    return cuda_image(engine, native_arch())


@pytest.fixture(scope="session")
def cuda_image_foreign(engine):
    """The CUDA 13.0 base for the other platform, run under qemu (linux/arm64 on an x86_64 host,
    linux/amd64 on an arm64 one): the emulated fixture builds."""
    from support.images import cuda_image
    from support.platforms import foreign_arch, require_runnable

    require_runnable(foreign_arch())
    return cuda_image(engine, foreign_arch())


@pytest.fixture(scope="module")
def registry_storage():
    """A real local registry for one test module (Debian's docker-registry on 127.0.0.1,
    tests/support/registry.py): (its host:port, the folder it stores blobs in)."""
    from support.registry import local_registry_storage

    with local_registry_storage() as found:
        yield found


@pytest.fixture(scope="module")
def registry(registry_storage):
    """The host:port of the module's local registry."""
    return registry_storage[0]


def run_cli(*args: str, env: dict | None = None, cwd: Path | None = None, timeout: float = 600):
    """Run the real console entry point in a subprocess: returns (exit code, stdout, stderr)."""
    proc = subprocess.run(
        [sys.executable, "-c", "from edgevllm.cli import main; main()", *args],
        capture_output=True,
        text=True,
        cwd=cwd or REPO,
        timeout=timeout,
        env={**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(REPO), **(env or {})},
    )
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture(scope="session")
def cli():
    return run_cli


def pytest_collection_modifyitems(config, items):
    """Everything that needs the Docker engine is end-to-end: the tests under tests/e2e/ and any
    test that uses the ``engine`` fixture (directly or through another fixture). So
    ``pytest -m "not e2e"`` is the fast loop on a machine without Docker."""
    for item in items:
        if "engine" in getattr(item, "fixturenames", ()) or "/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)
