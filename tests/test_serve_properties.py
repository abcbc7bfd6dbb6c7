"""Property-based tests (Hypothesis) of the recipe readers: edgevllm recipes (the repository's
recipes/*.yaml, parsed and rendered) and eugr's spark-vllm-docker recipes (the fixtures of
tests/fixtures/eugr-recipes, converted by the importer). Each mutated recipe gives a result or
one of edgevllm's own errors, one line, within the memory and time bounds."""

from __future__ import annotations

from pathlib import Path

import yaml
from hypothesis import given
from hypothesis import strategies as st

from edgevllm.common.errors import RecipeError
from edgevllm.common.schema import read_yaml
from edgevllm.serve.recipe.importer import convert
from edgevllm.serve.recipe.load import parse_recipe, render
from support.properties import PROPERTY, bounded, json_values, mutated, replaced_field

REPO = Path(__file__).resolve().parent.parent
RECIPES = sorted((REPO / "recipes").glob("*.yaml"))
EUGR = sorted(p for p in (REPO / "tests" / "fixtures" / "eugr-recipes" / "recipes").rglob("*.yaml"))


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def _parse_and_render(data: object, source: str):
    recipe = parse_recipe(data, source)
    return render(recipe)


def _recipe_cases():
    return st.sampled_from(RECIPES).flatmap(
        lambda path: st.tuples(st.just(path), replaced_field(_load(path))))


@PROPERTY
@given(_recipe_cases())
def test_a_recipe_with_any_field_replaced(case):
    path, data = case
    bounded(_parse_and_render, data, str(path))


def _read_and_render(folder: Path, data: bytes):
    path = folder / "fuzz-recipe.yaml"
    path.write_bytes(data)
    return _parse_and_render(read_yaml(path, RecipeError), str(path))


@PROPERTY
@given(st.sampled_from(RECIPES).flatmap(lambda path: mutated(path.read_bytes())))
def test_a_recipe_file_with_its_bytes_mutated(tmp_path_factory, data):
    bounded(_read_and_render, tmp_path_factory.getbasetemp(), data)


@PROPERTY
@given(st.sampled_from(EUGR).flatmap(
    lambda path: st.tuples(st.just(path), replaced_field(_load(path)))))
def test_an_eugr_recipe_with_any_field_replaced(case):
    path, data = case
    bounded(convert, data, str(path))  # the real path: its mods are looked up beside it


@PROPERTY
@given(st.sampled_from(EUGR), json_values())
def test_an_eugr_recipe_of_any_json(path, data):
    bounded(convert, data, str(path))
