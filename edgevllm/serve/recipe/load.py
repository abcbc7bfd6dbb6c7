"""Launch recipes: how to serve one model from one pinned image, as data (``recipes/*.yaml``).

A recipe is validated by the pydantic models of ``schema`` (unknown fields are errors) and
rendered (in ``render``'s sandbox) into a ``Rendered`` launch: the image, the serve argv
(one list element per argument, never a shell line), env, secrets passed by name, container
options, topology and health check. Every string in ``serve.args``, ``env``, ``container.ports`` /
``volumes`` and ``health`` is a Jinja2 template over ``defaults`` (overridable with ``--set
key=value``) plus ``model``, ``port``, ``tensor_parallel``, ``pipeline_parallel`` and ``nodes``;
JSON such as ``{"method":"mtp"}`` needs no escaping because only ``{{ }}``, ``{% %}`` and ``{# #}``
are template syntax. An argument that renders to the empty string is dropped, so
``"{% if x %}--flag={{ x }}{% endif %}"`` makes a flag optional.

A name listed in ``required`` must get its value from ``defaults`` or ``--set``: it is never filled
from topology (so a misspelt default cannot silently turn into ``-pp 1``). ``files`` are carried by
the recipe (paths beside it, each with its sha256) and mounted read-only under ``/edgevllm/files``.
The device's launch defaults (``targets/<target>.yaml`` ``launch:``) are merged with the recipe's
``launch:`` overrides into ``Rendered.launch``; a ``null`` in the recipe removes an entry.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from edgevllm.common.errors import MissingInputError, RecipeError
from edgevllm.common.grammar import PortMapping, check
from edgevllm.common.paths import data_dirs, project_root
from edgevllm.common.schema import describe_validation_error, parse_model, read_yaml
from edgevllm.serve.recipe.render import check_templates, placeholders, render_text
from edgevllm.serve.recipe.schema import (
    FILES_DIR,
    IMAGE_HINT,
    RESERVED,
    SCHEMA_VERSION,
    BuildRef,
    Container,
    Health,
    LaunchOverrides,
    Recipe,
    Topology,
    valid_image_ref,
)
from edgevllm.serve.recipe.values import parse_sets, template_values
from edgevllm.specs.targets import LaunchDefaults

# The names callers import from here; the schema, --set values and the sandboxed renderer live in
# schema, values and render.
__all__ = ["FILES_DIR", "IMAGE_HINT", "RESERVED", "SCHEMA_VERSION", "BuildRef", "Container",
           "Health", "LaunchOverrides", "LoadedRecipe", "Recipe", "Rendered", "Topology",
           "all_recipes", "find_recipe", "load_recipe", "parse_recipe", "parse_sets",
           "placeholders", "recipe_files", "render", "render_text", "template_values",
           "valid_image_ref"]


@dataclass
class LoadedRecipe:
    recipe: Recipe
    path: Path

    @property
    def name(self) -> str:
        return self.recipe.name


@dataclass
class Rendered:
    """A recipe with every placeholder filled in: what the launchers and Compose writer use."""

    name: str
    source: str
    image: str | None
    build: BuildRef | None
    target: str
    model: str
    command: list[str]  # serve.command + rendered args: the process inside the container
    env: dict[str, str]
    secrets: list[str]
    ports: list[str]
    volumes: list[str]
    container: Container
    topology: Topology
    restart: str
    health_port: int
    health_path: str
    health: Health
    values: dict[str, object] = field(default_factory=dict)
    launch: LaunchDefaults = field(default_factory=LaunchDefaults)
    files: list[tuple[str, str]] = field(default_factory=list)  # (host path, container path)
    gpu_memory_gb: float | None = None
    earlyoom: bool = False  # inv serve --earlyoom


# -- loading ------------------------------------------------------------------------------------
def recipe_files() -> dict[str, Path]:
    """Every recipe by file stem; the repository's own folder wins over extra folders."""
    found: dict[str, Path] = {}
    for folder in data_dirs("recipes"):
        for path in sorted(folder.glob("*.yaml")):
            found.setdefault(path.stem, path)
    return found


def find_recipe(ref: str) -> Path:
    """A recipe file, or a name; an imported eugr recipe also answers to the name eugr's users
    type (``4x-spark-cluster/Qwen-X`` → ``4x-spark-cluster-qwen-x``)."""
    path = Path(ref)
    files = recipe_files()
    as_name = ref.replace("/", "-").lower()
    if path.suffix in (".yaml", ".yml") or ("/" in ref and as_name not in files):
        if not path.is_file():
            raise MissingInputError(f"recipe file {ref} not found; check the path")
        return path
    ref = ref if ref in files else as_name
    if ref not in files:
        known = ", ".join(sorted(files)) or "none"
        raise RecipeError(f"unknown recipe '{ref}': known recipes are {known} (inv recipes)")
    return files[ref]


def load_recipe(ref: str) -> LoadedRecipe:
    path = find_recipe(ref)
    data = read_yaml(path, RecipeError)
    return LoadedRecipe(parse_recipe(data, str(_display(path))), path)


def parse_recipe(data: object, source: str) -> Recipe:
    recipe = parse_model(Recipe, data, source, RecipeError)
    check_templates(recipe, source)
    return recipe


def all_recipes() -> list[LoadedRecipe]:
    return [load_recipe(str(path)) for path in recipe_files().values()]


def _display(path: Path) -> Path:
    try:
        return path.resolve().relative_to(project_root())
    except ValueError:
        return path


# -- rendering ----------------------------------------------------------------------------------
def render(loaded: LoadedRecipe | Recipe, overrides: dict[str, object] | None = None, *,
           clustered: bool = False, extra_args: list[str] | None = None,
           allow_host_access: bool | None = False) -> Rendered:
    """Fill every placeholder. ``clustered``: run a solo recipe in its clustered form
    (``topology.cluster``); ``extra_args``: appended to the serve command (``inv serve -- ...``).
    What the container asks of the host is checked (serve/recipe/hostaccess.py): refused, or with
    ``allow_host_access`` granted and named; None only lists the recipe (nothing launches)."""
    if isinstance(loaded, LoadedRecipe):
        recipe, source, base = loaded.recipe, str(_display(loaded.path)), loaded.path.parent
    else:
        recipe, source, base = loaded, f"recipe {loaded.name}", Path.cwd()
    if clustered and recipe.topology.mode == "solo" and recipe.topology.cluster is None:
        raise RecipeError(f"{source}: runs on one node only (no topology.cluster): serve it "
                          "without --nodes, or add topology.cluster")
    values = template_values(recipe, overrides, source, clustered)
    topology = _topology(recipe, values, source, clustered)

    def one(where: str, text: str) -> str:
        return render_text(text, values, where, source)

    command = [one(f"serve.command[{i}]", c) for i, c in enumerate(recipe.serve.command)]
    args = [one(f"serve.args[{i}]", a) for i, a in enumerate(recipe.serve.args)]
    image = one("image", str(values["image"])) if values.get("image") else None
    if image is not None and not valid_image_ref(image):
        raise RecipeError(f"{source}: field 'image': '{image}' {IMAGE_HINT}")
    build = None
    if recipe.build:
        build = BuildRef(spec=one("build.spec", recipe.build.spec) if recipe.build.spec else None,
                         lock=one("build.lock", recipe.build.lock) if recipe.build.lock else None)
    health_port = one("health.port", recipe.health.port)
    if not health_port.isdigit() or not 1 <= int(health_port) <= 65535:
        raise RecipeError(f"{source}: field 'health.port': rendered to '{health_port}', "
                          "expected a port number from 1 to 65535")
    for i, text in enumerate(recipe.container.ports):
        check(PortMapping, one(f"container.ports[{i}]", text) or "1",
              f"{source}: field 'container.ports[{i}]'", RecipeError)
    rendered = Rendered(
        name=recipe.name, source=source,
        image=image, build=build, target=str(values["target"]), model=str(values["model"]),
        command=command + [a for a in args if a != ""] + list(extra_args or []),
        env={k: one(f"env.{k}", str(v)) for k, v in recipe.env.items()},
        secrets=list(recipe.secrets),
        ports=[p for i, t in enumerate(recipe.container.ports)
               if (p := one(f"container.ports[{i}]", t))],
        volumes=[v for i, t in enumerate(recipe.container.volumes)
                 if (v := one(f"container.volumes[{i}]", t))],
        container=recipe.container, topology=topology, restart=recipe.restart,
        health_port=int(health_port), health_path=one("health.path", recipe.health.path),
        health=recipe.health, values=values,
        launch=merged_launch(str(values["target"]), recipe.launch, source),
        files=recipe_files_mounts(recipe, base, source),
        gpu_memory_gb=recipe.gpu_memory_gb,
    )
    if allow_host_access is not None:
        from edgevllm.serve.recipe.hostaccess import check_host_access

        check_host_access(rendered, allow_host_access)
    return rendered


def render_named(ref: str, sets: Iterable[object] | None = None, target: str | None = None, *,
                 clustered: bool = False, extra_args: list[str] | None = None,
                 allow_host_access: bool = False) -> Rendered:
    """A recipe as the command line names it (a name or a YAML path), rendered with its ``--set``
    values (each one whole: a value may hold commas, JSON) and ``--target``. ``clustered`` asks a
    solo recipe for its clustered form; a cluster recipe is clustered already."""
    overrides = parse_sets([str(v) for v in sets or []])
    if target:
        overrides["target"] = target
    loaded = load_recipe(ref)
    clustered = clustered and loaded.recipe.topology.mode == "solo"
    return render(loaded, overrides, clustered=clustered, extra_args=extra_args,
                  allow_host_access=bool(allow_host_access))


def merged_launch(target: str, overrides: LaunchOverrides,
                  source: str = "recipe") -> LaunchDefaults:
    """The target's launch defaults with the recipe's overrides (null removes an entry); an
    override the target's launch grammar refuses (a ulimit, an env name) is one line naming
    ``source``'s field."""
    from edgevllm.common.errors import UnknownTargetError
    from edgevllm.specs.targets import load_target

    try:
        base = load_target(target).launch.model_dump()
    except UnknownTargetError:
        base = LaunchDefaults().model_dump()  # a target without a file has no launch defaults
    for key in ("ulimits", "env", "cluster_env", "jit_caches"):
        for name, value in getattr(overrides, key).items():
            if value is None:
                base[key].pop(name, None)
            else:
                base[key][name] = value
    for key in ("jit_cache_root", "device_memory_gib", "earlyoom_args"):
        if getattr(overrides, key) is not None:
            base[key] = getattr(overrides, key)
    if overrides.hf_home is not None:
        base["hf_home"] = overrides.hf_home or None
    try:
        return LaunchDefaults.model_validate(base)
    except ValidationError as exc:
        problem = describe_validation_error(exc, LaunchDefaults)
        raise RecipeError(f"{source}: launch: {problem}") from None


def recipe_files_mounts(recipe: Recipe, base: Path, source: str) -> list[tuple[str, str]]:
    """Each carried file as (absolute host path, container path), its sha256 checked."""
    mounts = []
    for index, item in enumerate(recipe.files):
        path = (base / item.path).resolve()
        where = f"{source}: field 'files[{index}]'"
        try:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError as exc:
            raise RecipeError(f"{where}: cannot read {path} ({exc.strerror}); put the file "
                              "beside the recipe") from None
        if digest != item.sha256:
            raise RecipeError(f"{where}: {item.path} has sha256 {digest[:12]}…, the recipe says "
                              f"{item.sha256[:12]}…: restore the file or update sha256")
        mounts.append((str(path), item.mount or f"{FILES_DIR}/{Path(item.path).name}"))
    return mounts


def _topology(recipe: Recipe, values: dict[str, object], source: str,
              clustered: bool = False) -> Topology:
    data = recipe.topology.model_dump()
    cluster = data.pop("cluster")
    if clustered and cluster is not None:
        data["mode"] = cluster["mode"]
    elif cluster is not None:
        data["cluster"] = cluster
    for key in ("tensor_parallel", "pipeline_parallel", "nodes"):
        data[key] = values[key]
    try:
        return Topology.model_validate(data)
    except ValidationError as exc:
        problem = describe_validation_error(exc, Topology)
        raise RecipeError(f"{source}: topology: {problem}") from None
