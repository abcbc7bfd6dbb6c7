"""edgevllm probe, level 1: runs INSIDE the image under test and prints what it finds as JSON.

Standard library only, Python >= 3.8, no edgevllm import: the host feeds this file to the image's
``python3`` on stdin. It collects facts and judges nothing; the host (edgevllm/probe/level1.py)
decides what passes. Each import runs in a forked child, so a component that segfaults or hangs
is reported as such and the other checks still run. Only the environment variables named with
--env-key are read, so no other variable (a token) reaches the output.
"""

import argparse
import importlib
import json
import os
import signal
import sys
import traceback

MARKER = "@@EDGEVLLM-PROBE@@ "
MAX_ERROR = 2000


def error_text(exc):
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return text[-MAX_ERROR:]


def run_child(work, timeout):
    """Run ``work(emit)`` in a forked child; return (emitted objects, why it died or None)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: keep stdout clean for the result, library chatter goes to stderr
        os.close(read_fd)
        os.dup2(2, 1)
        out = os.fdopen(write_fd, "w")

        def emit(obj):
            out.write(json.dumps(obj, default=str) + "\n")
            out.flush()

        code = 0
        try:
            signal.alarm(timeout)
            work(emit)
        except BaseException as exc:  # noqa: BLE001 - everything is a finding here
            emit({"child_error": error_text(exc)})
            code = 1
        out.close()
        os._exit(code)
    os.close(write_fd)
    with os.fdopen(read_fd) as handle:
        lines = handle.read().splitlines()
    _, status = os.waitpid(pid, 0)
    died = None
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        died = ("timed out after %ds" % timeout if sig == signal.SIGALRM
                else "killed by %s" % signal.Signals(sig).name)
    return [json.loads(line) for line in lines if line.strip()], died


def distribution_version(module_name, module):
    version = getattr(module, "__version__", None)
    if version:
        return str(version)
    try:
        from importlib import metadata
        dists = metadata.packages_distributions().get(module_name, [])
        return metadata.version(dists[0]) if dists else None
    except Exception:  # noqa: BLE001 - metadata is best effort
        return None


def check_import(name, timeout):
    def work(emit):
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            missing = exc.name is not None and name.split(".")[0] == exc.name.split(".")[0] \
                and name.startswith(exc.name)
            emit({"ok": False, "missing": missing, "error": error_text(exc)})
            return
        except BaseException as exc:  # noqa: BLE001
            emit({"ok": False, "missing": False, "error": error_text(exc)})
            return
        emit({"ok": True, "missing": False, "version": distribution_version(name, module),
              "file": getattr(module, "__file__", None)})

    found, died = run_child(work, timeout)
    if died:
        return {"ok": False, "missing": False, "error": "import " + died}
    if found and "child_error" not in found[-1]:
        return found[-1]
    error = found[-1]["child_error"] if found else "no output"
    return {"ok": False, "missing": False, "error": error}


def torch_facts(timeout):
    def work(emit):
        import torch
        facts = {"version": torch.__version__, "cuda": torch.version.cuda}
        # get_arch_list() is empty without a GPU; the compiled flags are there regardless.
        flags = None
        getter = getattr(torch._C, "_cuda_getArchFlags", None)
        if getter is not None:
            flags = getter()
        if flags:
            facts["arch_list"] = str(flags).split()
            facts["arch_source"] = "torch._C._cuda_getArchFlags"
        else:
            facts["arch_list"] = list(torch.cuda.get_arch_list())
            facts["arch_source"] = "torch.cuda.get_arch_list"
        try:
            facts["cuda_available"] = bool(torch.cuda.is_available())
        except Exception as exc:  # noqa: BLE001
            facts["cuda_available"] = "error: " + error_text(exc)
        emit(facts)

    found, died = run_child(work, timeout)
    if died:
        return {"error": "torch " + died}
    if not found or "child_error" in found[-1]:
        return {"error": found[-1]["child_error"] if found else "no output"}
    return found[-1]


def package_dir(name):
    import importlib.util
    try:
        spec = importlib.util.find_spec(name)
    except Exception:  # noqa: BLE001 - a broken parent package
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def shared_objects(root):
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".so") or ".so." in name:
                found.append(os.path.join(folder, name))
    return found


def load_one(path, root, package):
    """Load one shared object the way Python would: as an extension module when it is one."""
    import importlib.util
    base = os.path.basename(path)
    stem = base.split(".")[0]
    if stem.isidentifier() and not base.startswith("lib"):
        rel = os.path.relpath(os.path.dirname(path), root)
        parts = [package] + ([] if rel == "." else rel.split(os.sep)) + [stem]
        spec = importlib.util.spec_from_file_location(".".join(parts), path)
        if spec is None or spec.loader is None:
            raise ImportError(f"{path}: Python finds no module loader for it")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return "extension"
    import ctypes
    ctypes.CDLL(path, mode=os.RTLD_LAZY)
    return "library"


def extension_facts(package, timeout):
    root = package_dir(package)
    if root is None:
        return {"dir": None, "items": []}
    paths = shared_objects(root)
    items = []
    start = 0
    while start < len(paths):
        def work(emit, first=start):
            try:  # the extensions link against torch's libraries: load them first, as vLLM does
                importlib.import_module("torch")
            except Exception:  # noqa: BLE001 - reported by the torch check
                pass
            for index in range(first, len(paths)):
                emit({"start": index})
                try:
                    kind = load_one(paths[index], root, package)
                    emit({"index": index, "ok": True, "kind": kind})
                except BaseException as exc:  # noqa: BLE001
                    emit({"index": index, "ok": False, "error": error_text(exc)})

        found, died = run_child(work, timeout)
        done = {o["index"]: o for o in found if "index" in o}
        started = [o["start"] for o in found if "start" in o]
        for index in range(start, len(paths)):
            if index in done:
                items.append(dict(done[index], path=os.path.relpath(paths[index], root)))
        last = started[-1] if started else start
        if died or (found and "child_error" in found[-1]) or last not in done:
            why = died or (found[-1].get("child_error") if found else "no output")
            items.append({"index": last, "path": os.path.relpath(paths[last], root),
                          "ok": False, "error": "loading " + str(why)})
            start = last + 1
        else:
            start = len(paths)
    for item in items:
        item.pop("index", None)
    return {"dir": root, "items": items}


def dlopen_facts(name):
    """Whether ``name`` loads by that exact name (fastsafetensors dlopens libcudart.so)."""
    import ctypes
    try:
        ctypes.CDLL(name, mode=os.RTLD_LAZY)
        return {"name": name, "ok": True}
    except OSError as exc:
        return {"name": name, "ok": False, "error": error_text(exc)}


def json_file(path, keep_data):
    facts = {"path": path, "exists": os.path.isfile(path)}
    if not facts["exists"]:
        return facts
    try:
        with open(path) as handle:
            data = json.load(handle)
        facts["valid"] = True
        if keep_data:
            facts["data"] = data
        elif isinstance(data, dict):
            facts["keys"] = sorted(data)[:50]
    except Exception as exc:  # noqa: BLE001
        facts["valid"] = False
        facts["error"] = error_text(exc)
    return facts


def has_module(name):
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


JIT_KERNEL = "__global__ void edgevllm_probe(float* x) { x[0] = 1.0f; }\n"


def jit_facts(target_arch, timeout):
    """FlashInfer's JIT toolchain as FlashInfer looks for it: nvcc under CUDA_HOME (else
    /usr/local/cuda, else PATH), a host compiler, ninja; one kernel built for the target."""
    import shutil
    import subprocess
    import tempfile
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    under_home = os.path.join(home, "bin", "nvcc")
    nvcc = under_home if os.access(under_home, os.X_OK) else shutil.which("nvcc")
    facts: dict[str, object] = {"nvcc": nvcc, "ninja": shutil.which("ninja"),
             "cxx": shutil.which("c++") or shutil.which("g++"),
             "triton_ptxas": os.environ.get("TRITON_PTXAS_PATH")}
    arch = "sm_" + target_arch.replace(".", "")
    if not nvcc or not target_arch:
        return facts
    work = tempfile.mkdtemp(prefix="edgevllm-jit-")
    src = os.path.join(work, "k.cu")
    with open(src, "w") as handle:
        handle.write(JIT_KERNEL)
    try:
        proc = subprocess.run([nvcc, "-arch=" + arch, "-cubin", src, "-o",
                               os.path.join(work, "k.cubin")], capture_output=True, text=True,
                              timeout=timeout)
        facts["compiled"] = proc.returncode == 0
        facts["error"] = (proc.stderr.strip().splitlines() or [""])[-1][-MAX_ERROR:]
    except (OSError, subprocess.TimeoutExpired) as exc:
        facts["compiled"], facts["error"] = False, error_text(exc)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    facts["arch"] = arch
    return facts


FLASHINFER_PACKAGES = ("flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache")


def flashinfer_kernel_facts():
    """FlashInfer's prebuilt-kernel packages (their versions) and the modules already compiled
    into its JIT cache (``$FLASHINFER_WORKSPACE_BASE`` or ``~``, then ``.cache/flashinfer``)."""
    from importlib import metadata
    versions = {}  # type: dict
    for name in FLASHINFER_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except Exception:  # noqa: BLE001 - not installed
            versions[name] = None
    base = os.environ.get("FLASHINFER_WORKSPACE_BASE") or os.path.expanduser("~")
    cache = os.path.join(base, ".cache", "flashinfer")
    modules = 0
    for _folder, _dirs, files in os.walk(cache):
        modules += sum(1 for name in files if name.endswith(".so"))
    # FlashInfer's AOT folder (inv build --aot fills it): loaded before any JIT.
    aot = []  # type: list
    folder = os.path.join(package_dir("flashinfer") or "/nonexistent", "data", "aot")
    if os.path.isdir(folder):
        aot = sorted(name for name in os.listdir(folder)
                     if os.path.isfile(os.path.join(folder, name, name + ".so")))
    return {"packages": versions, "jit_cache": cache, "jit_cache_modules": modules,
            "aot_modules": aot}


def main(argv):
    parser = argparse.ArgumentParser(prog="edgevllm-probe")
    parser.add_argument("--component", action="append", default=[])
    parser.add_argument("--target-arch", default="")
    parser.add_argument("--env-key", action="append", default=[])
    parser.add_argument("--mods-record", default="/opt/edgevllm/mods.json")
    parser.add_argument("--lock", default="/opt/edgevllm/edgevllm.lock.json")
    parser.add_argument("--import-timeout", type=int, default=300)
    args = parser.parse_args(argv)
    import platform
    facts = {
        "target_arch": args.target_arch,
        "python": {"version": platform.python_version(), "executable": sys.executable,
                   "machine": platform.machine()},
        "imports": {name: check_import(name, args.import_timeout) for name in args.component},
        "env": {key: os.environ.get(key) for key in args.env_key},
        "mods_record": json_file(args.mods_record, keep_data=True),
        "lock": json_file(args.lock, keep_data=False),
    }
    if "torch" in args.component and facts["imports"]["torch"].get("ok"):
        facts["torch"] = torch_facts(args.import_timeout)
    if facts["imports"].get("fastsafetensors", {}).get("ok"):
        cudart = os.environ.get("FASTSAFETENSORS_CUDART_LIB") or "libcudart.so"
        facts["cudart"] = dlopen_facts(cudart)
    if facts["imports"].get("flashinfer", {}).get("ok") and has_module("flashinfer.jit"):
        # FlashInfer compiles its kernels at run time (flashinfer.jit); a build without a JIT
        # (a stand-in, or one that ships every kernel) needs no toolchain in the image.
        facts["jit"] = jit_facts(args.target_arch, args.import_timeout)
    if facts["imports"].get("flashinfer", {}).get("ok"):
        facts["flashinfer_kernels"] = flashinfer_kernel_facts()
    if "vllm" in args.component:
        facts["vllm_extensions"] = extension_facts("vllm", args.import_timeout)
    sys.stdout.write(MARKER + json.dumps(facts, default=str) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
