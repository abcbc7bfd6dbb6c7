"""Recipe templates render in a sandbox (real Jinja2): no expression reaches a Python object, runs
a command or reads the environment; eugr's literal text is escaped, never wrapped in raw."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from edgevllm.common.errors import RecipeError
from edgevllm.serve.recipe.importer import convert, escape_template
from edgevllm.serve.recipe.load import parse_recipe, render
from edgevllm.serve.recipe.render import render_text
from support.properties import PROPERTY, bounded

SECRET = "hf_sandboxsecretvalue0123456789"
HOSTILE = [
    "{{ cycler.__init__.__globals__.os.system('touch owned') }}",
    "{{ joiner.__init__.__globals__.os.system('touch owned') }}",
    "{{ namespace.__init__.__globals__.os.environ }}",
    "{{ model.__class__.__mro__[1].__subclasses__() }}",
    "{{ model['__class__'] }}",
    "{{ model|attr('__class__') }}",
    "{{ self._TemplateReference__context }}",
    "{{ lipsum.__globals__ }}",
    "{{ range(10) }}",
    "{{ 'a' * 1000000000 }}",
    "{{ 2 ** 1000000000 }}",
    "{{ model.upper() }}",
    "{% for c in ''.__class__.__subclasses__() %}{{ c }}{% endfor %}",
    "{{ model|format }}",
    "{% for a in s %}{% for b in s %}{% for c in s %}x{% endfor %}{% endfor %}{% endfor %}",
    "{% set x = 1 %}{{ x }}",
    "{% macro m() %}{% endmacro %}",
    "{% include 'etc/passwd' %}",
    "{% extends '/etc/passwd' %}",
    # amplifying filters and arithmetic: each would take gigabytes or hang
    "{{ s|replace('x', 'xxxxxxxxxxxxxxxx')|replace('x', 'xxxxxxxxxxxxxxxx')|replace('x', "
    "'xxxxxxxxxxxxxxxx')|replace('x', 'xxxxxxxxxxxxxxxx')|replace('x', 'xxxxxxxxxxxxxxxx') }}",
    "{{ s|replace('', 'yyyyyyyyyyyyyyyyyyyy')|replace('', 'zzzzzzzzzzzzzzzzzzz')"
    "|replace('', 'wwwwwwwwwwwwwwwwwwww')|replace('', 'vvvvvvvvvvvvvvvvvvv') }}",
    "{{ (s|replace('x', '" + "x" * 300 + "'))|join(s|replace('x', '" + "y" * 300 + "')) }}",
    "{{ ((2 ** 64) ** 64) ** 64 }}",
    "{{ (((n ** 64) ** 64) ** 64) ** 64 }}",
    "{{ [s] * 1000000000 }}",
    "{{ '%0999999999d' % 1 }}",
    "{{ 1 // 0 }}",
    "{{ s|join('x', attribute='__class__') }}",
    "{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}",
    "{{ " + "[" * 5000 + "1" + "]" * 5000 + " }}",
]


def recipe(arg: str) -> dict:
    return {"name": "t", "description": "d", "targets": ["thor"], "status": {"thor": "untested"},
            "image": "edgevllm/vllm:thor", "model": "org/m", "defaults": {"n": 2, "s": "x"},
            "serve": {"args": [arg]}}


@pytest.mark.parametrize("arg", HOSTILE)
def test_a_hostile_template_is_one_recipe_error_and_runs_nothing(arg, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_TOKEN", SECRET)
    with pytest.raises(RecipeError) as info:
        render(parse_recipe(recipe(arg), "hostile.yaml"))
    message = str(info.value)
    assert "\n" not in message and "serve.args[0]" in message
    assert SECRET not in message
    assert not (tmp_path / "owned").exists()


def test_the_cli_gives_one_error_line_and_no_side_effect(tmp_path, cli):
    path = tmp_path / "evil.yaml"
    path.write_text(yaml.safe_dump(recipe(HOSTILE[0])))
    code, out, err = cli("serve", str(path), "--dry-run", cwd=tmp_path,
                         env={"HF_TOKEN": SECRET})
    assert code == 11, err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err and SECRET not in out + err
    assert not (tmp_path / "owned").exists()


def test_no_template_value_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", SECRET)
    for name in ("HF_TOKEN", "environ", "os", "config", "request"):
        with pytest.raises(RecipeError, match="is not defined"):
            render_text("{{ %s }}" % name, {}, "env.X", "t")


def test_names_filters_and_conditions_still_render():
    text = "{% if n > 1 %}--tp={{ n|int + 1 }}{% endif %} {{ s|upper|default('y') }} {{ m|lower }}"
    assert render_text(text, {"n": 2, "s": "x", "m": "A/B"}, "f", "t") == "--tp=3 X a/b"


@pytest.mark.parametrize("literal", [
    "{% endraw %}{{ cycler.__init__.__globals__.os.system('touch owned') }}{% raw %}",
    "{{ x }}", "{% if a %}", "{# c #}", "{{{", "a{", "}}", "{ {%",
])
def test_escaped_eugr_text_renders_to_itself(literal):
    assert render_text(escape_template(literal), {}, "f", "t") == literal


def test_an_eugr_command_closing_raw_runs_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    smuggled = "{% endraw %}{{ cycler.__init__.__globals__.os.system('touch owned') }}"
    eugr_text = smuggled.replace("{", "{{").replace("}", "}}")  # str.format's literal braces
    data = {"name": "x", "container": "vllm-node", "defaults": {"port": 8000},
            "command": f'vllm serve m --port {{port}} --chat-template "{eugr_text}"'}
    converted = convert(data, "eugr.yaml").recipe
    rendered = render(parse_recipe(converted, "c"))
    assert rendered.command[-1] == smuggled
    assert not Path("owned").exists()


def test_an_eugr_placeholder_that_is_not_a_name_is_refused():
    data = {"name": "x", "container": "vllm-node",
            "command": "vllm serve m --x {cycler.__init__.__globals__}"}
    with pytest.raises(RecipeError, match="not a plain name"):
        convert(data, "eugr.yaml")


@pytest.mark.parametrize("env", [{"HF_AUTH": "x"},
                                 {"SETTING": "hf_abcdefghijklmnopqrstuvwxyz0123"}])
def test_a_secret_in_recipe_env_is_refused_without_quoting_it(env):
    data = {**recipe("{{ model }}"), "env": env}
    with pytest.raises(RecipeError, match="list its name under secrets") as info:
        parse_recipe(data, "r.yaml")
    assert "hf_abcdefghijklmnopqrstuvwxyz0123" not in str(info.value)


@st.composite
def amplifying_templates(draw) -> str:
    """Chains of filters and arithmetic that multiply what a small template makes."""
    parts = ["s"]
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(("replace", "join", "upper", "default", "pow", "mul")))
        wide = "q" * draw(st.integers(0, 200))
        if kind == "replace":
            parts.append(f"|replace({draw(st.sampled_from(['', 'x', 'q']))!r}, {wide!r})")
        elif kind == "join":
            parts.append(f"|join({wide!r})")
        elif kind in ("upper", "default"):
            parts.append(f"|{kind}")
        else:
            op = "**" if kind == "pow" else "*"
            return f"{{{{ ({''.join(parts)}|length) {op} {draw(st.integers(0, 10 ** 6))} }}}}"
    return "{{ " + "".join(parts) + " }}"


@PROPERTY
@given(amplifying_templates(), st.integers(0, 2000))
def test_amplifying_templates_stay_within_the_bounds(template, size):
    found = bounded(render_text, template, {"s": "x" * size, "n": 2}, "serve.args[0]", "t")
    assert isinstance(found, (str, RecipeError))
    assert not isinstance(found, str) or len(found) <= 64 * 1024
