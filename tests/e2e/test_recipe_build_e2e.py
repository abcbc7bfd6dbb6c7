"""``inv build --recipe NAME`` end to end: an imported eugr recipe's image, built for linux/arm64.

What it exercises, with the real engine and buildx (under qemu on an x86 host):
- ``inv recipe-import`` of an eugr-shaped recipe (written here) whose mod is an eugr ``run.sh``
  that downloads a file (``wget``: recorded by the import, which fetches nothing; fetched by the
  build from the loopback stand-in of the web and locked by sha256), and whose command loads
  with ``--load-format instanttensor``;
- ``inv build --recipe`` of the imported recipe: the eugr mod runs in the image build (its file in
  the image's workspace, its outcome in the mods record), InstantTensor 0.2.2 from PyPI (its
  aarch64 wheel, the only platform PyPI has for it besides x86_64) in the locked closure by
  sha256, the image tagged as the recipe names it;
- ``inv probe`` of that image requiring ``instanttensor`` (what the recipe's build asks its probe
  to import, tests/test_serve_recipe_build.py): InstantTensor's aarch64 extension loads.

The build runs with ``--no-verify``: the kernel-arch gate rightly fails an image with no CUDA
library at all, which the stand-in vLLM is (tests/e2e/test_build_e2e.py gates real kernels).

The closure is small on purpose: a stand-in vLLM wheel (tests/support/standin_wheels.py, which
also carries the stand-in torch InstantTensor imports; the real torch is dropped from the closure
by a resolver override) on the debootstrapped Debian arm64 base of the other e2e builds. The
settings a hermetic test machine needs (base image, Python, offline, the stand-in wheel) are added
to the build spec the import wrote, as a user may edit it.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest
import yaml

from support.images import in_image

pytestmark = pytest.mark.e2e

FIXTURES = Path(__file__).parent.parent / "fixtures" / "eugr-recipes"
TAG = "edgevllm-test/recipes24-recipe:instanttensor"
RECIPE = f"""recipe_version: "1"
name: InstantTensor Plugin
description: an eugr mod downloads a parser plugin; weights load with InstantTensor
model: example-org/Recipe-E2E
container: {TAG}
mods:
  - mods/plugin-download
defaults:
  port: 8000
command: |
  vllm serve example-org/Recipe-E2E --port {{port}} \\
    --reasoning-parser-plugin plugin_parser.py --reasoning-parser plugin \\
    --load-format instanttensor
"""
NEVER = "sys_platform == 'edgevllm-never'"


@pytest.fixture(scope="module")
def web():
    """The stand-in of the web the mod's download comes from, up while the build fetches it."""
    from support import web_standin

    with web_standin.serve({web_standin.PLUGIN_PATH: web_standin.PLUGIN}) as base:
        yield base


@pytest.fixture(scope="module")
def imported(tmp_path_factory, cli, web):
    from support import web_standin

    folder = tmp_path_factory.mktemp("eugr")
    web_standin.plugin_mod(FIXTURES / "mods" / "plugin-download",
                           folder / "mods" / "plugin-download", web)
    (folder / "recipes").mkdir()
    (folder / "recipes" / "instanttensor-plugin.yaml").write_text(RECIPE)
    out = tmp_path_factory.mktemp("recipes")
    code, _, stderr = cli("recipe-import", str(folder), "--out", str(out))  # fetches nothing
    assert code == 0, stderr
    return out / "instanttensor-plugin.yaml"


@pytest.fixture(scope="module")
def recipe_build(imported, python_image_arm64, engine, tmp_path_factory, cli, web):
    from edgevllm.containers.host import host_arch
    from support.images import python_image
    from support.standin_wheels import standin_vllm_wheel

    out = tmp_path_factory.mktemp("recipe-out")
    spec_path = Path(yaml.safe_load(imported.read_text())["build"]["spec"])
    spec = yaml.safe_load(spec_path.read_text())
    assert spec["packages"] == {"instanttensor": "0.2.2"} and spec["tags"] == [TAG]
    spec.update({
        "platform": "linux/arm64",
        "images": {"build": python_image_arm64, "runtime": python_image_arm64},
        # .pyc are compiled on the build platform: the same Debian + Python 3.11, native
        "bytecode_image": python_image(engine, host_arch()),
        "python": "python3.11", "apt_packages": [], "mods": [],
        "torch": {"version": None, "index_url": None},
        "overrides": [f"torch ; {NEVER}"],  # the stand-in wheel carries the torch it imports
        "packages": {**spec["packages"], "flashinfer-python": None, "nvidia-cutlass-dsl": None},
        "image_repo": "edgevllm-test/recipes24-recipe", "probe_required": ["vllm"],
    })
    spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))
    # The stand-in vLLM wheel is a local file: the user's own flag, as a recipe (others' file)
    # names vLLM by version only (docs/security.md).
    code, _, stderr = cli("build", "--recipe", str(imported), "--no-verify", "--out", str(out),
                          "--vllm-wheel", str(standin_vllm_wheel(out)),
                          "--json", str(out / "result.json"), timeout=1800)
    assert code == 0, stderr[-6000:]
    result = json.loads((out / "result.json").read_text())
    yield result, stderr
    for tag in result["tags"]:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)


def test_image_is_tagged_as_the_recipe_names_it(recipe_build, engine):
    result, _ = recipe_build
    assert TAG in result["tags"]
    assert engine.image_inspect(TAG)["Architecture"] == "arm64"


def test_lock_records_instanttensor_by_sha256(recipe_build):
    from edgevllm.specs.lock import read_lock
    from support.downloads import pypi_download

    result, _ = recipe_build
    lock = read_lock(result["lock"])
    assert lock.closure is not None
    wheel = next(w for w in lock.closure.wheels if w.name == "instanttensor")
    assert wheel.version == "0.2.2" and "aarch64" in wheel.filename
    real = pypi_download("instanttensor==0.2.2", ["manylinux_2_28_aarch64"], "3.11")
    assert wheel.sha256 == hashlib.sha256(real.read_bytes()).hexdigest()
    assert lock.packages["instanttensor"] == "0.2.2"
    assert not any(w.name == "torch" for w in lock.closure.wheels)  # dropped by the override


def test_the_probe_imports_instanttensor_in_the_image(recipe_build, cli, tmp_path):
    code, _, stderr = cli("probe", "--image", TAG, "--target", "spark", "--require",
                          "instanttensor", "--json", str(tmp_path / "probe.json"), timeout=900)
    checks = {c["id"]: c for c in json.loads((tmp_path / "probe.json").read_text())["checks"]}
    assert checks["import:instanttensor"]["status"] == "pass", (checks, stderr[-2000:])
    assert checks["import:instanttensor"]["detail"]["version"] == "0.2.2"


def test_instanttensor_native_extension_loads_in_the_image(recipe_build, engine):
    out = in_image(engine, TAG, "import instanttensor, instanttensor._C as c, platform; "
                                "print(platform.machine(), c.__file__)")
    assert out.startswith("aarch64 ") and "_C.cpython-311-aarch64-linux-gnu.so" in out


def test_eugr_mod_ran_at_build_time_with_its_pinned_download(recipe_build, engine, web):
    from edgevllm.specs.lock import read_lock
    from support.web_standin import PLUGIN, PLUGIN_PATH

    result, _ = recipe_build
    mods = {m["name"]: m for m in result["mods"]["mods"]}
    assert mods["eugr-plugin-download"]["outcome"] == "applied", mods
    body = in_image(engine, TAG, "print(open('/workspace/plugin_parser.py').read(), end='')")
    assert body.encode() == PLUGIN
    # the build fetched it and locked it by sha256
    locked = next(m for m in read_lock(result["lock"]).mods if m.name == "eugr-plugin-download")
    assert locked.downloads == {web + PLUGIN_PATH: hashlib.sha256(PLUGIN).hexdigest()}
