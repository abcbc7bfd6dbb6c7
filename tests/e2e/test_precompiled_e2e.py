"""The precompiled mode end to end: a Python-only PR on the real vLLM 0.33.0 tree, installed over
the compiled libraries of the real vllm 0.33.0 wheel, through ``edgevllm build --vllm-pr``.

A git repository made from the real 0.33.0 sdist (PyPI) stands in for the GitHub clone (tag
v0.33.0), with PR 7 (Python only: a marker in ``vllm/__init__.py`` and a new module) and PR 8 (a
kernel source). The build uses the same spec, base and closure as the prebuilt end-to-end test
(tests/e2e/test_real_vllm_e2e.py: spark for the host's platform on a local Debian trixie base): the
closure's install layer is the same one, so BuildKit reuses it and CI pays for one heavy install.
What this module adds is small: vLLM's setup.py run with VLLM_USE_PRECOMPILED on the tree, its
wheel installed over the release, and the checks below. It skips verify and the probe (the
prebuilt test runs both on the same closure) and removes its image at the end.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

from e2e.conftest import write_spec
from support.images import in_image

pytestmark = pytest.mark.e2e

VLLM = "0.33.0"
REPO = "edgevllm-test/precompiled-vllm"
CERTIFI = "certifi>=2026.10.18"   # as in test_real_vllm_e2e.py: the index lags one certifi pin
PR_PYTHON = 7
PR_KERNEL = 8
MARKER = "edgevllm-precompiled-pr-7"


@pytest.fixture(scope="module")
def sdist_upstream(tmp_path_factory):
    """A bare upstream holding the real 0.33.0 sdist as tag v0.33.0, PR 7 and PR 8."""
    from support.gitfixtures import add_pr
    from support.sdists import release_upstream

    upstream, tree = release_upstream(tmp_path_factory.mktemp("vllm-sdist-upstream"), "vllm", VLLM)
    init = (tree / "vllm" / "__init__.py").read_text()
    add_pr(upstream, PR_PYTHON, {
        "vllm/__init__.py": init + f'\nEDGEVLLM_PR_MARKER = "{MARKER}"\n',
        "vllm/edgevllm_pr_module.py": f'MARKER = "{MARKER}"\n'}, base=f"v{VLLM}")
    kernel = (tree / "csrc" / "activation_kernels.cu").read_text()
    add_pr(upstream, PR_KERNEL, {"csrc/activation_kernels.cu": kernel + "// a kernel change\n"},
           base=f"v{VLLM}")
    return upstream


@pytest.fixture(scope="module")
def real_env():
    from support.downloads import test_cache_dir

    # The CLI's cache (git mirrors, the wheelhouse) is the prebuilt test's: downloaded once.
    return {"EDGEVLLM_CACHE": str(test_cache_dir("edgevllm-cache"))}


def spec_file(out: Path) -> Path:
    """The prebuilt test's spec (same closure, same base): see test_real_vllm_e2e.py."""
    from support.platforms import native_platform
    from support.real_vllm import PYTHON

    return write_spec(out / "spec.yaml", target="spark", platform=native_platform(), python=PYTHON,
                      apt_packages=[], torch={"version": "2.14.0", "index_url": None},
                      image_repo=REPO)


@pytest.fixture(scope="module")
def trixie(engine):
    from support.real_vllm import trixie_python_image

    return trixie_python_image(engine)   # this host's platform


@pytest.fixture(scope="module")
def precompiled_build(engine, cli, real_env, trixie, sdist_upstream, tmp_path_factory):
    out = tmp_path_factory.mktemp("precompiled-out")
    code, stdout, stderr = cli(
        "build", "--spec", str(spec_file(out)), "--vllm-repo", sdist_upstream.url,
        "--vllm-pr", str(PR_PYTHON), "--base-image", trixie, "--override", CERTIFI,
        "--no-verify", "--out", str(out), "--json", str(out / "result.json"),
        env=real_env, timeout=3000)
    assert code == 0, stderr[-6000:]
    result = json.loads((out / "result.json").read_text())
    yield result, out, stderr
    for tag in result["tags"]:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)


def test_a_kernel_change_refuses_precompiled_before_any_container(sdist_upstream, trixie, cli,
                                                                 real_env, tmp_path):
    code, _, stderr = cli(
        "build", "--spec", str(spec_file(tmp_path)), "--vllm-repo", sdist_upstream.url,
        "--vllm-pr", str(PR_KERNEL), "--mode", "precompiled", "--base-image", trixie,
        "--out", str(tmp_path), env=real_env, timeout=600)
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert code != 0 and len(errors) == 1, stderr[-3000:]
    assert "compiled sources changed since v0.33.0: csrc/activation_kernels.cu" in errors[0]
    assert not (tmp_path / "spark" / "wheels").exists()


def test_python_only_pr_picks_precompiled_and_says_so(precompiled_build):
    _, _, stderr = precompiled_build
    assert ("Python-only change: reusing the compiled kernels of vllm 0.33.0; "
            "--compile to compile") in stderr
    assert "mode: precompiled" in stderr


def test_lock_records_mode_wheel_hash_and_release(precompiled_build):
    from edgevllm.specs.lock import read_lock

    result, _, _ = precompiled_build
    lock = read_lock(result["lock"])
    assert lock.closure is not None and lock.build_closure is not None
    wheel = lock.closure.wheel("vllm")
    assert wheel is not None and lock.kernels_from is not None and lock.vllm is not None
    assert lock.mode == "precompiled" and wheel.version == VLLM
    assert lock.kernels_from.release == VLLM and lock.kernels_from.release_tag == "v0.33.0"
    assert lock.kernels_from.sha256 == wheel.sha256 and lock.kernels_from.wheel == wheel.filename
    assert lock.vllm.pr == PR_PYTHON and lock.kernels_from.changed == 2
    tools = {w.name.lower().replace("_", "-") for w in lock.build_closure.wheels}
    assert {"setuptools-scm", "setuptools-rust", "packaging"} <= tools   # setup.py imports them


def test_image_has_the_pr_over_the_release(precompiled_build, engine):
    result, _, _ = precompiled_build
    text = in_image(engine, result["image"], (
        "import importlib.metadata, vllm, vllm.edgevllm_pr_module as m\n"
        "print(vllm.EDGEVLLM_PR_MARKER, m.MARKER, vllm.__version__,"
        " importlib.metadata.version('vllm'))"))
    marker, module, version, installed = text.split()
    assert marker == module == MARKER
    assert version.startswith("0.33.0+1.g")             # setuptools-scm's, from the tree's commit
    assert installed == version + ".precompiled"       # vLLM's setup.py says what the wheel is


def test_kernel_libraries_are_byte_identical_to_the_release_wheel(precompiled_build, engine):
    from edgevllm.specs.lock import read_lock
    from support.downloads import test_cache_dir

    result, _, _ = precompiled_build
    kernels = read_lock(result["lock"]).kernels_from
    assert kernels is not None
    wheel = next(Path(test_cache_dir("edgevllm-cache")).glob(
        f"wheelhouse/sha256/{kernels.sha256}/{kernels.wheel}"))
    with zipfile.ZipFile(wheel) as archive:
        expected = {name: hashlib.sha256(archive.read(name)).hexdigest()
                    for name in archive.namelist()
                    if name.endswith(".so") or name == "vllm/vllm-rs"}
    assert "vllm/_C_stable_libtorch.abi3.so" in expected and "vllm/vllm-rs" in expected
    found = json.loads(in_image(engine, result["image"], (
        "import hashlib, json, pathlib, vllm\n"
        "site = pathlib.Path(vllm.__file__).parent.parent\n"
        "files = [*(site / 'vllm').rglob('*.so'), site / 'vllm' / 'vllm-rs']\n"
        "print(json.dumps({str(p.relative_to(site)): hashlib.sha256(p.read_bytes()).hexdigest()"
        " for p in files if p.exists()}))")))
    assert found == expected   # every compiled library and vllm-rs: the release's, byte for byte


def test_labels_say_precompiled_and_name_the_release_wheel(precompiled_build, engine):
    from edgevllm.common import labels
    from edgevllm.specs.lock import read_lock

    result, _, _ = precompiled_build
    lock = read_lock(result["lock"])
    found = engine.image_labels(result["image"])
    assert found[labels.MODE] == "precompiled"
    assert lock.kernels_from is not None and lock.vllm is not None
    assert found[labels.VLLM_WHEEL_SHA] == lock.kernels_from.sha256
    assert found["org.opencontainers.image.version"] == lock.vllm.version  # the tree's


def shadowed_files(engine, image: str) -> dict[str, tuple[int, str]]:
    """Every file with bytes that a later layer of ``image`` writes again: path -> (its bytes in
    the layer below, the step that writes it again). Empty files shadow nothing (uv's own
    /opt/venv/.lock is written again by each install)."""
    from edgevllm.inspect.layersizes import image_layers

    below: dict[str, int] = {}
    found: dict[str, tuple[int, str]] = {}
    for layer in image_layers(engine, image):
        for path, size in layer.files.items():
            if below.get(path):
                found[path.lstrip("/")] = (below[path], layer.step)
            below[path] = size
    return found


def test_one_vllm_in_the_image_and_nothing_of_the_install_shadowed(precompiled_build, engine):
    """The closure stages install every wheel but the release's vLLM (the wheelhouse keeps its
    wheel for the build stage), and the tree's vLLM comes over the closure in a layer of its own:
    no layer of the install carries bytes a later one replaces. What is shadowed is named: the
    spark mod fastsafetensors links libcudart.so and runs ldconfig, which writes the base
    image's /etc/ld.so.cache and its aux-cache again. The layer report (printed with -s) gives
    the image's size as docs/build-modes.md states it."""
    result, _, _ = precompiled_build
    layers = result["layers"]
    print(f"\nprecompiled image: {layers['total_bytes']:,} B in {len(layers['layers'])} layers, "
          f"{layers['shadowed_bytes']:,} B shadowed by a later layer")
    for layer in layers["layers"]:
        print(f"  {layer['bytes']:>14,} B {layer['files']:>7} files  {layer['step'][:90]}")
    shadowed = shadowed_files(engine, result["image"])
    print(f"  shadowed: {shadowed}")
    assert set(shadowed) == {"etc/ld.so.cache", "var/cache/ldconfig/aux-cache"}, shadowed
    assert all("inimage_applier.py apply" in step for _, step in shadowed.values()), shadowed
    assert layers["shadowed_bytes"] == sum(size for size, _ in shadowed.values()) < 100_000
    assert layers["layers"][0]["shadowed_bytes"] == layers["shadowed_bytes"]   # the base's
    installs = [layer for layer in layers["layers"] if '"$uv" pip install' in layer["step"]]
    assert len(installs) == 2 and "/tmp/edgevllm-wheels/*.whl" in installs[1]["step"], installs
    assert installs[1]["bytes"] > 300e6   # the tree's vLLM with the release's libraries
    versions = in_image(engine, result["image"], (
        "import importlib.metadata as m\n"
        "print(sorted(d.version for d in m.distributions() if d.metadata['Name'] == 'vllm'))"))
    assert versions.count("'") == 2 and ".precompiled" in versions, versions   # one vLLM
