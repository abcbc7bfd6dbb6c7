"""The FlashInfer AOT step, inside the image at build time (``inv build --aot``;
docs/first-start.md).

FlashInfer's own JIT builds the modules that plan.json names (``builder/aot/modules.py`` chose them
from a model's config.json), with the image's nvcc, g++ and ninja and no GPU, for
``FLASHINFER_CUDA_ARCH_LIST``. Each module's library is then installed where FlashInfer 0.7.2
looks for prebuilt (AOT) modules before it would compile anything:
``<flashinfer>/data/aot/<name>/<name>.so`` (``jit.env.get_aot_artifacts``). Not its JIT cache
(``~/.cache/flashinfer/<version>/<arch>/cached_ops``), for two reasons read off its code:

- a JIT-cache library is never loaded as it is: ``JitSpecNvcc.try_load`` trusts only AOT
  artifacts, so each start runs ninja over the cache (a no-op when up to date), and a container
  without ninja (or with other include paths, which change the commands ninja compares) fails
  or recompiles;
- ``inv serve`` mounts a per-image host folder over ``~/.cache/flashinfer``, which would hide
  anything baked there.

The JIT's own workspace (sources it generates, objects, ninja files) goes to a temporary folder
that is removed, so the layer holds the libraries only. The record (``--record``): per module
its name, bytes and sha256, and the arch list, the toolchain and the seconds the build took.

On an x86_64 builder for a linux/arm64 image the same script can cross-compile (``--target-lib
$CUDA_HOME/targets/sbsa-linux/lib --out DIR``, run by the build platform's Python with FlashInfer,
tvm-ffi and torch, the cross road's ``CXX`` and ``NVCC_PREPEND_FLAGS``, and the target's CUDA
folder laid out by ``inimage_stage.py``): ``cross_toolchain``. docs/first-start.md says what of
that ``inv build`` runs yet.

Runs with the image's Python: the standard library, and the image's FlashInfer and torch (edgevllm
is not installed in the image). A module FlashInfer names differently from the plan fails the
step: the plan was made for another FlashInfer.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time


def fail(message):
    print(f"edgevllm aot: error: {message}", file=sys.stderr)
    sys.exit(1)


def nvcc_release(cuda_home):
    """'13.5' from ``nvcc --version``; None when there is no nvcc."""
    nvcc = os.path.join(cuda_home, "bin", "nvcc")
    try:
        text = subprocess.run([nvcc, "--version"], capture_output=True, text=True,
                              check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    found = re.search(r"release (\d+\.\d+)", text)
    return found.group(1) if found else None


def headers_release(cuda_home):
    """'13.0' from CUDART_VERSION in the toolkit's cuda_runtime_api.h; None without it."""
    try:
        with open(os.path.join(cuda_home, "include", "cuda_runtime_api.h")) as header:
            found = re.search(r"#define\s+CUDART_VERSION\s+(\d+)", header.read())
    except OSError:
        return None
    if not found:
        return None
    number = int(found.group(1))
    return f"{number // 1000}.{number % 1000 // 10}"


def link_stub(work):
    """A link-time stand-in for the driver library, as NVIDIA's toolkit ships one in lib64/stubs:
    FlashInfer links every module with -lcuda, and a toolkit made of PyPI wheels has no stub. Its
    soname is the driver's (libcuda.so.1), so the module asks for the real driver when it loads."""
    folder = os.path.join(work, "stubs")
    os.makedirs(folder, exist_ok=True)
    source = os.path.join(folder, "stub.c")
    with open(source, "w") as out:
        out.write("/* edgevllm aot: link-time stand-in for libcuda.so.1 */\n")
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", source, "-o",
                    os.path.join(folder, "libcuda.so")], check=True)
    return folder


def toolchain(cuda_home, work, target_lib=None):
    """nvcc's and the headers' CUDA release, and the flags FlashInfer's knobs
    (FLASHINFER_EXTRA_CUDAFLAGS / _LDFLAGS) need to build with this toolkit. ``target_lib``: a
    cross build's folder of the target's CUDA libraries (``$CUDA_HOME/targets/<dir>/lib``, with
    its ``stubs/libcuda.so``: builder/cross/inimage_stage.py lays it out)."""
    found = {"cuda_home": os.path.realpath(cuda_home), "nvcc": nvcc_release(cuda_home),
             "headers": headers_release(cuda_home), "notes": []}
    if found["nvcc"] is None:
        fail(f"no nvcc under {cuda_home} (CUDA_HOME): the AOT step builds FlashInfer's modules "
             "with the image's CUDA compiler")
    if target_lib is not None:
        return cross_toolchain(found, target_lib)
    cuda_flags, ld_flags = [], []
    if found["headers"] and found["headers"] != found["nvcc"]:
        # CCCL refuses a compiler newer than the runtime headers (the closure's nvcc wheel can
        # be newer than its cuda-runtime wheel); the SASS is the compiler's either way.
        cuda_flags.append("-DCCCL_DISABLE_CTK_COMPATIBILITY_CHECK")
        found["notes"].append(f"nvcc {found['nvcc']} with CUDA {found['headers']} runtime "
                              "headers: CCCL's toolkit check off")
    lib = [d for d in ("lib64", "lib") if os.path.exists(os.path.join(cuda_home, d,
                                                                     "libcudart.so"))]
    if lib and lib[0] != "lib64":
        ld_flags.append(f"-L{os.path.join(cuda_home, lib[0])}")
    stubs = [os.path.join(cuda_home, d, "stubs") for d in ("lib64", "lib")]
    if not any(os.path.exists(os.path.join(s, "libcuda.so")) for s in stubs):
        ld_flags.append(f"-L{link_stub(work)}")
        found["notes"].append("no libcuda.so stub in the toolkit: linked against a stand-in "
                              "with the driver's soname")
    return found, cuda_flags, ld_flags


def cross_toolchain(found, target_lib):
    """A cross build: FlashInfer links each module with ``$CXX -L$cuda_home/lib64 -lcudart
    -lcuda``; the build platform's libraries there are skipped by the cross linker (another
    machine), so the target's folder and its driver stub come after them. nvcc's host compiler
    and target folder come from NVCC_PREPEND_FLAGS, the C++ compiler from CXX (the stage's ENV)."""
    stub = os.path.join(target_lib, "stubs", "libcuda.so")
    if not os.path.exists(os.path.join(target_lib, "libcudart.so")) or not os.path.exists(stub):
        fail(f"{target_lib}: no libcudart.so or stubs/libcuda.so: lay out the target's CUDA "
             "folder first (inimage_stage.py)")
    if not os.environ.get("CXX") or "-ccbin" not in os.environ.get("NVCC_PREPEND_FLAGS", ""):
        fail("a cross AOT build needs CXX (the cross g++) and NVCC_PREPEND_FLAGS with -ccbin")
    # FlashInfer adds -ccbin $CC where CC is set; nvcc takes the last -ccbin (with a warning),
    # so the C compiler would replace NVCC_PREPEND_FLAGS' C++ compiler as nvcc's host compiler.
    if os.environ.pop("CC", None):
        found["notes"].append("CC unset: NVCC_PREPEND_FLAGS names nvcc's host compiler")
    found["cross"] = {"cxx": os.environ["CXX"], "target_lib": target_lib,
                      "nvcc_prepend_flags": os.environ["NVCC_PREPEND_FLAGS"]}
    found["notes"].append(f"cross-built with {os.environ['CXX']} against {target_lib}")
    return found, [], [f"-L{target_lib}", f"-L{os.path.dirname(stub)}"]


ELF_MACHINES = {62: "x86_64", 183: "aarch64"}


def elf_machine(path):
    """The machine a library was built for (ELF e_machine, little-endian), as a name."""
    with open(path, "rb") as handle:
        head = handle.read(20)
    if head[:4] != b"\x7fELF":
        return None
    number = int.from_bytes(head[18:20], "little")
    return ELF_MACHINES.get(number, str(number))


def make_spec(module):
    """FlashInfer's own JitSpec for one plan entry (the functions its AOT build calls)."""
    import torch

    if module["kind"] == "sampling":
        from flashinfer.jit.sampling import gen_sampling_module
        return gen_sampling_module()
    if module["kind"] == "batch_prefill":
        from flashinfer.jit.attention.modules import _gen_batch_prefill_primary_module
        dtype_q, dtype_kv = getattr(torch, module["dtype_q"]), getattr(torch, module["dtype_kv"])
        return _gen_batch_prefill_primary_module(
            "fa2", dtype_q, dtype_kv, dtype_q, torch.int32, module["head_dim"],
            module["head_dim"], 0, module["sliding_window"], module["logits_soft_cap"], False)
    fail(f"plan: module kind {module['kind']!r} is not one this step builds")


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def install(built, dest):
    """Copy under a temporary name, then rename: a half-written library is never in place."""
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    partial = dest + ".partial"
    shutil.copyfile(built, partial)
    os.replace(partial, dest)


def build(plan, work, out=None):
    """Build every module of the plan in one ninja run into ``out`` (default: FlashInfer's AOT
    folder); returns the record."""
    from flashinfer.jit import env as jit_env
    from flashinfer.jit.core import build_jit_specs

    specs = []
    for module in plan["modules"]:
        spec = make_spec(module)
        if spec.name != module["name"]:
            fail(f"FlashInfer names the module {spec.name!r}, the plan {module['name']!r}: "
                 "the plan was made for another FlashInfer version")
        specs.append(spec)
    started = time.monotonic()
    build_jit_specs(specs, verbose=False, skip_prebuilt=False)
    seconds = round(time.monotonic() - started, 1)
    modules = []
    for spec in specs:
        dest = os.path.join(out or str(jit_env.FLASHINFER_AOT_DIR), spec.name, spec.name + ".so")
        install(str(spec.jit_library_path), dest)
        modules.append({"name": spec.name, "path": dest, "bytes": os.path.getsize(dest),
                        "sha256": sha256_of(dest), "machine": elf_machine(dest)})
    return {"modules": modules, "seconds": seconds}


def main(argv):
    parser = argparse.ArgumentParser(prog="edgevllm-aot")
    parser.add_argument("--plan", required=True)
    parser.add_argument("--record", required=True)
    parser.add_argument("--out", help="the folder the modules go to (default: FlashInfer's "
                        "AOT folder of this Python)")
    parser.add_argument("--target-lib", help="a cross build: the target's CUDA library folder "
                        "($CUDA_HOME/targets/<dir>/lib)")
    args = parser.parse_args(argv)
    with open(args.plan) as handle:
        plan = json.load(handle)
    arch_list = os.environ.get("FLASHINFER_CUDA_ARCH_LIST")
    if not arch_list:
        fail("FLASHINFER_CUDA_ARCH_LIST is not set: the arch to build for comes from the target")
    work = tempfile.mkdtemp(prefix="edgevllm-aot-")
    try:
        # FlashInfer reads these when it is imported: its workspace is the temporary folder.
        os.environ["FLASHINFER_WORKSPACE_BASE"] = work
        found, cuda_flags, ld_flags = toolchain(os.environ.get("CUDA_HOME", "/usr/local/cuda"),
                                                work, args.target_lib)
        for name, flags in (("FLASHINFER_EXTRA_CUDAFLAGS", cuda_flags),
                            ("FLASHINFER_EXTRA_LDFLAGS", ld_flags)):
            if flags:
                os.environ[name] = " ".join([os.environ.get(name, ""), *flags]).strip()
        record = build(plan, work, args.out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    import flashinfer

    record.update({"arch_list": arch_list, "flashinfer": flashinfer.__version__,
                   "toolchain": found, "config": plan.get("config", "")})
    for module in record["modules"]:
        print(f"edgevllm aot: {module['name']}: {module['bytes']} bytes, "
              f"sha256 {module['sha256'][:16]}")
    print(f"edgevllm aot: {len(record['modules'])} module(s) for {arch_list} in "
          f"{record['seconds']}s")
    os.makedirs(os.path.dirname(args.record), exist_ok=True)
    with open(args.record + ".partial", "w") as out:
        json.dump(record, out, indent=2, sort_keys=True)
    os.replace(args.record + ".partial", args.record)


if __name__ == "__main__":
    main(sys.argv[1:])
