"""The one table of image label names and in-image paths.

Python code imports the constants; the Dockerfile template receives ``template_values()`` and
spells nothing itself. The in-image applier and probe script are stdlib-only and run without
edgevllm installed, so they keep literal copies: tests/test_common_labels.py holds them to this
table.
"""

from __future__ import annotations

from edgevllm.common.dataload import load_json
from edgevllm.common.errors import ConfigError

PREFIX = "io.edgevllm."

# Written by the Dockerfile (static, at build time).
TARGET = PREFIX + "target"
PLATFORM = PREFIX + "platform"
ARCH_LIST = PREFIX + "arch-list"
MODS_SELECTED = PREFIX + "mods-selected"
MODE = PREFIX + "mode"                 # compile | prebuilt | precompiled
# Written by the pipeline before the checks (sources and lock).
VLLM_SHA = PREFIX + "vllm.sha"
VLLM_PR = PREFIX + "vllm.pr"
PRS = PREFIX + "prs"
MODS_VERSIONS = PREFIX + "mods-versions"
TAG = PREFIX + "tag"
KERNEL_PLAN = PREFIX + "kernel-plan"   # CUDA_ARCHS and the groups that get nothing
VLLM_RS = PREFIX + "vllm-rs"           # whether vLLM's Rust frontend binary is in the image
EXTENSIONS = PREFIX + "extensions"     # a partial build's extensions; what the target left out
VLLM_WHEEL_SHA = PREFIX + "vllm.wheel-sha256"   # prebuilt: the installed vLLM wheel
LOCK = PREFIX + "lock"
LOCK_SHA = PREFIX + "lock-sha256"
# Written after the checks (config only): their outcomes.
MODS = PREFIX + "mods"
VERIFY = PREFIX + "verify"
PROBE = PREFIX + "probe"
AOT = PREFIX + "aot"                   # inv build --aot: the FlashInfer AOT modules built in
                                       # (the label keeps its name: images carry it)
# On containers started by inv serve / cluster / probe.
RECIPE = PREFIX + "recipe"
CLUSTER = PREFIX + "cluster"
ROLE = PREFIX + "role"
IMAGE = PREFIX + "image"
MEMORY_GIB = PREFIX + "memory-gib"
NODE = PREFIX + "node"
NETWORK = PREFIX + "network"
# On a compiled-wheels artifact in a registry (--wheel-cache): the compile key it holds.
COMPILE_KEY = PREFIX + "compile-key"
# A wheel cache artifact's signature over its wheel list, and the signer's key id (wheelcache)
WHEELS_SIGNATURE = PREFIX + "wheels.signature"
WHEELS_KEYID = PREFIX + "wheels.keyid"

# Inside the image.
HOME = "/opt/edgevllm"
CONSTRAINTS = HOME + "/constraints.txt"
MODS_RECORD = HOME + "/mods.json"
MODS_ENV = HOME + "/mods.env"
AOT_RECORD = HOME + "/aot.json"       # the AOT step's record (builder/aot/inimage_build.py)
LOCK_FILENAME = "edgevllm.lock.json"        # beside prepared sources, and in the image
LOCK_FILE = HOME + "/" + LOCK_FILENAME
VENV = "/opt/venv"
# Where build contexts are mounted during a build step, and run-time mounts.
WHEELS_MOUNT = "/tmp/edgevllm-wheels"
WHEELHOUSE_MOUNT = "/wheelhouse"  # the "wheelhouse" context: the locked closure
CMAKE_DEPS_MOUNT = "/src/deps"   # the "cmake-deps" context: what vLLM's CMake would clone
CMAKE_DEPS_ENV = "edgevllm-deps.env"  # in that context: the *_SRC_DIR overrides, sourced
MODS_MOUNT = "/edgevllm-mods"
AOT_MOUNT = "/edgevllm-aot"
AOT_OUT = "/edgevllm-aot-out"      # the cross road's aot-build stage: its modules and record
TUNE_MOUNT = "/edgevllm-tune"
SERVE_MOUNT = "/edgevllm-serve"
# A cross compile (builder/cross/context.py): the staged toolchain while a step runs, the closure's
# venv
# as the target's side of every compiling step, and where the toolchain file is kept.
CROSS_MOUNT = "/edgevllm-cross"
CROSS_TARGET = "/opt/edgevllm-target"
CROSS_TOOLCHAIN = "/opt/edgevllm-cross/toolchain.cmake"
# What CMake runs a "target program" with on a cross road (builder/cross/inimage_run.py).
CROSS_RUN = "/opt/edgevllm-cross/run"
# The "edgevllm-extensions" context (builder/subset/plan.py): bin/cmake and the target's leave-out.
EXTENSIONS_MOUNT = "/edgevllm-extensions"
# The shared compile cache's URL reaches the compile step only as this BuildKit secret (a file
# under /run/secrets while the step runs); the step prints ccache's counters after this marker.
CCACHE_REMOTE_SECRET = "ccache-remote"
CCACHE_STATS_MARKER = "edgevllm-ccache-stats"
SCCACHE_STATS_MARKER = "edgevllm-sccache-stats"  # --dist: builder/distpool/inimage_stats.py
# --dist (builder/distpool/client.py): the pinned sccache's context while the compile step runs.
SCCACHE_MOUNT = "/opt/edgevllm-sccache"

# The files that run inside an image or a container, where edgevllm is not installed (their source
# is copied in or fed to the image's python3): each imports only the standard library (and the
# image's own torch/flashinfer) and parses under the oldest Python a target or a test base runs.
# tests/test_common_labels.py holds each of them to that, holds this list complete, and holds
# their one name: inimage_<what>.py.
IN_IMAGE_SCRIPTS = ("mods/inimage_applier.py", "builder/aot/inimage_build.py",
                    "probe/inimage_check.py", "inspect/inimage_dists.py",
                    "serve/inimage_entry.py", "serve/inimage_startprobe.py",
                    "builder/cross/inimage_stage.py", "builder/cross/inimage_run.py",
                    "builder/subset/inimage_cmake.py", "builder/distpool/inimage_stats.py",
                    "builder/distpool/inimage_check.py")

# The records a build leaves in an image: key → (the label holding its JSON, its files under HOME).
RECORDS = {
    "lock": (LOCK, (LOCK_FILENAME, "lock.json")),
    "mods": (MODS, ("mods.json",)),
    "verify": (VERIFY, ("verify.json",)),
    "probe": (PROBE, ("probe.json",)),
}


def label_record(image_labels: dict[str, str] | None, key: str) -> object | None:
    """Record ``key`` of ``RECORDS`` as the image's label holds it (its JSON); None when the
    label is absent or not JSON. Host code that may also read the files: image/records.py."""
    text = (image_labels or {}).get(RECORDS[key][0])
    if not text:
        return None
    try:
        return load_json(text, RECORDS[key][0], ConfigError)
    except ConfigError:
        return None


def serves(image_labels: dict[str, str] | None) -> bool:
    """False only for an image whose extensions label says it cannot serve a model (a partial
    kernel build: builder/subset/plan.py writes the label)."""
    text = (image_labels or {}).get(EXTENSIONS)
    try:
        record = load_json(text, EXTENSIONS, ConfigError) if text else None
    except ConfigError:
        return True
    return not (isinstance(record, dict) and record.get("serves") is False)


def template_values() -> dict[str, dict[str, str]]:
    """What the Dockerfile template reads as ``labels.*`` and ``paths.*``."""
    return {
        "labels": {"target": TARGET, "platform": PLATFORM, "arch_list": ARCH_LIST,
                   "mods_selected": MODS_SELECTED, "mode": MODE},
        "paths": {"home": HOME, "constraints": CONSTRAINTS, "mods_record": MODS_RECORD,
                  "venv": VENV, "wheels_mount": WHEELS_MOUNT, "mods_mount": MODS_MOUNT,
                  "aot_mount": AOT_MOUNT, "aot_record": AOT_RECORD, "aot_out": AOT_OUT,
                  "wheelhouse_mount": WHEELHOUSE_MOUNT, "cmake_deps_mount": CMAKE_DEPS_MOUNT,
                  "cmake_deps_env": CMAKE_DEPS_ENV, "ccache_remote": CCACHE_REMOTE_SECRET,
                  "ccache_stats": CCACHE_STATS_MARKER, "cross_mount": CROSS_MOUNT,
                  "cross_target": CROSS_TARGET, "cross_toolchain": CROSS_TOOLCHAIN,
                  "cross_run": CROSS_RUN, "extensions_mount": EXTENSIONS_MOUNT},
    }
