"""The one table of build flags: each flag's name, help, kind and the spec field it sets.

The CLI builds its tasks' options from this table (``inv build``, ``inv render``, ``inv plan``,
``inv sources`` share the source flags) and ``spec_overrides`` turns the parsed values into a
partial spec dict, so a flag is spelled once. A flag whose ``field`` is None is the task's own
(``--spec``, ``--lock``, ``--out``) and never reaches the spec.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Iterable

from edgevllm.common.errors import SpecError
from edgevllm.common.kv import parse_pairs, split_csv
from edgevllm.specs.refs import UPSTREAM_REPOS, normalize_repo, parse_pr_arg

MODES_WORD = "{modes}"  # in a help: the build modes' names, from their records


@dataclass(frozen=True)
class Flag:
    """One command-line flag. ``name`` is the Python parameter (``vllm_pr`` → ``--vllm-pr``)."""

    name: str
    help: str
    field: str | None = None  # dotted spec path ("vllm.pr"); None: not a spec field
    kind: str = "str"  # str | int | bool | list | csv | pairs
    default: Any = None
    const: Any = None  # a bool flag that sets its field to this value (--compile)
    example: str = "KEY=VALUE"  # a pairs flag's shape, in its error

    @property
    def option(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def repeatable(self) -> bool:
        return self.kind in ("list", "csv", "pairs")

    def help_text(self) -> str:
        """The help as printed: ``{modes}`` is every mode with a record (``--mode``'s help comes
        from the records, so a new mode is listed without a word here)."""
        if MODES_WORD not in self.help:
            return self.help
        from edgevllm.specs.moderecord import mode_records

        return self.help.replace(MODES_WORD, " | ".join(sorted(mode_records())))


SOURCE_FLAGS: tuple[Flag, ...] = (
    Flag(
        "vllm_repo",
        "vLLM repository: URL, OWNER/REPO or local path (default: upstream)",
        "vllm.repo",
    ),
    Flag("vllm_ref", "tag, branch or full SHA to build (default: the pinned release)", "vllm.ref"),
    Flag(
        "vllm_pr",
        "build a PR's head: N or https://github.com/OWNER/REPO/pull/N (a fork's PR "
        "URL builds the fork)",
        "vllm.pr",
    ),
    Flag(
        "cherry_pick",
        "apply onto the base, in order (repeatable or comma-separated): N, PR URL, full SHA, "
        "REPO#N, REPO@SHA",
        "vllm.cherry_picks",
        "csv",
    ),
    Flag(
        "allow_doc_conflicts",
        "resolve conflicts that are only in docs/tests by keeping the base's side",
        "vllm.allow_doc_conflicts",
        "bool",
        False,
    ),
    Flag(
        "flashinfer_version",
        "FlashInfer version from PyPI (default: the target's pin)",
        "flashinfer.version",
    ),
    Flag(
        "flashinfer_repo",
        "build FlashInfer from this repository instead of PyPI",
        "flashinfer.source.repo",
    ),
    Flag(
        "flashinfer_ref",
        "FlashInfer tag/branch/SHA when built from source",
        "flashinfer.source.ref",
    ),
    Flag(
        "flashinfer_pr", "build FlashInfer from a PR's head (N or PR URL)", "flashinfer.source.pr"
    ),
    Flag(
        "flashinfer_cherry_pick",
        "PR/SHA to apply onto FlashInfer (repeatable or comma-separated, in order)",
        "flashinfer.source.cherry_picks",
        "csv",
    ),
)

SPEC_FLAGS: tuple[Flag, ...] = (
    Flag("target", "thor | spark (inv targets lists them)", "target"),
    Flag("spec", "a YAML build spec; flags override its fields"),
    Flag("lock", "rebuild exactly what a lock file pins (fetching every source by SHA)"),
)

BUILD_FLAGS: tuple[Flag, ...] = (
    SPEC_FLAGS
    + (Flag("recipe", "build the image a recipe needs: its build spec (mods, packages), the "
                      "packages its arguments need (InstantTensor), tagged as it names it"),)
    + SOURCE_FLAGS
    + (
        Flag(
            "mod",
            "apply only these mods (repeatable or comma-separated; default: the target's list)",
            "mods",
            "csv",
        ),
        Flag("add_mod", "add a mod to the target's default list (repeatable): a name, or an "
             "eugr mod folder (run.sh), imported as a build-time mod", "add_mods", "csv"),
        Flag("no_mod", "drop a mod from the list (repeatable)", "remove_mods", "csv"),
        Flag(
            "max_jobs",
            "parallel compile jobs (default: the target's, sized for its memory)",
            "max_jobs",
            "int",
        ),
        Flag("nvcc_threads", "threads per nvcc job", "nvcc_threads", "int"),
        Flag("image_repo", "image repository (default edgevllm/vllm)", "image_repo"),
        Flag(
            "tag",
            "extra image tag (repeatable); the immutable tag comes from the lock",
            "tags",
            "list",
        ),
        Flag(
            "build_arg",
            "KEY=VALUE passed to the build (repeatable; never a secret)",
            "build_args",
            "pairs",
        ),
        Flag("env", "KEY=VALUE runtime environment variable (repeatable)", "env", "pairs"),
        Flag("package", "NAME=VERSION pin for the runtime (repeatable)", "packages", "pairs"),
        Flag(
            "compile_cache_id",
            "name of the local compiler cache (default ccache-<target>); a new name "
            "compiles from an empty cache",
            "compile_cache_id",
        ),
        Flag(
            "compile_cache",
            "a compile cache shared by every builder: ccache remote storage at redis://HOST:PORT "
            "(rediss://, http://, https:// too), passed as a build secret (never logged)",
            "compile_cache",
        ),
        Flag(
            "dist",
            "compile across an sccache-dist pool at sccache://HOST:PORT (its scheduler; "
            "inv dist-pool up starts one): C, C++ and CUDA through sccache, the same wheels",
            "dist",
        ),
        Flag(
            "dist_token_file",
            "--dist: the pool's client token, a file readable by its owner alone (0600), "
            "passed as a build secret (never logged); default $EDGEVLLM_DIST_TOKEN",
            "dist_token_file",
        ),
        Flag(
            "wheel_cache",
            "a registry repository of compiled wheels by compile key (HOST[:PORT]/REPOSITORY): "
            "a build whose key it holds compiles nothing (every sha256 checked); a compile "
            "publishes its wheels there",
            "wheel_cache",
        ),
        Flag(
            "rerun_steps",
            "run every build step again instead of taking BuildKit's cached layers (as a "
            "builder that never built this would; the compiler caches still apply)",
            "rerun_steps",
            "bool",
            False,
        ),
        Flag(
            "reproducible",
            "set the times the build wrote (file mtimes, timestamp .pyc, uv's install "
            "records, the config's dates) to the lock's created_at, after BuildKit: two "
            "builds of one lock give the same image (docs/reproducible.md)",
            "reproducible",
            "bool",
            False,
        ),
        Flag(
            "platform",
            "override the target's docker platform (e.g. linux/amd64 for a test build)",
            "platform",
        ),
        Flag(
            "mode",
            "{modes} (default: chosen from the other flags; preflight says which and why)",
            "mode",
        ),
        Flag(
            "toolchain",
            "how a compile for another platform runs: cross (the builder's own CUDA compiler "
            "and a cross g++, at native speed: the default where a cross road goes, e.g. "
            "linux/arm64 on x86_64) | emulated (the target's compiler under qemu)",
            "toolchain",
        ),
        Flag(
            "extensions",
            "compile only these CMake extensions of the tree (comma-separated, the kernel "
            "plan's names, e.g. cumem_allocator,spinloop): a partial kernel build, whose "
            "image cannot serve (default: every extension)",
            "extensions",
            "csv",
        ),
        Flag(
            "vllm_wheel",
            "prebuilt: install this released vLLM and its locked closure, nothing "
            "compiled: a version (0.33.0), a local .whl or a URL",
            "vllm_wheel",
        ),
        Flag(
            "override",
            "resolver override for the closure, e.g. 'certifi>=2026.10.18' (repeatable)",
            "overrides",
            "list",
        ),
        Flag(
            "base_image",
            "base image for every stage, replacing the target's (e.g. where nvcr.io "
            "is unreachable)",
            "base_image",
        ),
        Flag(
            "publish_cache",
            "after the checks, compress the image's layers into the publish layer cache "
            "(costs about one cold publish now; the first inv publish needs no docker save)",
            "publish_cache",
            "bool",
            False,
        ),
        Flag(
            "aot",
            "build FlashInfer's AOT modules that vLLM asks for one model into the image: its "
            "config.json, or recipe:NAME (the recipe's model, from the local Hugging Face cache)",
            "aot",
        ),
        Flag("warm", "deprecated: the old name of --aot (inv warm is another thing: it harvests "
                     "a running server's JIT caches)"),
        Flag(
            "compile",
            "compile vLLM even when the change is Python-only (by default a Python-only "
            "PR or pick reuses the compiled kernels of the release below it), and when the "
            "--wheel-cache artifact is refused (with --lock too)",
            "mode",
            "bool",
            False,
            const="compile",
        ),
        Flag(
            "cmake_dep",
            "NAME=FOLDER (repeatable): a compile takes what the tree's CMake clones as NAME "
            "from this folder instead of fetching it (air-gapped builders, mirrors, stand-ins); "
            "with --lock it must have the lock's tree hash, without one it is recorded as "
            "supplied, unproven",
            "cmake_deps",
            "pairs",
            example="NAME=FOLDER",
        ),
    )
)

OUT_FLAG = Flag("out", "where locks, logs, wheels and contexts go", default="out")


def by_name(flags: Iterable[Flag]) -> dict[str, Flag]:
    return {flag.name: flag for flag in flags}


def help_for(flags: Iterable[Flag]) -> dict[str, str]:
    return {flag.name: flag.help_text() for flag in flags}


def iterable_for(flags: Iterable[Flag]) -> list[str]:
    return [flag.name for flag in flags if flag.repeatable]


def signature(flags: Iterable[Flag], *extra: inspect.Parameter) -> inspect.Signature:
    """The signature a task body exposes to Invoke: ``(c, <flags…>, <extra…>)``."""
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    params = [inspect.Parameter("c", kind)]
    params += [inspect.Parameter(flag.name, kind, default=flag.default) for flag in flags]
    return inspect.Signature(params + list(extra))


def param(name: str, default: Any = None) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default)


def _value(flag: Flag, raw: Any) -> Any:
    if flag.kind == "int":
        return _whole_number(raw, flag.option)
    if flag.kind == "csv":
        names = split_csv(raw)
        if not names:  # ``--extensions ''`` must not read as "every extension"
            given = ",".join(str(v) for v in raw) if isinstance(raw, (list, tuple)) else raw
            raise SpecError(f"{flag.option} '{given}': names nothing; give NAME[,NAME...] or "
                            "leave the flag out")
        return names
    if flag.kind == "list":
        return list(raw) or None
    if flag.kind == "pairs":
        return parse_pairs(raw, flag.option, SpecError, flag.example) or None
    if flag.kind == "bool":
        value = True if flag.const is None else flag.const
        return value if raw else None
    return raw


def _whole_number(raw: Any, option: str) -> int:
    text = str(raw).strip()
    if not text.isdigit():
        raise SpecError(f"{option} '{raw}': expected a whole number")
    return int(text)


def _set(data: dict, path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    for key in parents:
        data = data.setdefault(key, {})
    data[leaf] = value


def spec_overrides(values: dict[str, Any], flags: Iterable[Flag] = BUILD_FLAGS) -> dict:
    """Flag values (as Invoke parsed them) → a partial spec dict holding only what was given.

    PR flags go through the one PR parser: a PR URL of a fork sets the source's repository to
    the fork, and a ``--*-repo`` that names another repository is refused.
    """
    compile_mode = by_name(BUILD_FLAGS)["compile"].const  # the mode --compile asks for
    if values.get("compile") and values.get("mode") not in (None, "", compile_mode):
        raise SpecError(f"--compile and --mode {values['mode']}: give one of them")
    data: dict = {}
    for flag in flags:
        raw = values.get(flag.name)
        if flag.field is None or flag.field == "target" or raw in (None, "", [], (), False):
            continue
        value = _value(flag, raw)
        if value is not None:
            _set(data, flag.field, value)
    for source, repo_flag in (("vllm", "--vllm-repo"), ("flashinfer", "--flashinfer-repo")):
        section = data.get(source, {})
        section = section.get("source", {}) if source == "flashinfer" else section
        if section:
            _resolve_pr(section, source, repo_flag)
    _source_defaults(data)
    return data


def _resolve_pr(section: dict, source: str, repo_flag: str) -> None:
    if "pr" not in section:
        return
    raw = section["pr"]
    pr_repo, number = parse_pr_arg(raw, f"--{source}-pr")
    section["pr"] = number
    if pr_repo is None:
        return
    given = section.get("repo")
    if given and normalize_repo(given) != pr_repo:
        raise SpecError(
            f"--{source}-pr '{raw}' is a PR of another repository than "
            f"{repo_flag} {given}; give one of them"
        )
    section["repo"] = pr_repo


def _source_defaults(data: dict) -> None:
    vllm = data.get("vllm")
    if vllm and vllm.get("repo") and "ref" not in vllm and "pr" not in vllm:
        vllm["ref"] = None  # a custom repo without a ref means its default branch
    source = data.get("flashinfer", {}).get("source")
    if source is not None:
        source.setdefault("repo", UPSTREAM_REPOS["flashinfer"])
        if data.get("vllm", {}).get("allow_doc_conflicts"):
            source["allow_doc_conflicts"] = True
