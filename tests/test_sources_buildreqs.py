"""The build stage follows the tree: build requirements, use_existing_torch.py and jobs read from
real vLLM sdists (0.33.0 and 0.20.2 from PyPI, cached) and rendered without any ``if [ -f ]``."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from edgevllm.builder.render import render_dockerfile
from edgevllm.common.errors import SourceError
from edgevllm.sources.buildreqs import read_build_layout
from edgevllm.specs.buildspec import load_spec, resolve
from support.sdists import pypi_sdist, sdist_members

FAKE_VLLM = Path(__file__).parent / "e2e" / "fixtures" / "fake-vllm"
FILES_033 = ["setup.py", "pyproject.toml", "requirements/build/cuda.txt",
             "requirements/cuda.txt", "requirements/common.txt", "tools/use_existing_torch.py"]
FILES_020 = ["setup.py", "pyproject.toml", "requirements/build/cuda.txt", "use_existing_torch.py"]


@pytest.fixture(scope="module")
def tree_033(tmp_path_factory) -> Path:
    return sdist_members(pypi_sdist("vllm", "0.33.0"), FILES_033,
                         tmp_path_factory.mktemp("vllm-0.33.0"))


@pytest.fixture()
def tree_copy(tree_033, tmp_path) -> Path:
    return Path(shutil.copytree(tree_033, tmp_path / "tree"))


def test_033_layout_is_read_from_the_tree(tree_033):
    layout = read_build_layout(tree_033)
    assert layout.requirements_file == "requirements/build/cuda.txt"
    assert layout.use_existing_torch == "tools/use_existing_torch.py"
    assert layout.use_existing_torch_args == ("--prefix",)
    names = {r.split(">")[0].split("=")[0].strip() for r in layout.pyproject_requires}
    # setup.py imports these three at module level; --no-build-isolation installs nothing itself.
    assert {"packaging", "setuptools-scm", "setuptools-rust"} <= names
    assert "torch" not in names, "the image's torch must stay"
    allowed = SpecifierSet(layout.setuptools)
    assert "80.9.0" in allowed and "84.2.1" not in allowed, layout.setuptools


def test_033_jobs_are_multiplied_because_setup_py_divides(tree_033):
    layout = read_build_layout(tree_033)
    assert layout.divides_jobs
    assert layout.max_jobs_env(12, 2) == 24   # spark: 12 compile jobs of 2 nvcc threads


def test_020_keeps_use_existing_torch_at_the_root(tmp_path):
    from packaging.specifiers import SpecifierSet

    tree = sdist_members(pypi_sdist("vllm", "0.20.2"), FILES_020, tmp_path)
    layout = read_build_layout(tree)
    assert layout.use_existing_torch == "use_existing_torch.py"
    assert layout.use_existing_torch_args == ("--prefix",)
    assert layout.requirements_file == "requirements/build/cuda.txt"
    assert "81.0.0" not in SpecifierSet(layout.setuptools)


def test_old_layout_of_the_fixture_tree():
    layout = read_build_layout(FAKE_VLLM)
    assert layout.requirements_file == "requirements/build.txt"
    assert layout.use_existing_torch == "use_existing_torch.py"
    assert layout.max_jobs_env(2, 2) == 4


@pytest.mark.parametrize("missing, named", [
    ("tools/use_existing_torch.py", "use_existing_torch.py"),
    ("requirements/build/cuda.txt", "requirements/build/cuda.txt or requirements/build.txt"),
    ("pyproject.toml", "pyproject.toml"),
    ("setup.py", "setup.py"),
])
def test_a_missing_expected_file_fails_naming_it(tree_copy, missing, named):
    (tree_copy / missing).unlink()
    with pytest.raises(SourceError) as failure:
        read_build_layout(tree_copy)
    message = str(failure.value)
    assert named in message and "\n" not in message


def test_broken_pyproject_is_named(tree_copy):
    (tree_copy / "pyproject.toml").write_text("[build-system\nrequires = [")
    with pytest.raises(SourceError, match="pyproject.toml: not valid TOML"):
        read_build_layout(tree_copy)


def test_rendered_build_stage_follows_the_033_tree(tree_033):
    text = render_dockerfile(resolve(load_spec("spark", overrides={"mode": "compile"})),
                             layout=read_build_layout(tree_033))
    env = text.split("FROM base AS build-env", 1)[1].split("#####", 1)[0]
    build = text.split("FROM build-env AS build", 1)[1].split("#####", 1)[0]
    assert "if [ -f" not in env + build
    # The tree's build requirements come pinned by hash (resolved on the host from the layout).
    assert "requirements/build/cuda.txt (setuptools<81.0.0" in env
    assert "-r /build-tools/requirements.txt" in env and "--require-hashes" in env
    assert "python tools/use_existing_torch.py --prefix" in build
    assert "MAX_JOBS=24" in build and "NVCC_THREADS=2" in build


def test_rendered_use_existing_torch_really_strips_torch_pins(tree_copy):
    """The command the template renders, run on the real tree: torch pins go, setuptools stays."""
    layout = read_build_layout(tree_copy)
    subprocess.run([sys.executable, layout.use_existing_torch, *layout.use_existing_torch_args],
                   cwd=tree_copy, check=True, capture_output=True)
    build_reqs = (tree_copy / layout.requirements_file).read_text()
    assert "torch==" not in build_reqs and "setuptools>=78.1.1,<81.0.0" in build_reqs
    assert read_build_layout(tree_copy).setuptools == layout.setuptools


def test_render_without_a_tree_shows_placeholders():
    text = render_dockerfile(resolve(load_spec("thor")))
    assert "<build requirements of the prepared tree>" in text
    assert "MAX_JOBS=16" in text   # thor: 8 jobs x 2 threads


def test_033_runtime_requirements_follow_the_includes(tree_033):
    """What a compile's closure resolves from: requirements/cuda.txt and the common.txt it
    includes, each line with the file that lists it."""
    layout = read_build_layout(tree_033)
    assert layout.runtime_file == "requirements/cuda.txt"
    where = dict(layout.runtime_requirements)
    assert where["torch==2.14.0"] == "requirements/cuda.txt"
    assert where["certifi >= 2026.10.19"] == "requirements/common.txt"
    assert not any(line.startswith("-") for line, _ in layout.runtime_requirements)
    assert layout.builds_against_torch and "torch==2.14.0" not in layout.build_requirements
    assert "cmake>=3.26.1" in layout.build_requirements


def test_a_tree_without_runtime_requirements_reads_and_an_escaping_include_fails(tree_copy):
    from edgevllm.sources.buildreqs import read_requirement_tree

    (tree_copy / "requirements" / "cuda.txt").unlink()
    assert read_build_layout(tree_copy).runtime_file == ""   # the compile mode refuses it
    (tree_copy / "requirements" / "cuda.txt").write_text("-r ../../outside.txt\n")
    with pytest.raises(SourceError, match="outside the tree"):
        read_requirement_tree(tree_copy, "requirements/cuda.txt")
    (tree_copy / "requirements" / "cuda.txt").write_text("-r cuda.txt\n")
    with pytest.raises(SourceError, match="included twice"):
        read_requirement_tree(tree_copy, "requirements/cuda.txt")


@pytest.fixture(scope="module")
def flashinfer_072(tmp_path_factory) -> Path:
    """The two files of PyPI's FlashInfer 0.7.2.post1 sdist that say what its wheel needs."""
    return sdist_members(pypi_sdist("flashinfer-python", "0.7.2.post1"),
                         ["pyproject.toml", "requirements.txt"],
                         tmp_path_factory.mktemp("flashinfer-0.7.2.post1"))


def test_flashinfers_runtime_requirements_are_read_from_the_file_its_pyproject_names(
        flashinfer_072):
    """FlashInfer lists its dependencies as dynamic, from requirements.txt: a FlashInfer built
    from source brings these into the closure in place of PyPI's FlashInfer's."""
    from edgevllm.sources.buildreqs import read_project

    project = read_project(flashinfer_072)
    found = project.runtime
    assert any(r.startswith("apache-tvm-ffi") for r in project.build)
    names = {line.split(">")[0].split("=")[0].split("<")[0].strip() for line, _ in found}
    assert {where for _, where in found} == {"requirements.txt"}
    assert {"apache-tvm-ffi", "torch", "nvidia-cutlass-dsl", "cuda-python"} <= names
    assert "flashinfer-python" not in names and len(found) >= 15


def test_project_requirements_static_none_or_refused(tmp_path):
    from edgevllm.sources.buildreqs import TREE_TEXT_MAX_BYTES, read_project

    def read_project_requirements(tree):
        return read_project(tree).runtime

    assert read_project_requirements(tmp_path) == ()   # a setup.py-only tree: its code knows
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\ndependencies = ["numpy>=2", "einops"]\n')
    assert read_project_requirements(tmp_path) == (("numpy>=2", "pyproject.toml"),
                                                   ("einops", "pyproject.toml"))
    pyproject.write_text('project = "x"\n[build-system]\nrequires = ["setuptools"]\n')
    assert read_project(tmp_path).build == ("setuptools",)   # a key of any other shape: none
    assert read_project_requirements(tmp_path) == ()
    pyproject.write_text('[project]\nname = "x"\ndependencies = ["numpy >=> 2"]\n')
    with pytest.raises(SourceError, match=r"pyproject.toml:3: cannot read requirement 'numpy"):
        read_project_requirements(tmp_path)
    pyproject.write_text('[project]\ndynamic = ["dependencies"]\n[tool.setuptools.dynamic]\n'
                         'dependencies = { file = ["../outside.txt"] }\n')
    with pytest.raises(SourceError, match="outside the tree"):
        read_project_requirements(tmp_path)
    pyproject.write_text("a = " + "[" * 100_000 + "\n")
    with pytest.raises(SourceError, match="pyproject.toml: nested too deeply"):
        read_project_requirements(tmp_path)
    chain = [f"r{i}.txt" for i in range(40)]
    for here, there in zip(chain, chain[1:], strict=False):
        (tmp_path / here).write_text(f"-r {there}\n")
    (tmp_path / chain[-1]).write_text("einops\n")
    pyproject.write_text('[project]\ndynamic = ["dependencies"]\n[tool.setuptools.dynamic]\n'
                         'dependencies = { file = ["r0.txt"] }\n')
    with pytest.raises(SourceError, match=r"r16.txt: requirement files included more than 16 "
                                          "deep"):
        read_project_requirements(tmp_path)
    pyproject.write_text("# " + "x" * TREE_TEXT_MAX_BYTES + "\n")
    with pytest.raises(SourceError, match=r"pyproject.toml: \d+ bytes, more than such a file "
                                          "may hold"):
        read_project_requirements(tmp_path)


def test_a_build_file_linked_out_of_the_tree_is_refused(tree_copy, tmp_path):
    """A tree's build file or folder that links to a host file is never read (an error would
    print its lines)."""
    from edgevllm.sources.buildreqs import read_project

    secret = tmp_path / "secret.txt"
    secret.write_text("token-line\n")
    build = tree_copy / "requirements" / "build" / "cuda.txt"
    build.unlink()
    build.symlink_to(secret)
    with pytest.raises(SourceError, match="cuda.txt: a link out of the tree") as info:
        read_build_layout(tree_copy)
    assert "token-line" not in str(info.value)
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").symlink_to(secret)
    with pytest.raises(SourceError, match="pyproject.toml: a link out of the tree"):
        read_project(project)
