"""Convert a spark-vllm-docker (eugr) recipe into an edgevllm launch recipe, reporting what is lost.

An eugr recipe has ``recipe_version``, ``name``, ``description``, ``model``, ``container`` (an image
tag its build script produced), ``command`` (one shell line with ``{placeholder}`` fields filled by
``str.format``, so literal braces are doubled), ``defaults``, ``env``, ``mods`` (scripts run in the
container at every start), ``build_args`` (flags for its build script), ``solo_only`` and
``cluster_only``; ``build_args`` pins the vLLM to build (``buildargs``). The import runs
the recipe the way eugr's own runner does:

* ``cluster_only`` → a torch-distributed (no-Ray) cluster, eugr's default backend, of
  tensor × pipeline × data parallel nodes; a recipe that is neither solo- nor cluster-only and
  needs more than one GPU → one recipe, solo by default with tensor parallel 1 (eugr's ``--solo``)
  and that cluster as ``topology.cluster`` (``inv serve --nodes``); solo recipes render tp 1.
* ``recipe_version`` other than 1 is read as v1 with a note (eugr only warns); a trailing ``\\``
  is removed; a ``vllm-thor`` container makes a Thor recipe.
* Everything dropped is a note; an argument naming a file or flag that a dropped mod provides is a
  **warning naming the mod** — unless the mod folder sits beside the recipes (eugr's layout) and
  holds that file: then the file is carried by the recipe (``files:``, sha256, read-only mount).
* A placeholder with no default is listed under ``required``: ``inv serve`` refuses to start
  without it (reserved names such as ``pipeline_parallel`` included).

``edgevllm.serve.recipe.importfolder`` reads the files and folders and writes the results.

Its length: every field of an eugr recipe is converted here, each with what is lost said beside
it, and the fields are read together (the command's placeholders name defaults, build args and
files); the file reading already stands apart (``importfolder``).
"""

from __future__ import annotations

import hashlib
import re
import string
from dataclasses import dataclass, field
from pathlib import Path

from edgevllm.common.dataload import shell_words
from edgevllm.common.errors import RecipeError
from edgevllm.common.foreign import inside
from edgevllm.mods.eugr import EugrMod, find_mod
from edgevllm.serve.recipe.buildargs import build_fields
from edgevllm.serve.recipe.load import FILES_DIR, parse_recipe, valid_image_ref

KNOWN = {"recipe_version", "name", "description", "model", "container", "command", "defaults",
         "env", "mods", "build_args", "solo_only", "cluster_only"}
MAX_COMMAND = 64 << 10  # an eugr command line: real ones are under 4 KiB
_SENTINEL = "\x00{}\x00"
_JINJA_OPEN = re.compile(r"\{(?=[{%#]|$)")
# vLLM CLI flags that exist only with an eugr mod's patch → the mod that adds them.
MOD_FLAGS = {"--gpu-memory-utilization-gb": "gpu-mem-util-gb"}
# Argument values that name a file a mod drops into the container (chat templates, plugins...).
_FILE_VALUE = re.compile(r"^[\w./-]+\.(jinja2?|py|json|txt|patch|ya?ml)\Z")
_FIELD_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
WORKSPACE = "/workspace"  # WORKSPACE_DIR of an eugr mod run at build time (ScriptStep default)
_MOD_PATH = re.compile(r"(?:^|/)mods/([\w.-]+)/")


@dataclass
class ImportResult:
    recipe: dict
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # arguments that will not work as written
    files: dict[str, bytes] = field(default_factory=dict)  # carried files by name
    path: Path | None = None
    build_mods: list[Path] = field(default_factory=list)  # eugr mod folders run at build time
    build_fields: dict = field(default_factory=dict)  # build spec fields from build_args (picks)


@dataclass
class _Context:
    source: Path
    notes: list[str]
    warnings: list[str]
    mods: list[str]
    files: dict[str, bytes]
    found: dict[str, EugrMod | None] = field(default_factory=dict)  # mod folders read


def slug(text: str) -> str:
    out = re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-._")
    return out or "imported"


def recipe_name(path: Path, root: Path | None = None) -> str:
    """The name eugr's users type: the file name without ``.yaml``, lower-cased (it names the
    container), with its subfolder of ``recipes/`` in front (``4x-spark-cluster-minimax-m2.5``)."""
    parts = list(path.relative_to(root).parts[:-1]) if root else []
    if root is None and path.parent.parent.name == "recipes":
        parts = [path.parent.name]  # recipes/<sub>/x.yaml imported on its own
    return slug("-".join([*parts, path.stem]))


def convert(data: object, source: str, name: str | None = None) -> ImportResult:
    """The converted recipe (a dict that validates), the notes and the warnings.

    ``name`` defaults to the file name (what eugr's ``run-recipe.sh NAME`` takes)."""
    if not isinstance(data, dict):
        raise RecipeError(f"{source}: not a spark-vllm-docker recipe (expected a mapping)")
    for key in ("name", "container", "command"):
        if not data.get(key):
            raise RecipeError(f"{source}: field '{key}': required in a spark-vllm-docker recipe")
    _check_shapes(data, source)
    ctx = _Context(Path(source), [], [], [str(m) for m in data.get("mods") or []], {})
    version = str(data.get("recipe_version", "1"))
    if version != "1":
        ctx.notes.append(f"recipe_version {version}: read as version 1 (eugr's runner only warns "
                         "on it; the fields are v1)")
    name = name or recipe_name(Path(source))
    defaults = {str(k): v for k, v in (data.get("defaults") or {}).items()}
    command, fields = command_tokens(_strip_backslash(str(data["command"]), ctx), source,
                                     ctx.notes)
    serve_command, args, model = split_serve(command, data.get("model"), ctx.notes)
    args, gpu_memory_gb = _mod_arguments(args, name, defaults, ctx)
    given = set(defaults) | {"model"}
    topology = _topology(data, defaults, ctx.notes)
    if topology["mode"] == "solo":
        given.add("tensor_parallel")  # eugr's solo mode fills it with 1
    target, container = _target(str(data["container"]), ctx.notes)
    if topology["mode"] != "solo":  # a cluster talks NCCL over the nodes' own network
        container["network"] = "host"
    required = _required(fields, given, ctx.notes)
    recipe = {
        "schema_version": 1,
        "name": name,
        "description": _description(data),
        "targets": [target],
        "status": {target: "untested"},
        "evidence": [f"imported from spark-vllm-docker recipe {Path(source).name}"],
        "image": _image(str(data["container"]), ctx.notes),
        "model": model,
        "defaults": {"port": 8000, "hf_cache": "~/.cache/huggingface", **defaults},
        "serve": {"command": serve_command, "args": args},
        "env": {str(k): escape_template(str(v)) for k, v in (data.get("env") or {}).items()},
        "container": container,
        "topology": topology,
    }
    recipe.update(_optional(required, gpu_memory_gb, ctx.files, name))
    build_mods = _unconvertible(data, ctx, name, converted=gpu_memory_gb is not None)
    spec_fields = build_fields(data.get("build_args"), source, ctx.notes)
    parse_recipe(recipe, f"{source} (converted)")
    return ImportResult(recipe, ctx.notes, ctx.warnings, ctx.files, build_mods=build_mods,
                        build_fields=spec_fields)


_SHAPES = {"defaults": (dict, "a mapping"), "env": (dict, "a mapping"), "mods": (list, "a list")}


_MOD_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*(/[A-Za-z0-9_][A-Za-z0-9._-]*)*")


def _check_shapes(data: dict, source: str) -> None:
    """The fields read as a mapping or a list are one (a hostile recipe may say ``env: 3``), and
    each mod is a relative folder name (it is looked up beside the recipe: never ``/etc``)."""
    for key, (kind, spelled) in _SHAPES.items():
        value = data.get(key)
        # Empty of any kind is empty: eugr's runner tests ``if env:`` (a recipe writes env: []).
        if value and not isinstance(value, kind):
            raise RecipeError(f"{source}: field '{key}': expected {spelled}, got "
                              f"{type(value).__name__}")
    for mod in data.get("mods") or []:
        if not isinstance(mod, str) or not _MOD_NAME.fullmatch(mod) or len(mod) > 200:
            raise RecipeError(f"{source}: field 'mods': {str(mod)[:60]!r} is not a mod folder "
                              "name such as mods/fix-gpu-mem")


def _description(data: dict) -> str:
    """eugr's display name leads the description: the recipe's name is its file name."""
    title, text = str(data["name"]).strip(), str(data.get("description") or "").strip()
    return f"{title}: {text}" if text and text != title else title


def _optional(required: list[str], gpu_memory_gb: float | None, files: dict[str, bytes],
              name: str) -> dict:
    out: dict = {}
    if required:
        out["required"] = required
    if gpu_memory_gb is not None:
        out["gpu_memory_gb"] = gpu_memory_gb
    if files:
        out["files"] = [{"path": f"{name}.files/{fname}",
                         "sha256": hashlib.sha256(body).hexdigest()}
                        for fname, body in sorted(files.items())]
    return out


def _strip_backslash(command: str, ctx: _Context) -> str:
    stripped = command.rstrip()
    if stripped.endswith("\\"):
        ctx.notes.append("command ends in '\\': removed (eugr's runner strips it too)")
        return stripped.rstrip("\\").rstrip()
    return command


def command_tokens(command: str, source: str, notes: list[str]) -> tuple[list[str], list[str]]:
    """Split the shell line into argv, turning ``{x}`` fields into ``{{ x }}``."""
    pieces, fields = [], []
    try:
        parsed = list(string.Formatter().parse(command))
    except ValueError as exc:
        raise RecipeError(f"{source}: field 'command': {exc}") from None
    for literal, name, spec, conversion in parsed:
        pieces.append(literal)  # str.format's {{ and }} are single braces here already
        if name is None:
            continue
        if not _FIELD_NAME.match(name):
            raise RecipeError(f"{source}: field 'command': placeholder '{{{name}}}' is not a plain "
                              "name (letters, digits, '_'); rename it")
        if spec or conversion:
            notes.append(f"placeholder '{{{name}:{spec}}}' lost its format spec/conversion")
        fields.append(name)
        pieces.append(_SENTINEL.format(len(fields) - 1))
    flat = re.sub(r"\\\r?\n", " ", "".join(pieces))
    tokens = shell_words(flat, f"{source}: field 'command'", RecipeError, limit=MAX_COMMAND)
    return [_jinja_token(t, fields) for t in tokens], fields


def _jinja_token(token: str, fields: list[str]) -> str:
    parts = re.split(r"\x00(\d+)\x00", token)
    out = []
    for index, part in enumerate(parts):
        if index % 2:
            out.append("{{ " + fields[int(part)] + " }}")
        else:
            out.append(escape_template(part))
    return "".join(out)


def escape_template(text: str) -> str:
    """eugr's literal text as a template that renders to itself: every ``{`` that would open a
    Jinja tag (``{{``, ``{%``, ``{#``, or a trailing ``{`` that a placeholder follows) becomes the
    expression ``{{ '{' }}``. Not ``{% raw %}``: the text itself could close it."""
    return _JINJA_OPEN.sub("{{ '{' }}", text)


def split_serve(tokens: list[str], model: object, notes: list[str]) -> tuple[list, list, str]:
    """``vllm serve MODEL args`` → (["vllm", "serve"], ["{{ model }}", args...], MODEL).

    The served model wins over a differing ``model:`` (eugr uses ``model:`` for downloads only).
    """
    if len(tokens) >= 2 and tokens[0].endswith("vllm") and tokens[1] == "serve":
        rest = tokens[2:]
        if rest and not rest[0].startswith("-") and "{{" not in rest[0]:
            if model and str(model) != rest[0]:
                notes.append(f"model: '{model}' differs from the model the command serves "
                             f"'{rest[0]}': imported model is '{rest[0]}' (what eugr serves)")
            model = rest[0]
            rest[0] = "{{ model }}"
        args = _drop_executor(rest, notes)
        return tokens[:2], args, str(model or "")
    notes.append("command does not start with 'vllm serve': kept whole as serve.command; "
                 "cluster flags are not added to it")
    if not model:
        raise RecipeError("field 'model': give the model, the command does not name it")
    return tokens, [], str(model)


def _drop_executor(args: list[str], notes: list[str]) -> list[str]:
    """The cluster launcher adds ``--distributed-executor-backend`` itself (ray mode only)."""
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
            notes.append(f"--distributed-executor-backend {arg}: dropped (solo needs none; "
                         "the cluster launcher sets the backend from topology.mode)")
            continue
        if arg == "--distributed-executor-backend":
            skip = True
            continue
        if arg.startswith("--distributed-executor-backend="):
            notes.append(f"{arg}: dropped (the cluster launcher sets the backend from "
                         "topology.mode)")
            continue
        out.append(arg)
    return out


def _int_default(defaults: dict, key: str, notes: list[str]) -> int:
    value = defaults.get(key, 1)
    try:
        return max(int(value), 1)
    except (TypeError, ValueError):
        notes.append(f"defaults.{key} '{value}' is not a number: counted as 1")
        return 1


def _topology(data: dict, defaults: dict, notes: list[str]) -> dict:
    """eugr's modes: cluster-only → torch cluster of tp×pp×dp nodes; solo renders tp 1."""
    tp = _int_default(defaults, "tensor_parallel", notes)
    pp = _int_default(defaults, "pipeline_parallel", notes)
    dp = _int_default(defaults, "data_parallel", notes)
    defaults.pop("tensor_parallel", None)
    nodes = tp * pp * dp
    if data.get("cluster_only"):
        if nodes < 2:
            notes.append("cluster_only with tensor × pipeline × data parallel = 1: imported as a "
                         "2-node cluster; set topology.nodes")
        notes.append(f"cluster_only: a {max(nodes, 2)}-node torch-distributed cluster "
                     "(eugr's default, no Ray); topology.mode: ray for Ray")
        return {"mode": "torch", "nodes": max(nodes, 2), "tensor_parallel": tp}
    if tp > 1:
        notes.append(f"solo renders tensor_parallel 1 (defaults say {tp}), as eugr's --solo does")
    if data.get("solo_only") or nodes < 2:
        return {"mode": "solo", "tensor_parallel": 1}
    notes.append(f"runs solo or clustered: inv serve --nodes A,B,... runs it as a {nodes}-node "
                 "torch cluster (topology.cluster)")
    return {"mode": "solo", "tensor_parallel": 1,
            "cluster": {"mode": "torch", "nodes": nodes, "tensor_parallel": tp,
                        "pipeline_parallel": pp}}


def _required(fields: list[str], given: set[str], notes: list[str]) -> list[str]:
    """Placeholders eugr would refuse to fill (no default): serve needs them from --set."""
    required = sorted(set(fields) - given)
    for name in required:
        notes.append(f"placeholder '{name}' has no default: serve needs --set {name}=VALUE")
    return required


def _target(container: str, notes: list[str]) -> tuple[str, dict]:
    """A ``vllm-thor`` container is a Thor recipe (the Jetson runtime); anything else is Spark."""
    if "thor" in container.lower():
        notes.append(f"container '{container}' is a Thor image: target thor (runtime nvidia)")
        return "thor", {"runtime": "nvidia", "ipc": "host"}
    return "spark", {"gpus": "all", "ipc": "host"}


def _image(container: str, notes: list[str]) -> str:
    if not valid_image_ref(container):
        raise RecipeError(f"field 'container': '{container}' is not an image reference")
    if "@sha256:" not in container:
        notes.append(f"container '{container}' is a mutable tag from spark-vllm-docker's "
                     "build: pin image: to repo@sha256:<digest> or add build: {spec: FILE}")
    return container


# -- arguments that depend on a dropped mod -----------------------------------------------------
def _mod_arguments(args: list[str], name: str, defaults: dict,
                   ctx: _Context) -> tuple[list[str], float | None]:
    """Convert or warn about arguments a dropped mod provides; return (args, gpu_memory_gb)."""
    out: list[str] = []
    gpu_memory_gb = None
    index = 0
    while index < len(args):
        flag, value, width = _flag_value(args, index)
        if flag in MOD_FLAGS:
            number, shown = _template_number(value, defaults)
            if number is not None:
                gpu_memory_gb = number
                ctx.notes.append(f"{flag} {shown} (mod {MOD_FLAGS[flag]}): converted to "
                                 f"gpu_memory_gb {number:g} (inv serve --gpu-memory-gb N "
                                 "changes it)")
            else:
                ctx.warnings.append(f"{flag} {value} needs eugr mod '{MOD_FLAGS[flag]}' (a vLLM "
                                    "patch), which was dropped: use gpu_memory_gb instead")
                out += args[index:index + width]
            index += width
            continue
        arg = args[index]
        out.append(_file_argument(arg, ctx, name) if _names_file(arg) else arg)
        index += 1
    return out, gpu_memory_gb


def _flag_value(args: list[str], index: int) -> tuple[str, str, int]:
    arg = args[index]
    if arg.startswith("--") and "=" in arg:
        flag, _, value = arg.partition("=")
        return flag, value, 1
    value = args[index + 1] if index + 1 < len(args) else ""
    return arg, value, 2


def _number(text: object) -> float | None:
    try:
        return float(str(text))
    except ValueError:
        return None


def _template_number(value: str, defaults: dict) -> tuple[float | None, str]:
    """A literal number, or a ``{{ placeholder }}`` whose default is one: (number, as shown)."""
    field = re.fullmatch(r"\{\{ (\w+) \}\}", value)
    if field is None:
        return _number(value), value
    key = field.group(1)
    if key not in defaults:
        return None, value
    return _number(defaults[key]), f"{{{key}}} (default {defaults[key]})"


def _names_file(arg: str) -> bool:
    value = arg.partition("=")[2] if arg.startswith("--") else arg
    if "{{" in value or "://" in value:
        return False
    return bool(_FILE_VALUE.match(value)) and (not value.startswith("/")
                                                or bool(_MOD_PATH.search(value)))


def _file_argument(arg: str, ctx: _Context, name: str) -> str:
    """Carry the file if its mod folder is at hand; otherwise keep the argument and warn."""
    prefix, eq, value = arg.partition("=") if arg.startswith("--") else ("", "", arg)
    match = _MOD_PATH.search(value)
    candidates = [m for m in ctx.mods if match and Path(m).name == match.group(1)] or ctx.mods
    fname = Path(value).name
    for mod_name in candidates:
        mod = _eugr_mod(ctx, mod_name)
        found = mod and (mod.copies.get(fname) or _mod_file(mod.folder, fname))
        if found:
            ctx.files[fname] = found.read_bytes()
            renamed = f" (its {found.name}, copied as {fname})" if found.name != fname else ""
            ctx.notes.append(f"{value} comes from mod '{mod_name}'{renamed}: carried by the "
                             f"recipe ({name}.files/{fname}, mounted read-only at "
                             f"{FILES_DIR}/{fname})")
            return f"{prefix}{eq}{FILES_DIR}/{fname}"
        if mod and fname in mod.downloads:
            ctx.notes.append(
                f"{value}: mod '{mod_name}' downloads it from {mod.downloads[fname]}; the build "
                f"fetches it once, pinned by sha256, into {WORKSPACE}/{fname} of the image "
                f"(inv build --recipe {name}), and the argument points there")
            return f"{prefix}{eq}{WORKSPACE}/{fname}"
    ctx.warnings.append(f"argument '{arg}' names a file provided by {_who(match, candidates)}, "
                        "which was dropped: add the file under files: or the argument will fail")
    return arg


def _who(match: re.Match | None, candidates: list[str]) -> str:
    if match and not candidates:
        return f"mod '{match.group(1)}'"
    if len(candidates) == 1:
        return f"mod '{candidates[0]}'"
    if candidates:
        return "one of the mods " + ", ".join(f"'{m}'" for m in candidates)
    return "nothing in the recipe (no mod, no volume)"


def _eugr_mod(ctx: _Context, mod: str) -> EugrMod | None:
    if mod not in ctx.found:
        ctx.found[mod] = find_mod(ctx.source, mod)
    return ctx.found[mod]


def _mod_file(folder: Path, fname: str) -> Path | None:
    """A file of that name in the mod folder: inside it, never through a link out."""
    hits = sorted(p for p in folder.rglob(fname) if p.is_file()
                  and inside(folder, p.relative_to(folder).as_posix()) is not None)
    return hits[0] if hits else None


def _unconvertible(data: dict, ctx: _Context, name: str, converted: bool) -> list[Path]:
    """Notes for what cannot come along; the eugr mods that run at build time instead."""
    build_mods: list[Path] = []
    for mod_name in ctx.mods:
        mod = _eugr_mod(ctx, mod_name)
        if mod and mod.start_only:
            ctx.notes.append(f"mod '{mod_name}' starts a background loop at every start, which "
                             f"an image cannot hold: run it on the host before inv serve "
                             f"(sudo bash {mod.folder / 'run.sh'})")
        elif converted and Path(mod_name).name in MOD_FLAGS.values():
            ctx.notes.append(f"mod '{mod_name}' not needed: its flag became gpu_memory_gb")
        elif mod:
            build_mods.append(mod.folder)
            ctx.notes.append(f"mod '{mod_name}' runs at build time: inv build --recipe {name} "
                             "bakes it into the image (its run.sh, with WORKSPACE_DIR and the "
                             "image's Python)")
        else:
            ctx.notes.append(f"mod '{mod_name}' dropped (its folder is not beside the recipes): "
                             f"inv build --recipe {name} --add-mod PATH/TO/{Path(mod_name).name} "
                             "runs it at build time")
    for key in sorted(set(data) - KNOWN):
        ctx.notes.append(f"field '{key}' is not a spark-vllm-docker field edgevllm knows; left out")
    return build_mods
