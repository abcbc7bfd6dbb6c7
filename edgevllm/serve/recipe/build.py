"""The image a recipe needs, as build spec fields (``inv build --recipe NAME``).

A recipe with ``build: {spec: FILE}`` (an imported eugr recipe has one: its mods, packages and
tag) gives that file's fields. Any recipe also gets what its own arguments need: the packages of
the ``--load-format`` it names (InstantTensor), pinned and required by the build's probe, and its
image tag as the build's tag, so ``inv serve`` finds the image the recipe names.
"""

from __future__ import annotations

from pathlib import Path

from edgevllm.common.dataload import YAML_MAX_BYTES, load_text
from edgevllm.common.errors import RecipeError
from edgevllm.common.paths import project_root
from edgevllm.common.requirements import requirement, where_in
from edgevllm.common.schema import read_yaml
from edgevllm.serve.recipe.load import load_recipe
from edgevllm.serve.recipe.schema import Recipe
from edgevllm.specs.targets import load_target

# ``--load-format X`` → the package vLLM imports for it (PyPI name and the pin edgevllm tested:
# instanttensor 0.2.2 has an aarch64 wheel).
LOAD_FORMAT_PACKAGES = {"instanttensor": ("instanttensor", "0.2.2")}
LOAD_FORMAT_IMPORTS = {"instanttensor": "instanttensor"}  # PyPI name → the module vLLM imports


def recipe_spec_fields(ref: str, target: str | None = None) -> dict:
    """Build spec fields for recipe ``ref`` (a name or a file) on ``target`` (default: its
    first)."""
    loaded = load_recipe(ref)
    recipe = loaded.recipe
    fields: dict = {}
    if recipe.build and recipe.build.spec:
        path = project_root() / recipe.build.spec  # an absolute path stays itself
        data = read_yaml(path, RecipeError)
        if not isinstance(data, dict):
            raise RecipeError(f"{path}: a build spec is a mapping of fields")
        check_requirements(data, path)
        fields.update(data)
    elif recipe.build and recipe.build.lock:
        raise RecipeError(f"recipe {loaded.name} builds from a lock: inv build --lock "
                          f"{recipe.build.lock}")
    chosen = target or fields.get("target") or recipe.targets[0]
    if chosen not in recipe.targets:
        raise RecipeError(f"recipe {loaded.name} runs on {', '.join(recipe.targets)}, not "
                          f"'{chosen}'")
    fields["target"] = chosen
    packages = dict(fields.get("packages") or {})
    packages.update({name: pin for name, pin in needed_packages(recipe)
                     if name not in packages})
    if packages:
        fields["packages"] = packages
    imports = [LOAD_FORMAT_IMPORTS[name] for name, _ in needed_packages(recipe)]
    if imports:  # the build's probe imports them: the recipe needs them, not just its install
        given = fields.get("probe_required")
        if given is None:
            given = load_target(chosen).probe.required_imports
        fields["probe_required"] = list(dict.fromkeys([*given, *imports]))
    if recipe.image and "{{" not in recipe.image and "@" not in recipe.image:
        fields["tags"] = list(dict.fromkeys([*(fields.get("tags") or []), recipe.image]))
    return fields


def check_requirements(data: dict, path: Path) -> None:
    """A recipe's build spec (others' file) names packages as data only: each of its
    ``overrides`` and ``packages`` (common/requirements.py), else one RecipeError naming the
    file and line, before anything resolves them on the host."""
    text = load_text(path, RecipeError, YAML_MAX_BYTES)   # read_yaml read it whole already
    overrides = data.get("overrides")
    for index, item in enumerate(overrides if isinstance(overrides, list) else []):
        requirement(str(item), where_in(path, text, str(item), f"field 'overrides.{index}'"),
                    RecipeError)
    packages = data.get("packages")
    for name, pin in (packages.items() if isinstance(packages, dict) else []):
        line = str(name) if pin is None else f"{name}=={str(pin).lstrip('=')}"
        requirement(line, where_in(path, text, str(name), "field 'packages'"), RecipeError)
    wheel = data.get("vllm_wheel")
    if wheel is not None:   # a release by version: a file or URL is the user's own flag only
        requirement(f"vllm=={str(wheel).lstrip('v')}",
                    where_in(path, text, str(wheel), "field 'vllm_wheel'"), RecipeError)


def with_overrides(fields: dict, overrides: dict) -> dict:
    """The recipe's fields under the command line's: lists that add (mods, tags, picks) append to
    the recipe's, mappings merge, anything else replaces; a ``--vllm-repo`` given without a ref
    keeps the recipe's ref (the recipe names the base its picks apply to)."""
    out = dict(fields)
    for key, value in overrides.items():
        base = out.get(key)
        if key in _APPENDED and isinstance(base, list):
            out[key] = [*base, *[v for v in value if v not in base]]
        elif isinstance(value, dict) and isinstance(base, dict):
            merged = with_overrides(base, value)
            if value.get("ref", "") is None and base.get("ref") and "pr" not in value:
                merged["ref"] = base["ref"]
            out[key] = merged
        else:
            out[key] = value
    return out


_APPENDED = ("add_mods", "tags", "cherry_picks")


def needed_packages(recipe: Recipe) -> list[tuple[str, str]]:
    """Packages the recipe's arguments need: ``--load-format instanttensor`` → InstantTensor."""
    args = [*recipe.serve.command, *recipe.serve.args]
    formats = [args[i + 1] for i, a in enumerate(args[:-1]) if a == "--load-format"]
    formats += [a.split("=", 1)[1] for a in args if a.startswith("--load-format=")]
    return [LOAD_FORMAT_PACKAGES[f] for f in dict.fromkeys(formats) if f in LOAD_FORMAT_PACKAGES]


def spec_file_text(target: str, add_mods: list[str], packages: dict[str, str],
                   tags: list[str], sources: dict | None = None) -> str:
    """The build spec an imported recipe carries (``<name>.build/spec.yaml``); ``sources``: the
    ``vllm`` / ``flashinfer`` fields its build_args name (base ref, picks)."""
    import yaml

    data: dict = {"target": target, **(sources or {})}
    if add_mods:
        data["add_mods"] = add_mods
    if packages:
        data["packages"] = packages
    if tags:
        data["tags"] = tags
    return yaml.safe_dump(data, sort_keys=False)


def spec_path_of(recipe_path: Path) -> Path:
    """``<name>.build/spec.yaml`` beside the recipe (a folder: recipe folders list *.yaml)."""
    return recipe_path.with_name(recipe_path.stem + ".build") / "spec.yaml"
