"""Import spark-vllm-docker (eugr) recipe files and folders: read, convert, write.

``import_file`` writes one recipe; ``import_dir`` imports a folder (``--dry-run``: nothing
written). Results go to the user's recipe folder (``$XDG_CONFIG_HOME/edgevllm/recipes``, where
``inv recipes`` and ``inv serve NAME`` look) unless ``--out`` says otherwise; each recipe is named
by its file name, with its subfolder of ``recipes/`` in front.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from edgevllm.common.errors import EdgeVllmError, RecipeError
from edgevllm.common.fsutil import atomic_write_bytes, atomic_write_text
from edgevllm.common.paths import user_data_dir, user_recipes_dir
from edgevllm.common.schema import parse_yaml, read_text
from edgevllm.mods.eugr import import_eugr_mod
from edgevllm.serve.recipe.build import needed_packages, spec_file_text, spec_path_of
from edgevllm.serve.recipe.importer import ImportResult, convert, recipe_name
from edgevllm.serve.recipe.load import parse_recipe
from edgevllm.specs.targets import all_targets


def render_yaml(result: ImportResult, source: str) -> str:
    lines = [f"# Imported from spark-vllm-docker recipe {Path(source).name} (inv recipe-import).",
             "# Not yet tried with an edgevllm image: review, then mark status known-good."]
    lines += [f"# WARNING: {warning}" for warning in result.warnings]
    lines += [f"# note: {note}" for note in result.notes]
    body = yaml.safe_dump(result.recipe, sort_keys=False, default_flow_style=False, width=1000,
                          allow_unicode=True)
    return "\n".join(lines) + "\n" + body


def _refuse_script(path: Path) -> None:
    try:
        with open(path, "rb") as handle:  # two bytes, not the file: /dev/zero has no end
            head = handle.read(2)
    except OSError:
        return  # read_text reports it
    if path.suffix == ".sh" or head == b"#!":
        raise RecipeError(f"{path}: launch scripts are not recipes; take the 'vllm serve' line "
                          "into a recipe's serve.args (docs/recipes.md), or import the YAML "
                          "recipe it came from")


def convert_file(path: Path, name: str | None = None) -> ImportResult:
    _refuse_script(path)
    text = read_text(path, RecipeError)  # bounded, read once
    result = convert(parse_yaml(text, str(path), RecipeError), str(path), name)
    comments = [line for line in text.splitlines() if line.lstrip().startswith("#")]
    if comments:
        result.notes.append(f"{len(comments)} comment line(s) (eugr keeps known issues there) "
                            f"are not carried: read them in {path.name}")
    return result


def write_result(result: ImportResult, source: Path, target: Path) -> None:
    """The recipe, its carried files (``<name>.files/``) and the build spec of its image
    (``<name>.build/spec.yaml``: its eugr mods, imported into the user's mods, the packages its
    arguments need, the vLLM and picks its build_args name, the tag it names), each written
    atomically."""
    for fname, body in result.files.items():
        atomic_write_bytes(target.parent / f"{result.recipe['name']}.files" / fname, body)
    _write_build_spec(result, target)
    atomic_write_text(target, render_yaml(result, str(source)))
    result.path = target


def _write_build_spec(result: ImportResult, target: Path) -> None:
    recipe = result.recipe
    targets = [t.name for t in all_targets()]
    mods = [import_eugr_mod(folder, user_data_dir("mods"), targets).name
            for folder in result.build_mods]
    packages = dict(needed_packages(parse_recipe(recipe, str(target))))
    if not mods and not packages and not result.build_fields:
        return
    spec = spec_path_of(target)
    tags = [recipe["image"]] if "@" not in recipe["image"] else []
    atomic_write_text(spec, spec_file_text(recipe["targets"][0], mods, packages, tags,
                                           result.build_fields))
    recipe["build"] = {"spec": str(spec.resolve())}


def import_file(path: Path, out: Path | None = None, force: bool = False) -> ImportResult:
    """One recipe, written to ``out`` or the user's recipe folder (where inv recipes looks)."""
    result = convert_file(path)
    target = out or user_recipes_dir() / f"{result.recipe['name']}.yaml"
    if target.exists() and not force:
        raise RecipeError(f"{target} exists: pass --out FILE or --force")
    write_result(result, path, target)
    return result


@dataclass
class DirRow:
    source: str
    status: str  # imported | would import | failed
    result: ImportResult | None = None
    error: str = ""


def import_dir(folder: Path, out_dir: Path | None = None, force: bool = False,
               dry_run: bool = False) -> list[DirRow]:
    """Every ``*.yaml`` / ``*.yml`` / ``*.sh`` under ``folder``; one row each, failures included.

    Given an eugr checkout, its ``recipes/`` folder is read; ``mods/`` folders are never recipes.
    Each recipe is named by its path under the folder (``recipe_name``); the output goes to the
    user's recipe folder unless ``out_dir`` says otherwise.
    """
    if not folder.is_dir():
        raise RecipeError(f"{folder}: not a folder")
    if (folder / "recipes").is_dir():
        folder = folder / "recipes"
    out_dir = out_dir or user_recipes_dir()
    rows: list[DirRow] = []
    taken: dict[str, str] = {}
    paths = [p for p in folder.rglob("*") if p.suffix in (".yaml", ".yml", ".sh")
             and "mods" not in p.relative_to(folder).parts]
    for path in sorted(paths):
        rel = str(path.relative_to(folder))
        try:
            result = convert_file(path, recipe_name(path, folder))
            target = _unique_target(result.recipe["name"], rel, out_dir, taken)
            if target.exists() and not force and not dry_run:
                raise RecipeError(f"{target} exists: pass --force")
            if not dry_run:
                write_result(result, path, target)
            result.path = target
            rows.append(DirRow(rel, "would import" if dry_run else "imported", result))
        except EdgeVllmError as exc:
            rows.append(DirRow(rel, "failed", error=str(exc)))
    return rows


def _unique_target(name: str, rel: str, out_dir: Path, taken: dict[str, str]) -> Path:
    """Names come from paths, so two recipes share one only when their paths differ in case or
    in '-' against '/' (``a/b.yaml`` and ``a-b.yaml``): that is an error for the second."""
    if name in taken:
        raise RecipeError(f"recipe name '{name}' is also the name of {taken[name]}: rename one "
                          "of the files")
    taken[name] = rel
    return out_dir / f"{name}.yaml"
