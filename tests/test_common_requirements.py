"""Requirements from others are data (common/requirements.py), through every entry that reads
them: a vLLM tree's runtime file, its ``-r`` include, its build file and pyproject, a FlashInfer
tree's pyproject dependencies and requirement file, a mod's packages, a recipe's build spec.

Each hostile line points at a real local project whose build backend writes a canary file when
imported. The front door is what a build does with an entry: read it, then resolve what it read
with the real uv (``sources/wheels.resolve_closure``). Without the parser the read passes and
the resolve is asked to build the project (without ``--no-build`` the canary appears: see
tests/test_sources_wheels.py); with it, the read is one line of the entry's error class naming
the file and the line, and nothing ran.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from edgevllm.common.errors import (
    EdgeVllmError,
    ManifestError,
    RecipeError,
    SourceError,
    SpecError,
)
from edgevllm.common.requirements import (
    check_requirement,
    requirement,
    source_only,
    source_only_line,
)
from edgevllm.sources.buildreqs import read_build_layout, read_project
from edgevllm.sources.wheels import resolve_closure
from support.hostile_requirements import canary_project, flashinfer_tree, vllm_tree

X86 = "x86_64-manylinux_2_34"


@pytest.fixture
def hostile(tmp_path) -> dict:
    """The canary's path, the project that writes it, and the lines that point at it."""
    canary = tmp_path / "CANARY"
    project = canary_project(tmp_path / "projects", canary)
    return {"canary": canary, "lines": {
        "direct reference": f"evil @ {project.as_uri()}",
        "local path": str(project),
        "editable": f"-e {project}",
        "vcs": f"evil @ git+{project.as_uri()}",
        "extra index": "--extra-index-url http://127.0.0.1:9/simple",
        "find-links": f"--find-links {project.parent}",
    }}


def front_door(read) -> None:
    """A build's use of an entry: its requirement lines read, then resolved on the host."""
    resolve_closure(read(), platform=X86, python_version="3.12")


def assert_refused(failure: pytest.ExceptionInfo, error: type[EdgeVllmError], where: str,
                   canary: Path) -> None:
    message = str(failure.value)
    assert not canary.exists(), f"{canary.read_text()} ({message})"
    assert type(failure.value) is error, f"{type(failure.value).__name__}: {message}"
    assert failure.value.exit_code == error.exit_code
    assert "\n" not in message and message.startswith(where), message


# --- the parser ------------------------------------------------------------------------------

@pytest.mark.parametrize("line", [
    "numpy>=2", "ray[cgraph]>=2.48.0", "torch == 2.14.0",
    "protobuf >= 5.29.6, !=6.30.*, !=6.33.0.*",
    "xformers==0.0.31; platform_system == 'Linux' and platform_machine == 'x86_64'",
])
def test_a_name_extras_version_and_marker_are_data(line):
    assert check_requirement(line).name


@pytest.mark.parametrize("line, named", [
    ("evil @ file:///srv/evil", "direct reference"),
    ("evil @ https://example.org/evil-1.0.tar.gz", "direct reference"),
    ("evil @ git+https://example.org/evil.git", "direct reference"),
    ("git+https://example.org/evil.git", "local path or URL"),
    ("https://example.org/evil-1.0.tar.gz", "local path or URL"),
    ("./evil", "local path or URL"), ("/srv/evil", "local path or URL"),
    ("~/evil", "local path or URL"), ("evil.tar.gz", "archive file"),
    ("evil-1.0-py3-none-any.whl", "archive file"),
    ("-e /srv/evil", "editable install"), ("--editable=/srv/evil", "editable install"),
    ("--index-url http://evil/simple", "an index"),
    ("-i http://evil/simple", "an index"),
    ("--extra-index-url=http://evil/simple", "an extra index"),
    ("--find-links /srv", "find-links"), ("-f /srv", "find-links"),
    ("--trusted-host evil", "trusted host"), ("-c /etc/constraints.txt", "constraint file"),
    ("--no-binary :all:", "an option"),
    ("six ; platform_release != ' --index-url http://evil'", "more than a requirement"),
    ("six ; platform_release != '${HOME}'", "more than a requirement"),
    ("six\n-r /etc/passwd", "more than a requirement"),
    ("numpy >=> 2", "cannot read requirement"),
])
def test_anything_else_is_one_line_of_the_entrys_class(line, named):
    for error in (SourceError, ManifestError, RecipeError):
        with pytest.raises(error) as failure:
            requirement(line, "FILE:3", error)
        message = str(failure.value)
        assert message.startswith("FILE:3: ") and named in message and "\n" not in message
        assert type(failure.value) is error


def test_others_text_is_shown_escaped_and_short():
    with pytest.raises(SourceError) as failure:
        requirement("./" + "\x1b[2J" + "x" * 500, "F:1", SourceError)
    message = str(failure.value)
    assert "\x1b" not in message and len(message) < 400


def test_the_user_override_keeps_data_only():
    """The user's --override (a spec's overrides) is a requirement too: a URL is refused in
    one line (docs/security.md), a name with a specifier and a marker is kept."""
    from edgevllm.specs.buildspec import load_spec

    assert load_spec("spark", overrides={"overrides": ["certifi>=2026.10.18"]}).overrides
    with pytest.raises(SpecError, match=r"overrides.*direct reference") as failure:
        load_spec("spark", overrides={"overrides": ["evil @ file:///srv/evil"]})
    assert "\n" not in str(failure.value)


def test_uvs_words_for_a_package_only_a_build_gives_are_read():
    """What --no-build makes uv say, read as (package, what required it)."""
    transitive = ("× No solution found when resolving dependencies:\n"
                  "  ╰─▶ Because docopt==0.6.2 has no usable wheels and only docopt<=0.6.2 is\n"
                  "      available, we can conclude that docopt>=0.6.2 cannot be used.\n"
                  "      And because pykwalify>=1.8.0 depends on docopt>=0.6.2 and you require\n"
                  "      pykwalify==1.8.0, we can conclude that your requirements are\n"
                  "      unsatisfiable.\n\n      hint: Wheels are required for `docopt` because\n"
                  "      building from source is disabled for all packages")
    assert source_only(transitive) == ("docopt", "pykwalify")
    direct = ("error: Failed to build `evil @ file:///x`\n  cause: Building source "
              "distributions for `evil` is disabled")
    assert source_only(direct) == ("evil", "the requested packages")
    assert source_only("Because torch==9 was not found in the package registry") is None
    line = source_only_line("docopt", "pykwalify", "aarch64-manylinux_2_34 / Python 3.12")
    assert "--package docopt==VER" in line and "\n" not in line


# --- every entry -----------------------------------------------------------------------------

FORMS = ["direct reference", "local path", "editable", "vcs", "extra index", "find-links"]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("entry, file, before", [
    ("runtime file", "requirements/cuda.txt", "-r common.txt\nnumba == 0.61.2\n"),
    ("-r include", "requirements/common.txt", "# common\nrequests >= 2.26.0\n"),
    ("build file", "requirements/build/cuda.txt", "setuptools>=77\n"),
])
def test_a_vllm_trees_requirement_files(tmp_path, hostile, form, entry, file, before):
    tree = vllm_tree(tmp_path, {file: before + hostile["lines"][form] + "\n"})
    line = before.count("\n") + 1

    def read() -> list[str]:
        layout = read_build_layout(tree)
        return [*(r for r, _ in layout.runtime_requirements), *layout.build_requirements]

    with pytest.raises(EdgeVllmError) as failure:
        front_door(read)
    assert_refused(failure, SourceError, f"{tree / file}:{line}: ", hostile["canary"])


def test_a_vllm_trees_pyproject_build_requires(tmp_path, hostile):
    direct = hostile["lines"]["direct reference"]
    tree = vllm_tree(tmp_path, {"pyproject.toml": f'[build-system]\nrequires = [\n  "wheel",\n'
                                                  f'  "{direct}",\n]\n'})
    with pytest.raises(EdgeVllmError) as failure:
        front_door(lambda: list(read_build_layout(tree).pyproject_requires))
    assert_refused(failure, SourceError, f"{tree / 'pyproject.toml'}:4: ", hostile["canary"])


@pytest.mark.parametrize("form", FORMS)
def test_a_flashinfer_trees_pyproject_dependencies(tmp_path, hostile, form):
    text = hostile["lines"][form].replace("\\", "\\\\")
    tree = flashinfer_tree(tmp_path, f'[project]\nname = "flashinfer-python"\n'
                                     f'dependencies = [\n  "numpy",\n  "{text}",\n]\n')
    with pytest.raises(EdgeVllmError) as failure:
        front_door(lambda: [r for r, _ in read_project(tree).runtime])
    assert_refused(failure, SourceError, f"{tree / 'pyproject.toml'}:5: ", hostile["canary"])


def test_a_flashinfer_trees_build_requires(tmp_path, hostile):
    direct = hostile["lines"]["direct reference"]
    tree = flashinfer_tree(tmp_path, f'[build-system]\nrequires = ["setuptools>=77", '
                                     f'"{direct}"]\nbuild-backend = "build_backend"\n')
    with pytest.raises(EdgeVllmError) as failure:
        front_door(lambda: list(read_project(tree).build))
    assert_refused(failure, SourceError, f"{tree / 'pyproject.toml'}:2: ", hostile["canary"])


@pytest.mark.parametrize("form", FORMS)
def test_a_flashinfer_trees_requirement_file(tmp_path, hostile, form):
    tree = flashinfer_tree(
        tmp_path, '[project]\nname = "flashinfer-python"\ndynamic = ["dependencies"]\n'
                  '[tool.setuptools.dynamic]\ndependencies = { file = ["requirements.txt"] }\n',
        requirements=f"numpy\ntorch\n{hostile['lines'][form]}\n")
    with pytest.raises(EdgeVllmError) as failure:
        front_door(lambda: [r for r, _ in read_project(tree).runtime])
    assert_refused(failure, SourceError, f"{tree / 'requirements.txt'}:3: ", hostile["canary"])


def test_a_constraint_file_inside_the_tree_is_checked_and_one_outside_refused(tmp_path,
                                                                              hostile):
    from edgevllm.sources.buildreqs import read_requirement_tree

    tree = vllm_tree(tmp_path, {"requirements/cuda.txt": "-c pins.txt\nnumba\n",
                                "requirements/pins.txt": "numba==0.61.2\n"})
    assert read_requirement_tree(tree, "requirements/cuda.txt") == [
        ("numba", "requirements/cuda.txt")]
    (tree / "requirements" / "pins.txt").write_text(hostile["lines"]["direct reference"] + "\n")
    with pytest.raises(SourceError, match=r"pins.txt:1: .*direct reference"):
        read_requirement_tree(tree, "requirements/cuda.txt")
    (tree / "requirements" / "cuda.txt").write_text("-c ../../outside.txt\n")
    with pytest.raises(SourceError, match="outside the tree"):
        read_requirement_tree(tree, "requirements/cuda.txt")


@pytest.mark.parametrize("step", [
    "{{kind: pip_install, requirements: ['numpy', '{line}']}}",
    "{{kind: dist_files, package: '{line}', version: '1.0'}}",
])
def test_a_mods_packages(tmp_path, hostile, monkeypatch, step):
    """A mod's packages join the closure (catalog's pip_packages): a hostile one is refused when
    the manifest loads, naming the file and the field."""
    from edgevllm.mods import catalog

    root = tmp_path / "mods"
    folder = root / "hostile"
    folder.mkdir(parents=True)
    line = hostile["lines"]["direct reference"]
    (folder / "manifest.yaml").write_text(
        "name: hostile\nversion: '1'\ndescription: d\ntargets: [thor]\n"
        f"steps: [{step.format(line=line)}]\n")
    monkeypatch.setenv("EDGEVLLM_MODS_PATH", str(root))
    with pytest.raises(EdgeVllmError) as failure:
        front_door(lambda: catalog.stage_mods(["hostile"], "thor", tmp_path / "ctx").pip_packages)
    assert_refused(failure, ManifestError, f"{folder / 'manifest.yaml'}: field 'steps.0.",
                   hostile["canary"])


def recipe_with_spec(tmp_path: Path, spec: str) -> Path:
    (tmp_path / "hostile.build").mkdir()
    (tmp_path / "hostile.build" / "spec.yaml").write_text(spec)
    recipe = tmp_path / "hostile.yaml"
    recipe.write_text(
        "name: hostile\ndescription: d\ntargets: [thor]\nstatus: {thor: untested}\n"
        "image: me/hostile:1\nmodel: org/m\nserve: {args: ['{{ model }}']}\n"
        f"build: {{spec: {tmp_path / 'hostile.build' / 'spec.yaml'}}}\n")
    return recipe


@pytest.mark.parametrize("field", ["overrides", "packages", "vllm_wheel"])
def test_a_recipes_build_spec(tmp_path, hostile, user_config_home, field):
    """A recipe's build spec is others' file: its overrides, packages and vLLM wheel are data
    (a release by version; a wheel file or URL is the user's own --vllm-wheel only)."""
    from edgevllm.serve.recipe.build import recipe_spec_fields

    line = hostile["lines"]["direct reference"]
    spec = {"overrides": f"target: thor\noverrides:\n  - numpy>=2\n  - '{line}'\n",
            "packages": f"target: thor\npackages:\n  numpy: '2.0'\n  '{line}': '1.0'\n",
            "vllm_wheel": "target: thor\ntags: [me/x:1]\nmode: prebuilt\nvllm_wheel: "
                          "https://example.org/vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl\n",
            }[field]
    recipe = recipe_with_spec(tmp_path, spec)

    def read() -> list[str]:
        fields = recipe_spec_fields(str(recipe))
        wheel = [f"vllm @ {fields['vllm_wheel']}"] if "vllm_wheel" in fields else []
        return [*fields.get("overrides", []), *fields.get("packages", {}), *wheel]

    with pytest.raises(EdgeVllmError) as failure:
        front_door(read)
    where = f"{tmp_path / 'hostile.build' / 'spec.yaml'}:4: "
    assert_refused(failure, RecipeError, where, hostile["canary"])


def test_a_recipes_hostile_package_is_one_error_line_and_its_exit_code(tmp_path, hostile,
                                                                       user_config_home, cli):
    """The task itself: ``inv render --recipe FILE`` says one line and exits with 11."""
    line = hostile["lines"]["direct reference"]
    recipe = recipe_with_spec(tmp_path, f"target: thor\noverrides: ['{line}']\n")
    code, out, err = cli("render", "--recipe", str(recipe), "--out", str(tmp_path / "out"))
    lines = err.strip().splitlines()
    assert code == RecipeError.exit_code, err
    assert len(lines) == 1 and lines[0].startswith("error: ") and "spec.yaml:2" in lines[0], err
    assert "Traceback" not in err and not hostile["canary"].exists()


@pytest.mark.parametrize("include", ["-r \x00ommon.txt", "-r " + "a" * 5000 + ".txt"])
def test_an_include_no_filesystem_can_name_is_one_line(tmp_path, include):
    """Found by the property test: a NUL or a name too long for the filesystem in ``-r``."""
    from edgevllm.sources.buildreqs import read_requirement_tree

    tree = vllm_tree(tmp_path, {"requirements/cuda.txt": include + "\n"})
    with pytest.raises(SourceError) as failure:
        read_requirement_tree(tree, "requirements/cuda.txt")
    assert "\n" not in str(failure.value)


def test_a_dynamic_requirement_file_no_filesystem_can_name_is_one_line(tmp_path):
    tree = flashinfer_tree(tmp_path, '[project]\ndynamic = ["dependencies"]\n'
                                     '[tool.setuptools.dynamic]\n'
                                     'dependencies = { file = ["r\\u0000.txt"] }\n')
    with pytest.raises(SourceError) as failure:
        read_project(tree)
    assert "\n" not in str(failure.value)
