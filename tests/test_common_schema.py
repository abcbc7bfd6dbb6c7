"""The one formatter of validation errors: every problem at once, on one line, with did-you-mean."""

from __future__ import annotations

import pytest
from pydantic import Field

from edgevllm.common.errors import ConfigError, RegistryError
from edgevllm.common.schema import Strict, did_you_mean, json_object, parse_model


class Inner(Strict):
    ref: str = "main"
    jobs: int = 1


class Outer(Strict):
    model: str
    port: int = 8000
    inner: Inner = Field(default_factory=Inner)
    many: list[Inner] = Field(default_factory=list)


def problems(data) -> str:
    with pytest.raises(ConfigError) as failure:
        parse_model(Outer, data, "recipe.yaml")
    text = str(failure.value)
    assert "\n" not in text and text.startswith("recipe.yaml: ")
    return text


def test_a_misspelt_required_field_is_named_once_with_a_suggestion():
    text = problems({"modle": "x"})
    assert text == "recipe.yaml: unknown field 'modle' (did you mean 'model'?)"


def test_every_problem_is_reported_at_once():
    text = problems({"model": "m", "port": "eighty", "inner": {"reff": "v1", "jobs": "x"}})
    assert "field 'port'" in text
    assert "unknown field 'inner.reff' (did you mean 'ref'?)" in text
    assert "field 'inner.jobs'" in text
    assert text.count(";") == 2


def test_nested_lists_get_suggestions_from_the_item_model():
    text = problems({"model": "m", "many": [{"jbos": 2}]})
    assert "unknown field 'many.0.jbos' (did you mean 'jobs'?)" in text


def test_no_suggestion_for_a_far_name_lists_the_known_fields():
    assert problems({"model": "m", "zzz": 1}).endswith(
        "unknown field 'zzz' (known: inner, many, model, port)")


def test_missing_field_without_a_near_miss_is_still_reported():
    assert "field 'model': Field required" in problems({"port": 1})


@pytest.mark.parametrize("name, expected", [("modle", "model"), ("tagret", "target"),
                                            ("xyz", None)])
def test_did_you_mean(name, expected):
    hint = did_you_mean(name, ["model", "target", "port"])
    assert hint == (f" (did you mean '{expected}'?)" if expected else "")



@pytest.mark.parametrize("data", [b'{"a": [1]}', '{"a": [1]}'])
def test_outside_json_gives_its_object(data):
    assert json_object(data, "the answer", RegistryError) == {"a": [1]}


@pytest.mark.parametrize("data,said", [
    (b"\xff{", "is not JSON"), ("{oops", "is not JSON"),
    ("[" * 100_000 + "]" * 100_000, "is not JSON"),  # nesting deeper than Python recurses
    ("[1, 2]", "is not a JSON object"), ("null", "is not a JSON object"),
])
def test_outside_json_that_is_no_object_is_one_line(data, said):
    with pytest.raises(RegistryError) as failure:
        json_object(data, "host: the answer", RegistryError)
    assert str(failure.value) == f"host: the answer {said}"
