"""The launch recipe's schema (``recipes/*.yaml``): pydantic models, unknown fields are errors.

What each field means is in docs/serve.md; rendering (``edgevllm.serve.recipe.render``) fills the
templates these fields hold.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from edgevllm.common.grammar import ENV_NAME, IMAGE_REF, SHA256_HEX
from edgevllm.common.schema import Strict
from edgevllm.common.secrets import secret_problem

SCHEMA_VERSION = 1
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*\Z")
_DURATION = re.compile(r"^\d+(ms|s|m|h)\Z")
# Names every template sees besides ``defaults``; ``--set`` may override them too.
RESERVED = ("model", "image", "target", "tensor_parallel", "pipeline_parallel", "nodes")
FILES_DIR = "/edgevllm/files"  # where a recipe's files appear in the container (read-only)
Status = Literal["known-good", "untested"]


IMAGE_HINT = "must be an image tag (repo:tag) or a digest (repo@sha256:<64 hex>)"


def valid_image_ref(ref: str) -> bool:
    return bool(IMAGE_REF.fullmatch(ref))  # the one docker reference grammar


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
        if not SHA256_HEX.fullmatch(value):
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
        if not re.fullmatch(r"/[A-Za-z0-9._~/-]*", value):
            raise ValueError("must be a URL path such as /health")
        return value

    @field_validator("interval", "timeout", "start_period")
    @classmethod
    def _duration(cls, value: str) -> str:
        if not _DURATION.fullmatch(value):
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
        bad = [v for v in value if not ENV_NAME.fullmatch(v)]
        if bad:
            raise ValueError(f"'{bad[0]}' is not an environment variable name")
        return value

    @field_validator("restart")
    @classmethod
    def _restart(cls, value: str) -> str:
        if not re.fullmatch(r"no|always|unless-stopped|on-failure(:\d+)?", value):
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
        for key, value in self.env.items():  # env values reach argv, dry-run and Compose files
            problem = secret_problem(key, value)
            if problem:
                raise ValueError(f"env: {problem}; list its name under secrets (passed by name "
                                 "from the environment of inv serve), never its value")
        return self
