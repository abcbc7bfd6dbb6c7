"""``--cmake-dep NAME=FOLDER`` through the real build (sources/depfolder.py, sources/cmakedeps.py,
the compile stage), on the host's platform with the fixture tree (tests/e2e/conftest.py).

The fixture tree gets a CMake dependency as vLLM's trees have them: a ``FetchContent_Declare`` of a
git repository (a real one, served by ``git daemon`` on 127.0.0.1) behind the tree's own
``FAKEDEP_SRC_DIR`` override, whose header the compiled extension includes (``vllm._C.dep()``
returns its marker). Then:

1. a compile that fetches the dependency by git and locks it (commit and tree hash);
2. with the git daemon gone (no repository reachable), ``inv build --lock`` with
   ``--cmake-dep fakedep=FOLDER``, the folder exported from the repository (``git archive``: an
   executable file, a link; and a ``.git`` with a hostile config, which is skipped): the same
   tree hash, so the same lock, tag and compile key (its wheels reused);
3. the same with one byte of the folder changed: refused in one line naming both hashes, before
   any container runs;
4. that changed folder without a lock: compiled in (the image's marker is the folder's), recorded
   as supplied (its tree hash, no commit), and shown as such by the SBOM written beside the lock.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from e2e.conftest import FIXTURE_TREE, KERNELS, hermetic_spec
from support.gitfixtures import git_daemon, make_upstream_repo
from support.platforms import native_platform

pytestmark = pytest.mark.e2e

REPO = "edgevllm-test/e2e-cmakedep"
DEP_HEADER = 'inline const char* fakedep_marker() { return "%s"; }\n'
CMAKE_DEP = """
include(FetchContent)
if(DEFINED ENV{FAKEDEP_SRC_DIR})
  set(FAKEDEP_SRC_DIR $ENV{FAKEDEP_SRC_DIR})
endif()
if(FAKEDEP_SRC_DIR)
  FetchContent_Declare(fakedep SOURCE_DIR ${FAKEDEP_SRC_DIR})
else()
  FetchContent_Declare(fakedep GIT_REPOSITORY %s GIT_TAG v1)
endif()
"""
# The extension includes the dependency's header where the override names its folder.
SETUP_HOOK = """
_dep = os.environ.get("FAKEDEP_SRC_DIR")
_DEP_FLAGS = [f"-I{_dep}/include", "-DEDGEVLLM_FAKEDEP"] if _dep else []
"""
KERNEL_DEP = """
#ifdef EDGEVLLM_FAKEDEP
#include "fakedep/fakedep.h"
#else
inline const char* fakedep_marker() { return "none"; }
#endif
static PyObject* dep(PyObject*, PyObject*) { return PyUnicode_FromString(fakedep_marker()); }
"""


def _tree_with_dep(dest: Path, url: str) -> Path:
    shutil.copytree(FIXTURE_TREE, dest)
    cmake = dest / "CMakeLists.txt"
    cmake.write_text(cmake.read_text() + CMAKE_DEP % url)
    setup = dest / "setup.py"
    text = setup.read_text().replace("\n\nclass NvccBuild", SETUP_HOOK + "\n\nclass NvccBuild")
    setup.write_text(text.replace('*gencode_flags(arch_list),', '*gencode_flags(arch_list), '
                                  '*_DEP_FLAGS,'))
    kernels = dest / KERNELS
    text = kernels.read_text().replace("static PyMethodDef methods[] = {",
                                       KERNEL_DEP + "\nstatic PyMethodDef methods[] = {")
    kernels.write_text(text.replace(
        '  {nullptr, nullptr, 0, nullptr},',
        '  {"dep", dep, METH_NOARGS, "The CMake dependency compiled in."},\n'
        '  {nullptr, nullptr, 0, nullptr},'))
    return dest


def _dep_tree(dest: Path, marker: str) -> Path:
    (dest / "include" / "fakedep").mkdir(parents=True)
    (dest / "include" / "fakedep" / "fakedep.h").write_text(DEP_HEADER % marker)
    (dest / "include" / "fakedep" / "alias.h").symlink_to("fakedep.h")
    (dest / "tools").mkdir()
    (dest / "tools" / "gen.sh").write_text("#!/bin/sh\necho generated\n")
    (dest / "tools" / "gen.sh").chmod(0o755)
    return dest


def _run(engine, image: str, code: str) -> str:
    from edgevllm.containers.docker import RunOptions

    proc = engine.run(RunOptions(image=image, remove=True, command=["python3", "-c", code]),
                      timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout.decode().strip()


@pytest.fixture
def cleanup_images(engine):
    yield
    for image in engine.images(REPO, "{{.Repository}}:{{.Tag}}"):
        engine.remove_image(image, force=True)


def test_a_locked_dependency_rebuilds_from_a_folder_and_a_changed_one_is_refused(
        engine, cuda_image_native, tmp_path, cli, cleanup_images):
    from edgevllm.builder.pipeline import build
    from edgevllm.specs.buildspec import spec_from_dict
    from edgevllm.specs.lock import lock_hash, read_lock

    repos = tmp_path / "repos"
    dep = make_upstream_repo(repos, _dep_tree(tmp_path / "dep-src", "fakedep-v1"),
                             name="fakedep.git")
    dep.git("update-ref", "refs/tags/v1", dep.git("rev-parse", "main"))
    out = tmp_path / "out"
    with git_daemon(repos) as base:
        tree = _tree_with_dep(tmp_path / "vllm-src", f"{base}/fakedep.git")
        upstream = make_upstream_repo(tmp_path / "vllm-up", tree)
        spec = hermetic_spec("spark", cuda_image_native, upstream, platform=native_platform(),
                             mods=[], image_repo=REPO)
        first = build(spec_from_dict(spec), out, engine)
    locked = read_lock(first.lock_path)
    record = locked.cmake_deps["fakedep"]
    assert record.commit == dep.git("rev-parse", "v1") and not record.supplied
    assert record.tree == dep.git("rev-parse", "v1^{tree}")
    assert record.env_var == "FAKEDEP_SRC_DIR"
    assert _run(engine, first.image, "import vllm._C as c; print(c.dep())") == "fakedep-v1"

    # 2. The daemon is gone: the folder, exported from the repository, stands in by tree hash.
    folder = tmp_path / "mirror" / "fakedep"
    folder.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(dep.path), "archive", "v1"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    (folder / ".git").mkdir()
    (folder / ".git" / "config").write_text("[core]\n\tfsmonitor = touch owned\n")
    code, stdout, stderr = cli("build", "--lock", str(first.lock_path), "--cmake-dep",
                               f"fakedep={folder}", "--out", str(out), "--no-verify",
                               "--image-repo", REPO, "--json", str(tmp_path / "again.json"),
                               timeout=1800)
    assert code == 0, stderr[-3000:]
    assert "checked against the lock's tree" in " ".join(stderr.split())
    again = json.loads((tmp_path / "again.json").read_text())
    relocked = read_lock(again["lock"])
    assert relocked.cmake_deps == locked.cmake_deps and lock_hash(relocked) == lock_hash(locked)
    assert stdout.strip() == first.tags[0]
    assert again["compiled"] is False, "the same tree hash keeps the compile key: no compile"
    assert (folder / ".git" / "config").exists()  # the user's folder as it was

    # 3. One byte changed: one line, both hashes, before any container.
    header = folder / "include" / "fakedep" / "fakedep.h"
    header.write_text(DEP_HEADER % "fakedep-mirror")
    code, _, stderr = cli("build", "--lock", str(first.lock_path), "--cmake-dep",
                          f"fakedep={folder}", "--out", str(tmp_path / "refused"),
                          "--no-verify", "--image-repo", REPO)
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert code == 5 and len(errors) == 1 and "Traceback" not in stderr, stderr[-3000:]
    assert f"--cmake-dep fakedep={folder}: tree " in errors[0]
    assert f"is not the lock's {record.tree}" in errors[0]

    # 4. Without a lock the changed folder is compiled in and recorded as supplied.
    standin = build(spec_from_dict({**spec, "cmake_deps": {"fakedep": str(folder)}}),
                    tmp_path / "standin", engine)
    assert _run(engine, standin.image, "import vllm._C as c; print(c.dep())") == "fakedep-mirror"
    supplied = read_lock(standin.lock_path).cmake_deps["fakedep"]
    assert supplied.supplied and supplied.commit is None and supplied.tree != record.tree
    assert supplied.ref == "v1" and supplied.repo == record.repo
    sbom = json.loads(standin.lock_path.with_name(
        standin.lock_path.name.replace(".lock.json", ".sbom.cdx.json")).read_text())
    component = next(c for c in sbom["components"] if c.get("group") == "cmake-dep")
    assert component["version"] == f"tree-{supplied.tree}"
