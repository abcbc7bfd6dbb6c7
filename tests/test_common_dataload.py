"""The one reader of outside YAML and JSON (common/dataload.py): bounded before a value is built,
one line of the caller's class, and no other module parses such data itself."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgevllm.common.dataload import MAX_DEPTH, MAX_VALUES, YAML_MAX_VALUES, load_json, load_yaml
from edgevllm.common.errors import ConfigError, LockError, ManifestError, RecipeError
from edgevllm.serve.recipe.importfolder import convert_file
from edgevllm.specs.lock import parse_lock, read_lock
from support.properties import PROPERTY, alias_bomb, bounded, json_values, yaml_bombs

PACKAGE = Path(__file__).resolve().parents[1] / "edgevllm"

# Modules that may parse JSON themselves, and why: each reads what edgevllm's own code (or the
# engine) wrote in the same run, or runs inside the image on the standard library alone.
OWN_DATA = {
    "common/dataload.py": "the reader itself",
    "containers/container.py": "the Docker engine's own answers (docker inspect, ps --format)",
    "containers/images.py": "the Docker engine's own answers (docker image inspect)",
    "containers/registry.py": "the Docker engine's own answers (buildx imagetools --format)",
    "image/registryauth.py": "a credential helper's answer on the user's host",
    "image/layerstore.py": "the engine's tar-split lines, each bounded by LINE_LIMIT",
    "cli/buildmany.py": "the result a child edgevllm process of this run wrote",
    "serve/starttime.py": "the last line of edgevllm's own start-time probe",
    "probe/level1.py": "the marker line of edgevllm's own level-1 check script",
    "probe/inimage_check.py": "runs inside the image (standard library only)",
    "serve/inimage_startprobe.py": "runs inside the image (standard library only)",
    "serve/inimage_entry.py": "runs inside the image (standard library only)",
    "builder/aot/inimage_build.py": "runs inside the image (standard library only)",
    "mods/inimage_applier.py": "runs inside the image (standard library only)",
    "builder/subset/inimage_cmake.py": "runs inside the image (standard library only): edgevllm's "
                               "own leave-out.json",
    "builder/distpool/inimage_stats.py": "runs inside the image (standard library only): sccache's "
                                         "own --show-stats JSON",
}
PARSERS = {("json", "loads"), ("json", "load"), ("_json", "loads"), ("yaml", "safe_load"),
           ("yaml", "load"), ("yaml", "full_load"), ("yaml", "unsafe_load"),
           ("yaml", "safe_load_all"), ("yaml", "load_all"), ("yaml", "compose")}


def _parser_calls(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                isinstance(node.func.value, ast.Name) and \
                (node.func.value.id, node.func.attr) in PARSERS:
            found.append(f"{node.func.value.id}.{node.func.attr} line {node.lineno}")
    return found


def test_no_other_module_parses_outside_yaml_or_json():
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        calls = _parser_calls(path)
        if calls and name not in OWN_DATA:
            offenders[name] = calls
    assert not offenders, f"parse outside data with common/dataload.py: {offenders}"
    assert all((PACKAGE / name).is_file() for name in OWN_DATA)  # the list stays true


def test_the_546_byte_alias_bomb_is_one_line_in_bounded_memory(tmp_path):
    bomb = alias_bomb()
    assert len(bomb) < 600
    for call, error in ((lambda: load_yaml(bomb, "x.yaml"), ConfigError),
                        (lambda: parse_lock(bomb, "x.lock.yaml", yaml_syntax=True), LockError)):
        found = bounded(call)
        assert isinstance(found, error) and "alias" in str(found), found
    (tmp_path / "bomb.lock.yaml").write_text(bomb)
    assert "x.lock" not in str(bounded(read_lock, tmp_path / "bomb.lock.yaml"))
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("recipe_version: '1'\n" + bomb)
    found = bounded(convert_file, recipe)  # an eugr recipe
    assert isinstance(found, RecipeError) and str(found).startswith(str(recipe))


@pytest.mark.parametrize("text, needle", [
    ("a: &x 1\nb: *x\n", "an anchor (&x) at line 1"),
    ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "nested too deeply"),
    ("[" + ",".join(["1"] * YAML_MAX_VALUES) + "]", f"more than {YAML_MAX_VALUES} values"),
    ("a: [", "fix the YAML syntax"),
    (b"a: \xff", "not UTF-8"),
    ("x" * (3 << 20), "more than a data file may hold"),
])
def test_yaml_beyond_the_bounds_is_one_line_of_the_callers_class(text, needle):
    found = bounded(load_yaml, text, "f.yaml", ManifestError)
    assert isinstance(found, ManifestError) and str(found).startswith("f.yaml") \
        and needle in str(found), found


@pytest.mark.parametrize("text, needle", [
    ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "nested too deeply"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ("[" + "[]," * MAX_VALUES + "[]]", "values"),
    ("1" * 5000, "nested too deeply or sized"),  # an integer Python refuses to convert
    ("{oops", "not valid JSON (line 1"),
])
def test_json_beyond_the_bounds_is_one_line_of_the_callers_class(text, needle):
    found = bounded(load_json, text, "f.json", LockError)
    assert isinstance(found, LockError) and needle in str(found), found


def test_ordinary_data_reads_as_before():
    assert load_yaml("a: [1, {b: c}]\n", "f") == {"a": [1, {"b": "c"}]}
    assert load_json(b'{"a": [1, 2.5, null]}', "f") == {"a": [1, 2.5, None]}


@PROPERTY
@given(yaml_bombs())
def test_yaml_bombs_are_refused_within_the_bounds(text):
    found = bounded(load_yaml, text, "bomb.yaml", RecipeError)
    assert isinstance(found, RecipeError), found


@PROPERTY
@given(json_values(max_leaves=30), st.integers(0, 3))
def test_any_json_value_reads_back_or_is_one_line(value, wrap):
    text = "[" * wrap * 30 + json.dumps(value) + "]" * wrap * 30
    found = bounded(load_json, text, "any.json", LockError)
    assert isinstance(found, LockError) or wrap * 30 < MAX_DEPTH


def test_shell_words_of_others_are_bounded_before_they_are_split():
    """The one splitter of others' shell text (an eugr command, a recipe's build args, a run.sh
    line): a megabyte token is one line at once (shlex alone is quadratic in a token's length),
    quoting that does not close is one line, and ordinary text splits as a shell would."""
    from edgevllm.common.dataload import WORDS_MAX_CHARS, shell_words
    from edgevllm.serve.recipe.buildargs import build_fields

    assert shell_words("cp 'a b' c # x", "run.sh", comments=True) == ["cp", "a b", "c"]
    huge = "--vllm-ref " + "a" * (1 << 20)
    refused = bounded(shell_words, huge, "cmd", RecipeError)
    assert isinstance(refused, RecipeError)
    assert f"cmd: {len(huge)} characters, over the {WORDS_MAX_CHARS}" in str(refused)
    with pytest.raises(ManifestError, match="x: cannot split it .*fix the quoting"):
        shell_words("echo 'open", "x", ManifestError)
    with pytest.raises(RecipeError, match=r"r\.yaml: field 'build_args': .* characters, over"):
        build_fields([huge], "r.yaml", [])


def test_a_text_file_from_others_is_bounded_and_utf8(tmp_path):
    from edgevllm.common.dataload import load_text
    from edgevllm.common.errors import SourceError

    path = tmp_path / "requirements.txt"
    path.write_bytes(b"torch\n" * 10)
    assert load_text(path, SourceError, 60) == "torch\n" * 10
    with pytest.raises(SourceError, match=r"requirements.txt: 60 bytes, more than such a file may "
                                          r"hold \(59\)"):
        load_text(path, SourceError, 59)
    path.write_bytes(b"torch\n\xff")
    with pytest.raises(SourceError, match=r"requirements.txt: not UTF-8 text \(byte 6\)"):
        load_text(path, SourceError, 60)
