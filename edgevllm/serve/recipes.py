"""Launch recipes: how to serve one model from one pinned image, as data (``recipes/*.yaml``).

A recipe is validated by the pydantic models below (unknown fields are errors) and rendered into a
``Rendered`` launch: the image, the serve argv (one list element per argument, never a shell
line), env, secrets passed by name, container options, topology and health check. Every string in
``serve.args``, ``env``, ``container.ports`` / ``volumes`` and ``health`` is a Jinja2 template over
``defaults`` (overridable with ``--set key=value``) plus ``model``, ``port``, ``tensor_parallel``,
``pipeline_parallel`` and ``nodes``; JSON such as ``{"method":"mtp"}`` needs no escaping because
only ``{{ }}``, ``{% %}`` and ``{# #}`` are template syntax. An argument that renders to the empty
string is dropped, so ``"{% if x %}--flag={{ x }}{% endif %}"`` makes a flag optional.

A name listed in ``required`` must get its value from ``defaults`` or ``--set``: it is never filled
from topology (so a misspelt default cannot silently turn into ``-pp 1``). ``files`` are carried by
the recipe (paths beside it, each with its sha256) and mounted read-only under ``/edgevllm/files``.
The device's launch defaults (``targets/<target>.yaml`` ``launch:``) are merged with the recipe's
``launch:`` overrides into ``Rendered.launch``; a ``null`` in the recipe removes an entry.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import jinja2
import jinja2.meta
import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from edgevllm.common.errors import RecipeError
from edgevllm.common.paths import data_dirs, project_root
from edgevllm.common.schema import Strict, describe_validation_error, parse_model, read_yaml
from edgevllm.specs.targets import LaunchDefaults

SCHEMA_VERSION = 1
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_DIGEST_REF = re.compile(r"^[^@\s]+@sha256:[0-9a-f]{64}$")
_TAG_REF = re.compile(r"^[a-z0-9][a-z0-9._/:-]*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DURATION = re.compile(r"^\d+(ms|s|m|h)$")
# Names every template sees besides ``defaults``; ``--set`` may override them too.
RESERVED = ("model", "image", "target", "tensor_parallel", "pipeline_parallel", "nodes")
FILES_DIR = "/edgevllm/files"  # where a recipe's files appear in the container (read-only)
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
Status = Literal["known-good", "untested"]


IMAGE_HINT = "must be an image tag (repo:tag) or a digest (repo@sha256:<64 hex>)"


def valid_image_ref(ref: str) -> bool:
    return bool(_DIGEST_REF.match(ref) or _TAG_REF.match(ref))




class BuildRef(Strict):
    """Build the image on demand from an edgevllm build spec or lock (paths from the repo root)."""

    spec: str | None = None
    lock: str | None = None

    @model_validator(mode="after")
    def _one(self) -> "BuildRef":
        if (self.spec is None) == (self.lock is None):
            raise ValueError("give exactly one of 'spec' (a build spec file) or 'lock' "
                             "(a lock file)")
        return self


class Serve(Strict):
    command: list[str] = Field(default_factory=lambda: ["vllm", "serve"], min_length=1)
    args: list[str] = Field(default_factory=list)


class Container(Strict):
    ports: list[str] = Field(default_factory=lambda: ["{{ port }}:{{ port }}"])
    volumes: list[str] = Field(
        default_factory=lambda: ["{{ hf_cache }}:/root/.cache/huggingface"])
    shm_size: str | None = "16g"
    ipc: str | None = "host"
    runtime: str | None = None  # Thor: nvidia (the Jetson container runtime)
    gpus: str | None = None  # Spark / DGX: all
    network: str | None = None  # "host" for clusters that talk NCCL over the node's NICs
    # "" clears the image's ENTRYPOINT so the container runs exactly serve.command + args,
    # whatever the image (vllm/vllm-openai's entrypoint is already `vllm serve`).
    entrypoint: str | None = ""
    extra: list[str] = Field(default_factory=list)  # further `docker run` flags, verbatim


class ClusterTopology(Strict):
    """How a solo recipe runs when ``inv serve --nodes`` is given (a dual-capable recipe)."""

    mode: Literal["ray", "torch"] = "torch"
    nodes: int = Field(default=2, ge=2)
    tensor_parallel: int = Field(default=1, ge=1)
    pipeline_parallel: int = Field(default=1, ge=1)


class Topology(Strict):
    """solo: one container. ray / torch: ``nodes`` containers, one per node (see docs/serve.md)."""

    mode: Literal["solo", "ray", "torch"] = "solo"
    nodes: int = Field(default=1, ge=1)
    tensor_parallel: int = Field(default=1, ge=1)
    pipeline_parallel: int = Field(default=1, ge=1)
    ray_port: int = Field(default=6379, ge=1, le=65535)
    master_port: int = Field(default=29501, ge=1, le=65535)
    ray_args: list[str] = Field(default_factory=list)  # extra `ray start` flags on every node
    ray_head_args: list[str] = Field(default_factory=list)  # and on the head only
    cluster: ClusterTopology | None = None  # solo recipes only: the clustered form (--nodes)

    @model_validator(mode="after")
    def _consistent(self) -> "Topology":
        if self.mode == "solo" and self.nodes != 1:
            raise ValueError("mode 'solo' runs on one node: set nodes to 1 or mode to ray/torch")
        if self.mode != "solo" and self.cluster is not None:
            raise ValueError("'cluster' describes the clustered form of a solo recipe; this "
                             f"recipe is already {self.mode}: remove 'cluster'")
        return self


class RecipeFile(Strict):
    """A file the recipe carries (chat template, parser plugin, small patch), mounted read-only."""

    path: str  # relative to the recipe file
    sha256: str
    mount: str | None = None  # default /edgevllm/files/<file name>

    @field_validator("sha256")
    @classmethod
    def _digest(cls, value: str) -> str:
        if not _SHA256.match(value):
            raise ValueError("must be 64 lower-case hex digits (sha256sum FILE)")
        return value

    @field_validator("path")
    @classmethod
    def _relative(cls, value: str) -> str:
        if value.startswith("/") or ".." in Path(value).parts:
            raise ValueError("must be a path relative to the recipe file, inside its folder")
        return value

    @field_validator("mount")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError("must be an absolute path in the container")
        return value


class LaunchOverrides(Strict):
    """The recipe's changes to the target's launch defaults: an entry set to null is removed."""

    ulimits: dict[str, str | None] = Field(default_factory=dict)
    env: dict[str, str | None] = Field(default_factory=dict)
    cluster_env: dict[str, str | None] = Field(default_factory=dict)
    jit_caches: dict[str, str | None] = Field(default_factory=dict)
    jit_cache_root: str | None = None
    hf_home: str | None = None  # "" removes HF_HOME
    device_memory_gib: float | None = Field(default=None, gt=0)
    earlyoom_args: list[str] | None = None


class Health(Strict):
    path: str = "/health"
    port: str = "{{ port }}"
    interval: str = "30s"
    timeout: str = "10s"
    retries: int = Field(default=3, ge=1)
    start_period: str = "20m"  # first start compiles kernels and loads weights
    # Log lines that mean the launch is wrong even though it serves (a failed preflight).
    fail_on_log: list[str] = Field(default_factory=list)

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        # The path lands in docker's --health-cmd (run by /bin/sh): keep it to URL path characters.
        if not re.match(r"^/[A-Za-z0-9._~/-]*$", value):
            raise ValueError("must be a URL path such as /health")
        return value

    @field_validator("interval", "timeout", "start_period")
    @classmethod
    def _duration(cls, value: str) -> str:
        if not _DURATION.match(value):
            raise ValueError("must be a duration such as 30s, 5m or 1h")
        return value


class Recipe(Strict):
    schema_version: Literal[1] = 1
    name: str
    description: str
    targets: list[str] = Field(min_length=1)
    status: dict[str, Status]
    evidence: list[str] = Field(default_factory=list)
    image: str | None = None
    build: BuildRef | None = None
    model: str
    defaults: dict[str, str | int | float | bool | None] = Field(default_factory=dict)
    serve: Serve = Field(default_factory=Serve)
    env: dict[str, str | int | float | bool] = Field(default_factory=dict)
    secrets: list[str] = Field(default_factory=lambda: ["HF_TOKEN"])
    container: Container = Field(default_factory=Container)
    topology: Topology = Field(default_factory=Topology)
    restart: str = "unless-stopped"
    health: Health = Field(default_factory=Health)
    files: list[RecipeFile] = Field(default_factory=list)
    launch: LaunchOverrides = Field(default_factory=LaunchOverrides)
    gpu_memory_gb: float | None = Field(default=None, gt=0)  # GiB budget → vLLM's fraction
    required: list[str] = Field(default_factory=list)  # placeholders that need defaults/--set
    # inv bench: figures this recipe should reach (checked by edgevllm.perf.expect, docs/bench.md)
    expect: list[dict[str, str | int | float | None]] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError("must be lower-case letters, digits, '.', '_' or '-' "
                             "(it names the container)")
        return value

    @field_validator("image")
    @classmethod
    def _image(cls, value: str | None) -> str | None:
        # A templated image (e.g. edgevllm/vllm:{{ target }}) is checked once rendered.
        if value is not None and "{{" not in value and not valid_image_ref(value):
            raise ValueError(IMAGE_HINT)
        return value

    @field_validator("secrets")
    @classmethod
    def _secrets(cls, value: list[str]) -> list[str]:
        bad = [v for v in value if not _ENV_NAME.match(v)]
        if bad:
            raise ValueError(f"'{bad[0]}' is not an environment variable name")
        return value

    @field_validator("restart")
    @classmethod
    def _restart(cls, value: str) -> str:
        if not re.match(r"^(no|always|unless-stopped|on-failure(:\d+)?)$", value):
            raise ValueError("must be no, always, unless-stopped or on-failure[:N]")
        return value

    @model_validator(mode="after")
    def _cross(self) -> "Recipe":
        if self.image is None and self.build is None:
            raise ValueError("name the image: 'image' (tag or repo@sha256:...) and/or 'build'")
        missing = [t for t in self.targets if t not in self.status]
        extra = [t for t in self.status if t not in self.targets]
        if missing or extra:
            raise ValueError(f"status must give known-good/untested for each target "
                             f"(missing: {missing or '-'}, not a target: {extra or '-'})")
        clash = [k for k in self.env if k in self.secrets]
        if clash:
            raise ValueError(f"env '{clash[0]}' is a secret: list it under secrets only")
        return self


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
    path = Path(ref)
    if path.suffix in (".yaml", ".yml") or "/" in ref:
        if not path.is_file():
            raise RecipeError(f"recipe file {ref} not found; check the path")
        return path
    files = recipe_files()
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
    _check_templates(recipe, source)
    return recipe


def all_recipes() -> list[LoadedRecipe]:
    return [load_recipe(str(path)) for path in recipe_files().values()]


def _display(path: Path) -> Path:
    try:
        return path.resolve().relative_to(project_root())
    except ValueError:
        return path


# -- --set overrides ----------------------------------------------------------------------------
def parse_sets(items: list[str] | None) -> dict[str, object]:
    """``key=value`` pairs; values are YAML scalars (``0.8`` is a number, ``true`` a bool)."""
    out: dict[str, object] = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise RecipeError(f"--set '{item}': expected key=value, e.g. --set port=9000")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        if isinstance(value, (dict, list)):
            value = raw  # JSON such as a speculative config stays the string it was given
        out[key] = value
    return out


# -- rendering ----------------------------------------------------------------------------------
def _environment() -> jinja2.Environment:
    # StrictUndefined: a placeholder nobody defined is an error, never an empty string.
    return jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=False,
                              autoescape=False)


def _check_templates(recipe: Recipe, source: str) -> None:
    """Syntax errors in any template are reported at load time, naming the field."""
    env = _environment()
    for where, text in _templates(recipe):
        try:
            env.parse(text)
        except jinja2.TemplateSyntaxError as exc:
            raise RecipeError(f"{source}: field '{where}': template error: {exc.message}") from None


def _templates(recipe: Recipe) -> list[tuple[str, str]]:
    items = [(f"serve.args[{i}]", a) for i, a in enumerate(recipe.serve.args)]
    items += [(f"serve.command[{i}]", a) for i, a in enumerate(recipe.serve.command)]
    items += [(f"env.{k}", str(v)) for k, v in recipe.env.items()]
    items += [(f"container.ports[{i}]", p) for i, p in enumerate(recipe.container.ports)]
    items += [(f"container.volumes[{i}]", v) for i, v in enumerate(recipe.container.volumes)]
    items += [("health.port", recipe.health.port), ("health.path", recipe.health.path)]
    items += [("image", recipe.image)] if recipe.image else []
    if recipe.build:
        items += [("build.spec" if recipe.build.spec else "build.lock",
                   str(recipe.build.spec or recipe.build.lock))]
    return items


def placeholders(recipe: Recipe) -> set[str]:
    """Every name the recipe's templates read (a --set may supply one that has no default)."""
    env = _environment()
    names: set[str] = set()
    for _, text in _templates(recipe):
        names |= jinja2.meta.find_undeclared_variables(env.parse(text))
    return names


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
    target = overrides.get("target", recipe.targets[0])
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


def render_text(text: str, values: dict[str, object], where: str, source: str) -> str:
    try:
        return _environment().from_string(text).render(values)
    except jinja2.UndefinedError as exc:
        name = re.search(r"'([^']+)' is undefined", str(exc))
        key = name.group(1) if name else str(exc)
        raise RecipeError(f"{source}: field '{where}': placeholder '{key}' is not defined; add it "
                          f"under defaults or pass --set {key}=VALUE") from None
    except jinja2.TemplateError as exc:
        raise RecipeError(f"{source}: field '{where}': template error: {exc}") from None


def render(loaded: LoadedRecipe | Recipe, overrides: dict[str, object] | None = None, *,
           clustered: bool = False, extra_args: list[str] | None = None) -> Rendered:
    """Fill every placeholder. ``clustered``: run a solo recipe in its clustered form
    (``topology.cluster``); ``extra_args``: appended to the serve command (``inv serve -- ...``)."""
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
    if not health_port.isdigit():
        raise RecipeError(f"{source}: field 'health.port': rendered to '{health_port}', "
                          "expected a port number")
    return Rendered(
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
        launch=merged_launch(str(values["target"]), recipe.launch),
        files=recipe_files_mounts(recipe, base, source),
        gpu_memory_gb=recipe.gpu_memory_gb,
    )


def merged_launch(target: str, overrides: LaunchOverrides) -> LaunchDefaults:
    """The target's launch defaults with the recipe's overrides (null removes an entry)."""
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
    return LaunchDefaults.model_validate(base)


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
