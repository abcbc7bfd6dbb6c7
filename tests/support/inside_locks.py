"""Locks for the inspect tests (inv diff, SBOM, provenance): a prebuilt-style lock with a wheel
closure, a vLLM source with one pick, one CMake dependency, base images (the byte-code's with no
digest: local only) and mods; ``variant`` changes exactly one thing of it."""

from __future__ import annotations

import hashlib

from edgevllm.specs.lock import Lock

BYTECODE_TWIN = "edgevllm-twin/cuda:13.0.0-runtime-ubuntu24.04-amd64"


def sha(text: str, digits: int = 40) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:digits]


def wheel(name: str, version: str) -> dict:
    return {"name": name, "version": version, "filename": f"{name}-{version}-py3-none-any.whl",
            "sha256": sha(f"{name}-{version}", 64)}


def lock_data(six: str = "1.16.0", pick_head: str = "pick-a", mod_version: str = "1.0") -> dict:
    return {
        "target": "spark", "mode": "prebuilt",
        "base_images": {"runtime": {"ref": "nvcr.io/nvidia/cuda:13.0.0-runtime-ubuntu24.04",
                                    "digest": "sha256:" + sha("base", 64)},
                        # the build platform's twin of the byte-code, an image only local
                        "bytecode": {"ref": BYTECODE_TWIN}},
        "vllm": {"name": "vllm", "repo": "https://github.com/vllm-project/vllm", "ref": "v0.33.0",
                 "base_sha": sha("base-sha"), "commit": sha("commit"), "tree": sha("tree"),
                 "version": "0.33.0",
                 "picks": [{"spec": "40082", "kind": "pr", "repo": "vllm-project/vllm",
                            "pr": 40082, "head_sha": sha(pick_head), "merge_base": sha("mb"),
                            "diff_sha256": sha(pick_head + "diff", 64)}]},
        "cmake_deps": {"cutlass": {"repo": "https://github.com/NVIDIA/cutlass", "ref": "v4.2.1",
                                   "commit": sha("cutlass"), "tree": sha("cutlass-tree"),
                                   "env_var": "CUTLASS_SRC_DIR"}},
        "mods": [{"name": "fastsafetensors", "version": mod_version}],
        "build_args": {"MAX_JOBS": "8"},
        "closure": {"python_platform": "x86_64-manylinux_2_34", "python_version": "3.11",
                    "wheels": [wheel("six", six), wheel("idna", "3.10")]},
    }


def make_lock(**changes) -> Lock:
    return Lock.model_validate(lock_data(**changes))
