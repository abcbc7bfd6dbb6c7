"""The compile mode's locked closure on the real vLLM 0.33.0 tree: resolved, locked and rendered
(no compile).

A git repository made from the real 0.33.0 sdist (PyPI) stands in for the GitHub clone (tag
v0.33.0), as in test_precompiled_e2e.py. The compile mode's own preparation runs on it from the
prepared tree on (``builder/modes/compile.prepare_over``, what ``inv build --compile`` runs after
the tree): the tree's requirements/cuda.txt (and the common.txt it includes) resolved with uv for
the host's platform (as the prebuilt test) + Python 3.13 with the target's pins as overrides, the
build requirements pinned by hash, both downloaded into the test cache's wheelhouse (shared with
the prebuilt and precompiled end-to-end tests, so nearly every wheel is there already), the
Dockerfile rendered and the lock made. Then the lock rebuilds it: nothing is resolved, the same
wheels and the same compile key.

Not prepared here: the tree's kernel side (the kernel plan from its CMake and the repositories
that CMake clones, which come from GitHub, unreachable here). test_build_e2e.py runs the whole
compile mode, compile included, on the fixture tree.
"""

from __future__ import annotations

import re
import tarfile
import time

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

pytestmark = pytest.mark.e2e

VLLM = "0.33.0"
# As in test_real_vllm_e2e.py: the PyPI mirror here has lagged one pin (vLLM 0.33.0 asks
# certifi>=2026.10.19 where the newest certifi was 2026.10.18). The same override keeps this
# closure resolvable there and its overrides the same as the other real-vLLM tests'; where the
# newer certifi is on the index, uv takes it anyway.
CERTIFI = "certifi>=2026.10.18"
PY313 = {"python_version": "3.13", "python_full_version": "3.13.0", "sys_platform": "linux",
         "platform_system": "Linux", "os_name": "posix"}   # + the host's platform_machine


@pytest.fixture(scope="module")
def sdist_upstream(tmp_path_factory):
    """A bare upstream holding the real 0.33.0 sdist as tag v0.33.0."""
    from support.sdists import release_upstream

    upstream, _ = release_upstream(tmp_path_factory.mktemp("vllm-sdist-upstream"), "vllm", VLLM)
    return upstream


@pytest.fixture(scope="module")
def real_cache(monkeypatch_module):
    from support.downloads import test_cache_dir

    # The CLI's cache (git mirrors, the wheelhouse) is the prebuilt test's: downloaded once.
    monkeypatch_module.setenv("EDGEVLLM_CACHE", str(test_cache_dir("edgevllm-cache")))


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def compile_job(upstream, base: str, out, locked=None):
    """The job ``inv build --compile`` makes for this spec (the lock's, when rebuilding)."""
    from edgevllm.builder.modes import start
    from edgevllm.builder.runner import Workspace
    from edgevllm.containers.docker import DockerEngine
    from edgevllm.specs.buildspec import lock_overrides, spec_from_dict
    from support.platforms import native_platform
    from support.real_vllm import PYTHON

    data = {"target": "spark", "mode": "compile", "platform": native_platform(), "python": PYTHON,
            "torch": {"version": "2.14.0", "index_url": None}, "overrides": [CERTIFI],
            "base_image": base, "apt_packages": [],
            "vllm": {"repo": upstream.url, "ref": f"v{VLLM}"}}
    if locked is not None:
        data = {**lock_overrides(locked), "vllm": data["vllm"]}
    return start(spec_from_dict(data), Workspace(out / "spark"), DockerEngine(), locked)


def prepared(job):
    """The compile mode's preparation from the prepared tree on (sources and build layout; the
    kernel side needs GitHub)."""
    from edgevllm.builder.modes.compile import prepare_over
    from edgevllm.builder.steps import stage_mods
    from edgevllm.builder.tree import TreeOptions, prepare_tree

    staged = stage_mods(job.eff, job.ws)
    tree = prepare_tree(job.eff, job.ws.root, job.locked, TreeOptions(kernels=False))
    return prepare_over(job, tree, staged)


@pytest.fixture(scope="module")
def locked_build(real_cache, sdist_upstream, engine, tmp_path_factory):
    from support.real_vllm import trixie_python_image

    base = trixie_python_image(engine)   # this host's platform
    out = tmp_path_factory.mktemp("compile-closure")
    started = time.monotonic()
    build = prepared(compile_job(sdist_upstream, base, out))
    print(f"compile closure: prepared in {time.monotonic() - started:.1f} s")
    return build, base, out


def test_every_runtime_wheel_of_the_tree_is_locked_by_sha256(locked_build):
    build, _, _ = locked_build
    lock = build.lock
    assert lock.mode == "compile" and lock.closure is not None and lock.build_closure is not None
    wheels = {canonicalize_name(w.name): w for w in lock.closure.wheels}
    assert all(re.fullmatch(r"[0-9a-f]{64}", w.sha256) for w in lock.closure.wheels)
    torch = wheels[canonicalize_name("torch")]
    assert torch.version == "2.14.0" and torch.filename.startswith(
        "torch-2.14.0-cp313-cp313-manylinux")
    assert lock.packages["torch"] == "2.14.0"
    assert "vllm" not in wheels, "the compiled wheel is the image's vLLM, not a released one"
    from support.platforms import machine, native_arch

    tree = build.contexts["vllm-src"]
    asked = [Requirement(line) for line in _runtime_lines(tree)]
    closure_env = {**{k: str(v) for k, v in default_environment().items()}, **PY313,
                   "platform_machine": machine(native_arch())}
    wanted = {canonicalize_name(r.name) for r in asked
              if r.marker is None or r.marker.evaluate(closure_env)}
    assert wanted - set(wheels) == set(), "a runtime requirement of the tree is not in the lock"
    assert len(wheels) > 150 and CERTIFI in lock.closure.overrides
    print(f"compile closure: {len(wheels)} wheels, "
          f"{sum(w.size or 0 for w in lock.closure.wheels) / 1e9:.2f} GB; build tools "
          f"{len(lock.build_closure.wheels)} wheels")


def _runtime_lines(tree: str) -> list[str]:
    from pathlib import Path

    from edgevllm.sources.buildreqs import read_requirement_tree

    return [line for line, _ in read_requirement_tree(Path(tree), "requirements/cuda.txt")]


def test_the_wheelhouse_pins_what_the_lock_pins(locked_build):
    from pathlib import Path

    build, _, _ = locked_build
    for context, closure in (("wheelhouse", build.lock.closure),
                             ("build-tools", build.lock.build_closure)):
        folder = Path(build.contexts[context])
        lines = (folder / "requirements.txt").read_text().split("\n")
        pinned = {line.split("==")[0]: line.split("--hash=sha256:")[1]
                  for line in lines if "--hash=sha256:" in line}
        assert pinned == {w.name: w.sha256 for w in closure.wheels}, context
        assert all((folder / w.filename).is_file() for w in closure.wheels), context


def test_no_install_step_names_an_index(locked_build):
    build, _, _ = locked_build
    text = build.dockerfile
    steps = [s for s in re.split(r"\n(?=[A-Z]+ )", text) if s.startswith("RUN ")]
    installs = [s for s in steps if "pip install" in s or "pip wheel" in s]
    assert len(installs) >= 3
    for step in installs:
        assert "--no-index" in step and not re.search(r"index-url|https?://", step), step
    assert not re.search(r"index-url|https?://|torch==", text.split("LABEL", 1)[0])
    hashed = [s for s in installs if "--require-hashes" in s]
    assert any("/wheelhouse/requirements.txt" in s for s in hashed)
    assert any("/build-tools/requirements.txt" in s for s in hashed)
    # The compiled wheels over the closure in their own stage (the closure holds no vLLM):
    # nothing is reinstalled, so no layer shadows another.
    assert any("--no-deps --link-mode=copy \\\n         /tmp/edgevllm-wheels/*.whl" in s
               for s in installs)
    assert "reinstall" not in text


def test_the_lock_rebuild_resolves_nothing(locked_build, sdist_upstream, tmp_path, capfd):
    from edgevllm.specs.lock import read_lock, write_lock

    build, base, out = locked_build
    lock_file = write_lock(build.lock, tmp_path / "compile.lock.json")
    capfd.readouterr()
    again = prepared(compile_job(sdist_upstream, base, out, read_lock(lock_file)))
    said = capfd.readouterr().err
    assert f"closure: {len(build.lock.closure.wheels)} wheels from the lock (no resolve)" in said
    assert "closure: resolving" not in said and "build tools:" not in said
    assert again.lock.closure == build.lock.closure
    assert again.lock.build_closure == build.lock.build_closure
    assert again.compile_key == build.compile_key, "the same compiled wheels are reused"
    assert again.dockerfile == build.dockerfile
