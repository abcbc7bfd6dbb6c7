"""The lock: every input of a build, pinned, so that the image can be rebuilt exactly.

A lock is JSON (or YAML, by file suffix) written atomically. It records the tool version, the
target, the base images (digests where known), each source (repo, base SHA, every cherry-pick with
its head SHA, merge-base and the sha256 of the applied diff, the tree hash of the prepared tree),
the repositories vLLM's CMake would clone (commit and tree hash), the kernel plan, pinned package
versions, mods and build arguments.

``lock_hash`` is the sha256 of a canonical JSON rendering of everything that determines the image;
``created_at`` and user ``tags`` are left out, so the same inputs always give the same hash and the
same deterministic tag (``image_tag``).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from edgevllm import __version__
from edgevllm.common import labels
from edgevllm.common.dataload import load_json, load_yaml
from edgevllm.common.errors import LockError, MissingInputError
from edgevllm.common.fsutil import atomic_write_text
from edgevllm.common.grammar import (
    GIT_SHA,
    SHA256_HEX,
    Digest,
    EnvName,
    ImageRef,
    ImageTagOrRef,
    Line,
    ModName,
    Name,
    PackageName,
    SchemaVersion,
    Version,
)
from edgevllm.common.schema import parse_model
from edgevllm.common.secrets import HOW_TO_PASS, check_no_secrets, redact, token_kind
from edgevllm.specs.moderecord import LEGACY_MODE, check_mode

SCHEMA_VERSION = 1
LOCK_FILENAME = labels.LOCK_FILENAME
LOCK_LABEL = labels.LOCK  # image label holding the compact lock JSON
LOCK_HASH_LABEL = labels.LOCK_SHA  # image label holding lock_hash()
LOCK_IMAGE_PATH = labels.LOCK_FILE  # where the lock lives inside the image

_UNHASHED = {"created_at", "tags", "compile_cache"}
_TAG_BAD = re.compile(r"[^A-Za-z0-9_.-]+")


def _lowercase_hex(grammar: re.Pattern, meaning: str) -> AfterValidator:
    """A text field's check: the value must match ``grammar`` whole, else it ``must be
    {meaning}``."""

    def check(value: str) -> str:
        if not grammar.fullmatch(value):
            raise ValueError(f"must be {meaning}")
        return value

    return AfterValidator(check)


# A git object name (SHA-1 or SHA-256), a sha256 in hex, and the words a version or file name may
# hold.
Sha = Annotated[str, _lowercase_hex(GIT_SHA, "a full lowercase hex SHA")]
Sha256 = Annotated[str, _lowercase_hex(SHA256_HEX, "a 64-digit lowercase hex sha256")]
Word = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.+-]{1,200}$")]
WheelFile = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.+!-]{1,255}\.whl$")]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


# A cherry-pick's identity: the same four fields wherever a pick is held (the request,
# sources/requests.py; the pick resolved, sources/cherrypick.py; its record below), copied
# between them by ``identity_of`` alone.
PICK_IDENTITY = ("spec", "kind", "repo", "pr")


def identity_of(pick: object) -> dict[str, Any]:
    """``PICK_IDENTITY``'s fields of a request, a resolved pick or a record."""
    return {name: getattr(pick, name) for name in PICK_IDENTITY}


class PickLock(_Model):
    """One cherry-pick, as applied (or skipped) onto a source's base."""

    spec: Line  # as the user wrote it: "40082", a URL, a SHA
    kind: Literal["pr", "commit"]
    repo: Line  # where the pick was fetched from
    pr: Optional[int] = None
    head_sha: Sha  # the PR head (or the commit) that was applied
    merge_base: Sha  # diff base: merge-base with upstream default branch / parent
    diff_sha256: str  # sha256 of the applied diff (git diff --binary --full-index)
    skipped: bool = False  # already contained in the base
    reason: Line = ""  # why skipped, or which doc conflicts kept the base side
    commit: Optional[Sha] = None  # the commit this pick made in the prepared tree
    resolved_paths: list[Line] = Field(default_factory=list)  # doc/test conflicts resolved to base


class SourceLock(_Model):
    """One source tree (vLLM, FlashInfer) resolved to commits."""

    name: Name
    repo: Line
    ref: Optional[Line] = None  # what was asked for (branch/tag/SHA), for the record
    pr: Optional[int] = None  # set when the base is a PR's head
    base_sha: Sha
    picks: list[PickLock] = Field(default_factory=list)
    commit: Sha  # the prepared commit (base + picks)
    tree: Sha  # git tree hash of the prepared commit: the content hash
    version: Word  # derived from tags (git describe) or the short SHA
    submodules: dict[Line, Sha] = Field(default_factory=dict)  # path -> commit, when exported


class CMakeDepLock(_Model):
    """A repository the vLLM tree's CMake would clone at configure time, fetched on the host, or
    a folder the user supplied in its place (``--cmake-dep``, ``sources/depfolder.py``)."""

    repo: Line
    ref: Line  # the tree's GIT_TAG (a tag, branch or SHA)
    commit: Optional[Sha] = None  # what ref resolved to; None where supplied
    tree: Sha  # git tree hash of that commit (of the supplied folder's content)
    env_var: EnvName  # the tree's *_SRC_DIR override the build sets
    declared_at: Line = ""  # file:line of the FetchContent call
    submodules: dict[Line, Sha] = Field(default_factory=dict)  # path -> commit, exported too
    # path -> tree hash of each submodule's commit (locks since --cmake-dep; before, a supplied
    # folder's submodule content is not proven, only the top-level tree with them as gitlinks)
    submodule_trees: dict[Line, Sha] = Field(default_factory=dict)
    # A folder the user supplied (--cmake-dep) without a lock: it stands in for repo + ref, is
    # not proven to be them, and a rebuild needs a folder with this very tree hash.
    supplied: bool = False

    @model_validator(mode="after")
    def _commit_or_supplied(self) -> "CMakeDepLock":
        if (self.commit is None) != self.supplied:
            raise ValueError("a fetched dependency has a commit, a supplied one none")
        return self


class BaseImageLock(_Model):
    """A base image a build used; ``Lock.base_images`` keys it by its role: ``build``,
    ``runtime``, ``bytecode`` (the build platform's base where the closure's byte-code
    compiles)."""

    ref: ImageRef  # e.g. nvcr.io/nvidia/cuda:13.0.0-devel-ubuntu24.04
    # sha256:... of its registry's manifest (an index where multi-platform); None for an image
    # only the engine has (imported, built or tagged locally) or a registry not reached
    digest: Optional[Digest] = None

    def pinned(self) -> str:
        """What a rebuild names: ``ref@digest`` where the digest is known, else the ref."""
        return f"{self.ref}@{self.digest}" if self.digest else self.ref


class ModLock(_Model):
    name: ModName
    version: Word
    # what its script downloads, fetched by the build: url -> sha256
    downloads: dict[Line, Sha256] = Field(default_factory=dict)


class WheelLock(_Model):
    """One wheel of a closure: installed only if its bytes have this sha256."""

    name: PackageName
    version: Version
    filename: WheelFile
    sha256: Sha256
    url: Line = ""
    size: Optional[int] = Field(default=None, ge=0)


class ClosureLock(_Model):
    """A build's whole dependency closure, resolved for one platform and Python."""

    python_platform: Word  # e.g. aarch64-manylinux_2_34
    python_version: Word
    requirements: list[Line] = Field(default_factory=list)
    overrides: list[Line] = Field(default_factory=list)  # resolver overrides, target's and user's
    indexes: list[Line] = Field(default_factory=list)
    wheels: list[WheelLock] = Field(default_factory=list)

    def wheel(self, name: str) -> Optional[WheelLock]:
        return next((w for w in self.wheels if w.name == name), None)


class KernelsFromLock(_Model):
    """A precompiled build: the release whose compiled libraries the tree was installed over."""

    release: Version  # "0.33.0"
    release_tag: Line  # "v0.33.0"
    release_commit: Sha  # the tag's commit (the diff is against it)
    wheel: WheelFile  # the release wheel's file name
    sha256: Sha256  # its bytes (also pinned in ``closure``)
    changed: int = Field(default=0, ge=0)  # files the tree changes against the release


class Lock(_Model):
    schema_version: SchemaVersion = SCHEMA_VERSION
    tool_version: Word = __version__
    created_at: Optional[Line] = None  # informational; not part of the hash
    target: Optional[Name] = None
    base_images: dict[Name, BaseImageLock] = Field(default_factory=dict)
    vllm: Optional[SourceLock] = None
    flashinfer: Optional[SourceLock] = None
    packages: dict[PackageName, Version] = Field(default_factory=dict)  # name -> pinned version
    mods: list[ModLock] = Field(default_factory=list)
    build_args: dict[EnvName, Line] = Field(default_factory=dict)
    # What vLLM's CMake would clone, fetched on the host and passed in (the compile is offline).
    cmake_deps: dict[str, CMakeDepLock] = Field(default_factory=dict)
    # The kernel plan (edgevllm/sources/plan.py): arches per kernel group and extension.
    kernel_plan: dict[str, Any] = Field(default_factory=dict)
    # The other inputs that shape the image (platform, python, apt packages, torch source, runtime
    # env, compile jobs), so that `inv build --lock` needs nothing but the lock.
    settings: dict[str, Any] = Field(default_factory=dict)
    tags: list[ImageTagOrRef] = Field(default_factory=list)  # user tags; not hashed
    mode: Annotated[Name, AfterValidator(check_mode)] = LEGACY_MODE  # a mode with a record
    closure: Optional[ClosureLock] = None  # every wheel the image installs, by sha256
    # compile/precompiled: the tree's build requirements (pinned like the closure, build stages
    # only); precompiled: the release whose kernels were reused.
    build_closure: Optional[ClosureLock] = None
    # compile with --aot on the cross road: FlashInfer for the build platform
    # (builder/cross/context.py
    # cross_aot_tools), installed in the aot-build stage only.
    aot_closure: Optional[ClosureLock] = None
    kernels_from: Optional[KernelsFromLock] = None
    # compile: the shared compile cache the compile used (--compile-cache), its password
    # redacted. Not hashed: a cache only speeds a compile, it never changes the image.
    compile_cache: Optional[str] = None

    @field_validator("compile_cache")
    @classmethod
    def _redacted(cls, value: Optional[str]) -> Optional[str]:
        return redact(value) if value else value  # a password, |bearer-token=: never in a lock

    @field_validator("build_args")
    @classmethod
    def _no_secrets(cls, value: dict[str, str]) -> dict[str, str]:
        # A lock travels into an image label: a token in it would be published with the image.
        check_no_secrets(value, "a lock must not hold it")
        return value

    @model_validator(mode="after")
    def _no_token_anywhere(self) -> "Lock":
        kind = token_kind(self.model_dump_json())
        if kind:
            raise ValueError(f"a value in the lock looks like {kind}; {HOW_TO_PASS}")
        return self

    def sources(self) -> dict[str, SourceLock]:
        return {
            name: src for name, src in (("vllm", self.vllm), ("flashinfer", self.flashinfer)) if src
        }


def planned_arches_of(kernel_plan: object) -> dict[str, list[str]] | None:
    """The kernel plan's arches by CUDA extension as a lock records them (``kernel_plan``'s
    ``extensions``), every field's type checked: an image's lock label is others' data. None
    where no plan is recorded (the modes that compile nothing)."""
    extensions = kernel_plan.get("extensions") if isinstance(kernel_plan, dict) else None
    if not isinstance(extensions, dict):
        return None
    return {str(name): [str(a) for a in entry["arches"]] for name, entry in extensions.items()
            if isinstance(entry, dict) and isinstance(entry.get("arches"), list)}


def now_utc() -> str:
    return (
        _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    )


def canonical_json(lock: Lock) -> str:
    data = lock.model_dump(mode="json", exclude=_UNHASHED)
    if data.get("closure") is None and data.get("mode") == LEGACY_MODE:
        del data["closure"], data["mode"]  # locks made before they recorded a mode or a closure
    for key in ("build_closure", "aot_closure", "kernels_from"):  # absent where none
        if data.get(key) is None:
            data.pop(key, None)
    for key in ("cmake_deps", "kernel_plan"):  # locks of trees without them hash as before
        if not data.get(key):
            data.pop(key, None)
    for dep in data.get("cmake_deps", {}).values():  # locks before --cmake-dep hash as before
        for key in ("commit", "submodule_trees", "supplied"):
            if not dep.get(key):
                dep.pop(key, None)
    for mod in data.get("mods", []):  # mods that download nothing hash as before
        if not mod.get("downloads"):
            mod.pop("downloads", None)
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def lock_hash(lock: Lock) -> str:
    """sha256 (hex) of the canonical JSON of everything that determines the image."""
    return hashlib.sha256(canonical_json(lock).encode()).hexdigest()


def _tag_part(text: str) -> str:
    return _TAG_BAD.sub("-", text).strip("-.") or "unknown"


def image_tag(lock: Lock) -> str:
    """``<vllm-version>-<target>-<hash12>``: the same lock always gives the same tag."""
    wheel = lock.closure.wheel("vllm") if lock.closure else None
    version = lock.vllm.version if lock.vllm else (wheel.version if wheel else "novllm")
    tag = f"{_tag_part(version)}-{_tag_part(lock.target or 'any')}-{lock_hash(lock)[:12]}"
    if len(tag) > 128:  # docker's limit; keep the hash, shorten the version
        tag = tag[len(tag) - 128 :].lstrip("-.")
    return tag


def label_value(lock: Lock) -> str:
    """Compact JSON for the image label (full lock, created_at included)."""
    return redact(json.dumps(lock.model_dump(mode="json"), sort_keys=True, separators=(",", ":")))


def lock_to_text(lock: Lock, path: Path | str | None = None) -> str:
    data = lock.model_dump(mode="json")
    if path is not None and Path(path).suffix.lower() in (".yaml", ".yml"):
        return yaml.safe_dump(data, sort_keys=True)
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def write_lock(lock: Lock, path: Path | str) -> Path:
    """Write atomically; YAML when the name ends in .yaml/.yml, JSON otherwise."""
    path = Path(path)
    if "lock" not in path.name:
        raise LockError(f"{path}: a lock file's name must contain 'lock' (e.g. {LOCK_FILENAME})")
    return atomic_write_text(path, lock_to_text(lock, path))


def parse_lock(text: str, origin: str = "<lock>", yaml_syntax: bool = False) -> Lock:
    data = (load_yaml if yaml_syntax else load_json)(text, origin, LockError)
    if not isinstance(data, dict):
        raise LockError(
            f"{origin}: not a lock (expected a mapping); regenerate it with inv sources"
        )
    version = data.get("schema_version")
    if isinstance(version, int) and version > SCHEMA_VERSION:
        raise LockError(
            f"{origin}: schema_version {version} is newer than this edgevllm supports "
            f"({SCHEMA_VERSION}); upgrade edgevllm"
        )
    return parse_model(Lock, data, str(origin), LockError)


def check_lock_target(lock: Lock, target: str | None, origin: str = "the lock") -> None:
    """A lock rebuilds for the target it records: ``--target`` may only repeat it."""
    if target and lock.target and target != lock.target:
        from edgevllm.common.errors import ConfigError

        raise ConfigError(f"--target {target} differs from the target of {origin} "
                          f"({lock.target}); drop --target or give a lock made for {target}")


def read_lock(path: Path | str) -> Lock:
    from edgevllm.common.schema import read_text

    path = Path(path)
    if not path.exists():
        raise MissingInputError(f"{path}: no such lock file; check the path given to --lock")
    text = read_text(path, LockError)
    return parse_lock(text, str(path), yaml_syntax=path.suffix.lower() in (".yaml", ".yml"))
