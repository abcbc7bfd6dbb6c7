"""The values recipe templates see: ``defaults``, topology and model, with ``--set`` overrides.

``--set key=value`` values are YAML scalars (``0.8`` is a number, ``true`` a bool, ``null`` no
value; ``012``, ``1:30``, ``yes`` and a date stay the text typed); a key the
recipe neither defaults nor reads is refused, and a name listed in ``required`` takes its value
from ``defaults`` or ``--set`` only.
"""

from __future__ import annotations

import difflib
import os
import re

from edgevllm.common.dataload import load_yaml
from edgevllm.common.errors import RecipeError
from edgevllm.common.kv import split_pair
from edgevllm.common.paths import host_hf_cache
from edgevllm.serve.recipe.render import placeholders
from edgevllm.serve.recipe.schema import RESERVED, Recipe


def parse_sets(items: list[str] | None) -> dict[str, object]:
    """``key=value`` pairs; values are YAML scalars (``0.8`` is a number, ``true`` a bool)."""
    out: dict[str, object] = {}
    for item in items or []:
        key, raw = split_pair(item, "--set", RecipeError, "key=value, e.g. --set port=9000")
        out[key] = _scalar(raw)
    return out


# A number as written in decimal: what --set reads as a number (PyYAML's YAML 1.1 also reads
# 012 as 10, 1:30 as 90 and 1_000 as 1000, which no one typing a flag means).
_DECIMAL = re.compile(r"[-+]?(?:0|[1-9][0-9]*)(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?|[-+]?\.[0-9]+")
_BOOLS = {"true", "false"}


def _scalar(raw: str) -> object:
    """One --set value: a decimal number, true/false, null/~ (no value) as YAML reads them; any
    other text, YAML 1.1's yes/on/off, octal, sexagesimal and dates included, the text itself.
    JSON such as a speculative config stays the string it was given."""
    if not raw.strip():
        return ""
    try:
        value = load_yaml(raw, "--set", RecipeError)
    except RecipeError:
        return raw
    text = raw.strip()
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return value if text.lower() in _BOOLS else raw
    if isinstance(value, (int, float)) and _DECIMAL.fullmatch(text):
        return value
    return raw


def template_values(recipe: Recipe, overrides: dict[str, object] | None = None,
                    source: str = "recipe", clustered: bool = False) -> dict[str, object]:
    """``defaults`` + topology + model, with ``--set`` overrides applied; unknown keys refused.

    ``clustered``: the values of the recipe's clustered form (``topology.cluster``).
    """
    overrides = dict(overrides or {})
    known = set(recipe.defaults) | set(RESERVED) | placeholders(recipe)
    unknown = sorted(k for k in overrides if k not in known)
    if unknown:
        raise RecipeError(f"--set {unknown[0]}: {source} has no such key; settable keys: "
                          f"{', '.join(sorted(known))}")
    target = overrides.get("target") or _default_target(recipe, source)
    if target not in recipe.targets:
        raise RecipeError(f"{source}: target '{target}' is not one of this recipe's targets "
                          f"({', '.join(recipe.targets)})")
    topo = recipe.topology.cluster if clustered and recipe.topology.cluster else recipe.topology
    values: dict[str, object] = {
        "model": recipe.model, "image": recipe.image, "target": target,
        "tensor_parallel": topo.tensor_parallel,
        "pipeline_parallel": topo.pipeline_parallel,
        "nodes": topo.nodes,
        "port": 8000, "hf_cache": "~/.cache/huggingface",
    }
    values.update(recipe.defaults)
    if os.environ.get("HF_HOME"):
        # The host's HF_HOME is where inv model-fetch put the model: mount that, not the
        # recipe's default folder, so nothing is downloaded again in the container.
        values["hf_cache"] = str(host_hf_cache())
    values.update(overrides)
    _check_required(recipe, overrides, source)
    return values


def _check_required(recipe: Recipe, overrides: dict[str, object], source: str) -> None:
    """A required placeholder takes its value from defaults or --set, never from topology."""
    for name in recipe.required:
        if name in overrides or recipe.defaults.get(name) is not None:
            continue
        close = difflib.get_close_matches(name, list(recipe.defaults), n=1, cutoff=0.75)
        hint = f" (defaults has '{close[0]}': a misspelling?)" if close else ""
        raise RecipeError(f"{source}: field 'required': placeholder '{name}' has no value{hint}; "
                          f"add it under defaults or pass --set {name}=VALUE")


def _default_target(recipe: Recipe, source: str) -> str:
    """No --target: on a Thor or a Spark, that device's target (said once); elsewhere the
    recipe's first."""
    from edgevllm.common import console
    from edgevllm.specs.targets import device_target

    found = device_target()
    if found is None:
        return recipe.targets[0]
    name, said = found
    if name not in recipe.targets:
        raise RecipeError(f"{source}: this machine is {said} (target {name}) but the recipe runs "
                          f"on {', '.join(recipe.targets)}: pass --target {recipe.targets[0]} "
                          "to use it anyway")
    if len(recipe.targets) > 1:
        console.info(f"this machine is {said}: target {name}")
    return name
