"""Convert a spark-vllm-docker v1 recipe into an edgevllm launch recipe, reporting what is lost.

A v1 recipe has ``recipe_version``, ``name``, ``description``, ``model``, ``container`` (an image
tag its build script produced), ``command`` (one shell line with ``{placeholder}`` fields filled by
``str.format``, so literal braces are doubled), ``defaults``, ``env``, ``mods`` (scripts run in the
container at every start), ``build_args`` (flags for its build script), ``solo_only`` and
``cluster_only``. The command becomes an argument list (shell quoting resolved once, here), the
placeholders become Jinja2 ``{{ name }}``; mods, build flags and unknown fields are reported.
"""

from __future__ import annotations

import re
import shlex
import string
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from edgevllm.kernel.errors import RecipeError
from edgevllm.kernel.fsutil import atomic_write_text
from edgevllm.kernel.paths import project_root
from edgevllm.serve.recipes import parse_recipe, valid_image_ref
from edgevllm.kernel.schema import read_yaml

KNOWN = {"recipe_version", "name", "description", "model", "container", "command", "defaults",
         "env", "mods", "build_args", "solo_only", "cluster_only"}
_SENTINEL = "\x00{}\x00"
_JINJA_OPEN = re.compile(r"\{[{%#]")


@dataclass
class ImportResult:
    recipe: dict
    notes: list[str] = field(default_factory=list)
    path: Path | None = None


def slug(text: str) -> str:
    out = re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-._")
    return out or "imported"


def convert(data: object, source: str) -> ImportResult:
    """The converted recipe (a dict that validates) and the list of what was not converted."""
    if not isinstance(data, dict):
        raise RecipeError(f"{source}: not a spark-vllm-docker recipe (expected a mapping)")
    version = str(data.get("recipe_version", "1"))
    if version != "1":
        raise RecipeError(f"{source}: field 'recipe_version': {version} is not supported; "
                          "this importer reads version 1")
    for key in ("name", "container", "command"):
        if not data.get(key):
            raise RecipeError(f"{source}: field '{key}': required in a v1 recipe")
    notes: list[str] = []
    defaults = {str(k): v for k, v in (data.get("defaults") or {}).items()}
    command, fields = command_tokens(str(data["command"]), source, notes)
    serve_command, args, model = split_serve(command, data.get("model"), notes)
    topology = _topology(data, defaults, args, notes)
    for name in sorted(set(fields) - set(defaults) - {"model", "tensor_parallel", "nodes"}):
        notes.append(f"placeholder '{name}' has no default: pass --set {name}=VALUE at serve time")
    recipe = {
        "schema_version": 1,
        "name": slug(str(data["name"])),
        "description": str(data.get("description") or data["name"]),
        "targets": ["spark"],
        "status": {"spark": "untested"},
        "evidence": [f"imported from spark-vllm-docker recipe {Path(source).name}"],
        "image": _image(str(data["container"]), notes),
        "model": model,
        "defaults": {**{"port": 8000, "hf_cache": "~/.cache/huggingface"}, **defaults},
        "serve": {"command": serve_command, "args": args},
        "env": {str(k): str(v) for k, v in (data.get("env") or {}).items()},
        "container": {"gpus": "all", "ipc": "host", "network": "host"},
        "topology": topology,
    }
    _unconvertible(data, notes)
    parse_recipe(recipe, f"{source} (converted)")
    return ImportResult(recipe, notes)


def command_tokens(command: str, source: str, notes: list[str]) -> tuple[list[str], list[str]]:
    """Split the v1 shell line into argv, turning ``{x}`` fields into ``{{ x }}``."""
    pieces, fields = [], []
    try:
        parsed = list(string.Formatter().parse(command))
    except ValueError as exc:
        raise RecipeError(f"{source}: field 'command': {exc}") from None
    for literal, name, spec, conversion in parsed:
        pieces.append(literal)  # str.format's {{ and }} are single braces here already
        if name is None:
            continue
        if spec or conversion:
            notes.append(f"placeholder '{{{name}:{spec}}}' lost its format spec/conversion")
        fields.append(name)
        pieces.append(_SENTINEL.format(len(fields) - 1))
    flat = re.sub(r"\\\r?\n", " ", "".join(pieces))
    try:
        tokens = shlex.split(flat)
    except ValueError as exc:
        raise RecipeError(f"{source}: field 'command': cannot split it ({exc}); fix the quoting") \
            from None
    return [_jinja_token(t, fields) for t in tokens], fields


def _jinja_token(token: str, fields: list[str]) -> str:
    parts = re.split(r"\x00(\d+)\x00", token)
    out = []
    for index, part in enumerate(parts):
        if index % 2:
            out.append("{{ " + fields[int(part)] + " }}")
        elif _JINJA_OPEN.search(part):
            out.append("{% raw %}" + part + "{% endraw %}")  # literal text that looks like Jinja
        else:
            out.append(part)
    return "".join(out)


def split_serve(tokens: list[str], model: object, notes: list[str]) -> tuple[list, list, str]:
    """``vllm serve MODEL args`` → (["vllm", "serve"], ["{{ model }}", args...], model)."""
    if len(tokens) >= 2 and tokens[0].endswith("vllm") and tokens[1] == "serve":
        rest = tokens[2:]
        if rest and not rest[0].startswith("-"):
            model = model or rest[0]
            if rest[0] == model:
                rest[0] = "{{ model }}"
        args = _drop_executor(rest)
        return tokens[:2], args, str(model or "")
    notes.append("command does not start with 'vllm serve': kept whole as serve.command; "
                 "cluster flags are not added to it")
    if not model:
        raise RecipeError("field 'model': give the model, the command does not name it")
    return tokens, [], str(model)


def _drop_executor(args: list[str]) -> list[str]:
    """The cluster launcher adds ``--distributed-executor-backend`` itself (ray mode only)."""
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg == "--distributed-executor-backend":
            skip = True
            continue
        if arg.startswith("--distributed-executor-backend="):
            continue
        out.append(arg)
    return out


def _topology(data: dict, defaults: dict, args: list[str], notes: list[str]) -> dict:
    tp = defaults.pop("tensor_parallel", 1)
    try:
        tensor_parallel = int(tp)
    except (TypeError, ValueError):
        notes.append(f"defaults.tensor_parallel '{tp}' is not a number: set topology yourself")
        tensor_parallel = 1
    if data.get("cluster_only"):
        notes.append("cluster_only: imported as a 2-node Ray cluster; set topology.nodes to your "
                     "node count and serve with --nodes")
        return {"mode": "ray", "nodes": 2, "tensor_parallel": tensor_parallel}
    if not data.get("solo_only") and tensor_parallel > 1:
        notes.append(f"tensor_parallel {tensor_parallel} on one Spark (one GPU): imported as solo; "
                     "for a cluster set topology.mode: ray and nodes")
    return {"mode": "solo", "tensor_parallel": tensor_parallel}


def _image(container: str, notes: list[str]) -> str:
    if not valid_image_ref(container):
        raise RecipeError(f"field 'container': '{container}' is not an image reference")
    if "@sha256:" not in container:
        notes.append(f"container '{container}' is a mutable tag from spark-vllm-docker's "
                     "build: pin image: to repo@sha256:<digest> or add build: {spec: FILE}")
    return container


def _unconvertible(data: dict, notes: list[str]) -> None:
    for mod in data.get("mods") or []:
        notes.append(f"mod '{mod}' (a script run in the container at every start): edgevllm "
                     "applies mods at build time; add it to the image's build spec")
    if data.get("build_args"):
        notes.append(f"build_args {list(data['build_args'])} (flags for build-and-copy.sh): "
                     "express them in a build spec")
    for key in sorted(set(data) - KNOWN):
        notes.append(f"field '{key}' is not a v1 field edgevllm knows; left out")


def render_yaml(result: ImportResult, source: str) -> str:
    lines = [f"# Imported from spark-vllm-docker recipe {Path(source).name} (inv recipe-import).",
             "# Not yet tried with an edgevllm image: review, then mark status known-good."]
    lines += [f"# not converted: {note}" for note in result.notes]
    body = yaml.safe_dump(result.recipe, sort_keys=False, default_flow_style=False, width=1000,
                          allow_unicode=True)
    return "\n".join(lines) + "\n" + body


def import_file(path: Path, out: Path | None = None, force: bool = False) -> ImportResult:
    data = read_yaml(path, RecipeError)
    result = convert(data, str(path))
    target = out or project_root() / "recipes" / f"{result.recipe['name']}.yaml"
    if target.exists() and not force:
        raise RecipeError(f"{target} exists: pass --out FILE or --force")
    atomic_write_text(target, render_yaml(result, str(path)))
    result.path = target
    return result
