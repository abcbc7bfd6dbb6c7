"""Probe level 1 (no GPU): import the image's components and read what it was built with.

``inimage_check.py`` runs inside the image (fed to its ``python3`` on stdin, so it works on a
remote engine too) and reports facts as JSON; this module judges them against the target:
which components must import (data: the target's ``probe.required_imports``, or ``required``),
torch's CUDA version and compiled arch list, the mods record, the runtime env and the lock.

Its length: one judge per fact the in-image script reports, each read against the same target
and report; the facts are checked together (the lock names what the imports must show).
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
import time
import uuid
from importlib import resources
from typing import Any, Iterable

from edgevllm.common import labels
from edgevllm.common.errors import EngineError, ProbeError
from edgevllm.common.labels import label_record
from edgevllm.containers.docker import DockerEngine, RunOptions
from edgevllm.probe.result import ABSENT, FAIL, PASS, WARN, ProbeResult
from edgevllm.probe.target import DEFAULT_COMPONENTS, ProbeTarget, probe_target
from edgevllm.specs.lock import LOCK_IMAGE_PATH
from edgevllm.specs.outcomes import GOOD_OUTCOMES

MARKER = "@@EDGEVLLM-PROBE@@ "
PROBE_LABEL = labels.PROBE
MODS_RECORD = labels.MODS_RECORD
LOCK_FILE = LOCK_IMAGE_PATH  # written by the build (edgevllm/lock.py)
MODS_LABEL = labels.MODS_SELECTED  # the build's label: mods chosen for the image

# Where the first start's compiled code goes (read so the report can say which caches are set).
CACHE_ENV = ("CUDA_CACHE_PATH", "CUDA_CACHE_MAXSIZE", "CUDA_CACHE_DISABLE",
             "FLASHINFER_WORKSPACE_BASE", "TRITON_CACHE_DIR")
_NO_DRIVER = re.compile(r"libcuda\.so(\.\d+)*: cannot open shared object file")
_DRIVER_SYMBOL = re.compile(r"undefined symbol: (cu[A-Z]\w*)")


def check_script() -> bytes:
    """The in-image check script, shipped as a data file beside this module."""
    return resources.files(__package__).joinpath("inimage_check.py").read_bytes()


# -- running the script ---------------------------------------------------------------------------
def check_arguments(target: ProbeTarget, components: list[str],
                    import_timeout: int) -> list[str]:
    """The check script's command line (after ``-``): what it is asked to exercise."""
    command = ["-", "--target-arch", target.cuda_arch, "--mods-record", MODS_RECORD,
               "--lock", LOCK_FILE, "--import-timeout", str(import_timeout)]
    for component in components:
        command += ["--component", component]
    for key in sorted(set(target.runtime_env) | {"LD_PRELOAD"} | set(CACHE_ENV)):
        command += ["--env-key", key]
    return command


def collect_facts(engine: DockerEngine, image: str, target: ProbeTarget, components: list[str],
                  timeout: float, import_timeout: int, python: str = "python3",
                  name: str | None = None) -> dict[str, Any]:
    """Run the check script in a throw-away container (``name``: its name, to stop it from
    elsewhere) and return its JSON facts."""
    name = name or f"edgevllm-probe-l1-{uuid.uuid4().hex[:8]}"
    command = check_arguments(target, components, import_timeout)
    options = RunOptions(image=image, command=command, entrypoint=python, name=name,
                         remove=True, network="none", labels={PROBE_LABEL: "1"}, extra=["-i"])
    try:
        proc = engine.run(options, timeout=timeout, input=check_script())
    finally:  # --rm does not cover a docker client killed by a timeout or Ctrl-C
        engine.remove_container(name)
    stdout = proc.stdout.decode(errors="replace")
    for line in stdout.splitlines():
        if line.startswith(MARKER):
            return json.loads(line[len(MARKER):])
    tail = (proc.stderr.decode(errors="replace").strip().splitlines() or ["(no output)"])[-5:]
    raise ProbeError(f"the level-1 check script did not run in {image} (exit {proc.returncode}): "
                     f"{' | '.join(tail)}; the image needs {python} on its PATH")


# -- judging ---------------------------------------------------------------------------------------
def arch_coverage(target_arch: str, arch_list: Iterable[str]) -> tuple[str, list[str]]:
    """How ``arch_list`` covers the target (``12.1a``): native, compatible, ptx or none, and the
    arches reaching that level. The rules are ``edgevllm.specs.cuda``'s (the one owner)."""
    from edgevllm.specs.cuda import arch_list_coverage, parse_device

    found, matched = arch_list_coverage(parse_device(target_arch), arch_list)
    return ("ptx" if found == "ptx-jit" else found), matched


def classify_load_error(error: str, ld_preload: str | None) -> tuple[str, str, str | None]:
    """(status, message, remedy) for an import/dlopen error text."""
    if _NO_DRIVER.search(error):
        return WARN, "needs the GPU driver (expected off-device)", None
    symbol = _DRIVER_SYMBOL.search(error)
    if symbol and ld_preload and "libcuda" in ld_preload:
        return WARN, f"driver symbol {symbol.group(1)} resolved on the device via LD_PRELOAD", None
    if symbol:
        return FAIL, f"undefined driver symbol {symbol.group(1)}", (
            "set LD_PRELOAD=/usr/lib/aarch64-linux-gnu/nvidia/libcuda.so.1 in the target's "
            "runtime_env (Thor) so libcuda is loaded before vLLM's extensions")
    return FAIL, error.strip().splitlines()[-1][:300], None


def judge_imports(result: ProbeResult, facts: dict, required: set[str]) -> None:
    ld_preload = facts.get("env", {}).get("LD_PRELOAD")
    for name, info in facts.get("imports", {}).items():
        need = name in required
        where = {k: info.get(k) for k in ("version", "file") if info.get(k)}
        if info.get("ok"):
            label = f"{name} {info.get('version') or ''}".strip()
            result.add(f"import:{name}", PASS, label, **where)
        elif info.get("missing"):
            if need:
                result.add(f"import:{name}", FAIL, f"required component {name} is not installed",
                           f"install {name} in the image, or drop it from the target's "
                           "probe.required_imports")
            else:
                result.add(f"import:{name}", ABSENT, f"optional component {name} is not installed")
        else:
            status, message, remedy = classify_load_error(info.get("error", ""), ld_preload)
            if status == FAIL and not need:
                status = WARN
            result.add(f"import:{name}", status, f"import {name}: {message}", remedy,
                       error=info.get("error"))


def judge_extensions(result: ProbeResult, facts: dict, required: set[str]) -> None:
    ext = facts.get("vllm_extensions")
    if ext is None or ext.get("dir") is None:
        return  # vLLM itself is reported missing by its import check
    ld_preload = facts.get("env", {}).get("LD_PRELOAD")
    items = ext.get("items", [])
    if not items:
        status = FAIL if "vllm" in required else WARN
        result.add("vllm-extensions", status,
                   f"no compiled extensions (*.so) under {ext['dir']}: vLLM without its kernels",
                   "build vLLM from source for the target (not a pure-Python or CPU wheel)")
        return
    for item in items:
        check_id = f"vllm-ext:{item['path']}"
        if item.get("ok"):
            result.add(check_id, PASS, f"loads ({item.get('kind')})")
            continue
        status, message, remedy = classify_load_error(item.get("error", ""), ld_preload)
        result.add(check_id, status, message, remedy, error=item.get("error"))


def judge_torch(result: ProbeResult, facts: dict, target: ProbeTarget) -> None:
    torch = facts.get("torch")
    if torch is None:
        return  # torch absent or not importable: its import check says so
    if "error" in torch:
        result.add("torch-cuda", FAIL, f"reading torch's CUDA build: {torch['error']}")
        return
    result.facts["torch"] = torch
    if not torch.get("cuda"):
        result.add("torch-cuda", FAIL, f"torch {torch.get('version')} is a CPU-only build",
                   "install torch from the CUDA 13 index (download.pytorch.org/whl/cu130)")
        return
    want = (target.cuda_version or "").split(".")[0]
    if want and str(torch["cuda"]).split(".")[0] != want:
        result.add("torch-cuda", FAIL, f"torch {torch.get('version')} is built for CUDA "
                   f"{torch['cuda']}, the target runs CUDA {target.cuda_version}",
                   f"install torch from the CUDA {want} index (e.g. "
                   f"download.pytorch.org/whl/cu{want}0)")
        return
    result.add("torch-cuda", PASS, f"torch {torch.get('version')} built for CUDA {torch['cuda']}")
    coverage, matched = arch_coverage(target.cuda_arch, torch.get("arch_list", []))
    arches = " ".join(torch.get("arch_list", [])) or "(empty)"
    if coverage in ("native", "compatible"):
        result.add("torch-arch", PASS, f"{coverage} code for {target.cuda_arch}: "
                   f"{' '.join(matched)}", arch_list=torch.get("arch_list"))
    elif coverage == "ptx":
        result.add("torch-arch", WARN, f"only PTX for {target.cuda_arch} ({' '.join(matched)}): "
                   "JIT-compiled at start-up", "use a torch build with SASS for the target",
                   arch_list=torch.get("arch_list"))
    else:
        result.add("torch-arch", FAIL, f"torch's arch list does not cover {target.cuda_arch}: "
                   f"{arches}", f"use a torch build whose TORCH_CUDA_ARCH_LIST includes "
                   f"{target.cuda_arch} or a compatible arch", arch_list=torch.get("arch_list"))


def judge_cudart(result: ProbeResult, facts: dict, required: set[str]) -> None:
    cudart = facts.get("cudart")
    if cudart is None:
        return
    if cudart.get("ok"):
        result.add("fastsafetensors-cudart", PASS, f"{cudart['name']} loads")
        return
    status = FAIL if "fastsafetensors" in required else WARN
    result.add("fastsafetensors-cudart", status,
               f"fastsafetensors cannot dlopen {cudart['name']} (GPU runtime library not found)",
               "add a libcudart.so link to libcudart.so.13, or set FASTSAFETENSORS_CUDART_LIB")


def mod_records(data: Any) -> list[tuple[str, str]]:
    """(name, outcome) pairs from the mods record, whichever of its accepted shapes it has."""
    if isinstance(data, dict) and "mods" in data:
        data = data["mods"]
    if isinstance(data, dict):
        data = [dict(v, name=k) if isinstance(v, dict) else {"name": k, "outcome": v}
                for k, v in data.items()]
    pairs = []
    for record in data if isinstance(data, list) else []:
        if not isinstance(record, dict):
            continue
        name = record.get("name") or record.get("id") or "?"
        outcome = record.get("outcome") or record.get("status") or record.get("result") or ""
        pairs.append((str(name), str(outcome).strip().lower().replace("_", "-").replace(" ", "-")))
    return pairs


def selected_mods(labels: dict[str, str]) -> list[str] | None:
    """The mods the build selected (its label), or None when the image does not say."""
    if MODS_LABEL not in labels:
        return None
    return [m.strip() for m in labels[MODS_LABEL].split(",") if m.strip()]


def judge_mods(result: ProbeResult, facts: dict, labels: dict[str, str]) -> None:
    record = facts.get("mods_record", {})
    selected = selected_mods(labels)
    rebuild = "rebuild the image with 'inv build' (it writes the record)"
    if not record.get("exists"):
        if selected == []:  # the build writes no record when it selected no mod
            result.add("mods-record", PASS, f"no mods selected ({MODS_LABEL} is empty)")
        else:
            result.add("mods-record", FAIL, f"no mods record at {MODS_RECORD}", rebuild)
        return
    if not record.get("valid"):
        result.add("mods-record", FAIL, f"{MODS_RECORD} is not JSON: {record.get('error')}",
                   rebuild)
        return
    pairs = mod_records(record.get("data"))
    bad = [f"{name}={outcome or '?'}" for name, outcome in pairs if outcome not in GOOD_OUTCOMES]
    outcomes = dict(pairs)
    bad += [f"{name}=not-recorded" for name in selected or [] if name not in outcomes]
    if bad:
        result.add("mods-record", FAIL, f"mods not applied: {', '.join(bad)}",
                   "fix the mod (inv mods) and rebuild; a failed mod means an unpatched image",
                   outcomes=outcomes)
    else:
        result.add("mods-record", PASS, f"{len(pairs)} mods recorded, none failed",
                   outcomes=outcomes)


def judge_env(result: ProbeResult, facts: dict, expected_env: dict[str, str]) -> None:
    seen = facts.get("env", {})
    problems = []
    for key, expected in sorted(expected_env.items()):
        actual = seen.get(key)
        if actual is None:
            problems.append(f"{key} unset (want {expected!r})")
        elif actual != str(expected):
            problems.append(f"{key}={actual!r} (want {expected!r})")
    if problems:
        result.add("runtime-env", FAIL, "; ".join(problems),
                   "rebuild: the target's runtime_env must be the image's ENV")
    else:
        result.add("runtime-env", PASS, f"{len(expected_env)} variables as the target sets")


def judge_jit(result: ProbeResult, facts: dict, image_labels: dict[str, str]) -> None:
    """FlashInfer compiles kernels at run time (no flashinfer-cubin for these devices): nvcc,
    a host compiler and ninja must be there, and nvcc must build for the target. An image that
    cannot serve a model (a partial kernel build, its label says so) is only warned."""
    jit = facts.get("jit")
    if jit is None:
        return
    level = FAIL if labels.serves(image_labels) else WARN
    why = "" if level == FAIL else (" (a partial kernel build that cannot serve a model: "
                                    "not a failure)")
    missing = [name for name in ("nvcc", "cxx", "ninja") if not jit.get(name)]
    if missing:
        result.add("flashinfer-jit", level, f"FlashInfer's JIT lacks {', '.join(missing)}: give "
                   "the image CUDA_HOME with nvcc (the nvidia-cuda-nvcc wheel), g++ and ninja"
                   + why)
    elif not jit.get("compiled"):
        result.add("flashinfer-jit", level, f"{jit['nvcc']} cannot build for {jit.get('arch')}: "
                   f"{jit.get('error')}" + why)
    else:
        result.add("flashinfer-jit", PASS, f"{jit['nvcc']} builds {jit['arch']} (ninja "
                   f"{jit['ninja']}, TRITON_PTXAS_PATH {jit.get('triton_ptxas') or 'unset'})")


def judge_lock(result: ProbeResult, facts: dict) -> None:
    lock = facts.get("lock", {})
    if not lock.get("exists"):
        result.add("lock", WARN, f"no lock at {LOCK_FILE}: the image cannot be rebuilt exactly",
                   "build with 'inv build', which records the resolved refs")
    elif not lock.get("valid"):
        result.add("lock", FAIL, f"{LOCK_FILE} is not JSON: {lock.get('error')}")
    else:
        result.add("lock", PASS, f"lock present ({LOCK_FILE})")


def recorded_first_start(labels: dict[str, str]) -> dict | None:
    """The first-start record verify left in the image's label, if any."""
    verify = label_record(labels, "verify")
    record = verify.get("first_start") if isinstance(verify, dict) else None
    return record if isinstance(record, dict) else None


def judge_first_start(result: ProbeResult, facts: dict, record: dict | None) -> None:
    """What the first start compiles: the PTX-only units verify measured (its record), and
    FlashInfer's kernels as the image holds them (packages, modules already in its JIT cache).
    Information, never a failure: a first start that compiles still starts."""
    from edgevllm.verify.firststart import human_bytes

    parts = []
    if record is None:
        parts.append("PTX-only units not measured (no verify record: inv verify --image IMG)")
    else:
        parts.append(f"{record.get('ptx_units', 0)} PTX-only units "
                     f"({human_bytes(record.get('ptx_bytes', 0))} PTX) for the driver's JIT")
    kernels = facts.get("flashinfer_kernels")
    fi_state = None
    if kernels is not None:
        packages = kernels.get("packages", {})
        prebuilt = [f"{name} {version}" for name, version in sorted(packages.items())
                    if version and name != "flashinfer-python"]
        fi_state = (record or {}).get("flashinfer") or ("jit" if not prebuilt else "not judged")
        cached = kernels.get("jit_cache_modules", 0)
        warmed = len(kernels.get("aot_modules") or [])
        built_in = f"; {warmed} modules built in by --aot" if warmed else ""
        parts.append(f"FlashInfer {fi_state} ({', '.join(prebuilt) or 'no prebuilt packages'}; "
                     f"{cached} modules already in its JIT cache{built_in})")
    env = facts.get("env", {})
    set_here = [f"{key}={env[key]}" for key in CACHE_ENV if env.get(key)]
    parts.append("cache env: " + (", ".join(set_here) or "none set in the image (inv serve "
                                  "sets the compute cache per image)"))
    result.facts["first_start"] = {"record": record, "flashinfer": kernels,
                                   "flashinfer_state": fi_state}
    result.add("first-start", PASS, "; ".join(parts))


# -- entry point ---------------------------------------------------------------------------------
LEVEL1_TIMEOUT_S = 1800.0  # image pull aside, importing vLLM and friends takes minutes at most


def probe_level1(engine: DockerEngine, image: str, target: Any,
                 required: Iterable[str] | None = None, timeout: float = LEVEL1_TIMEOUT_S,
                 import_timeout: int = 600, runtime_env: dict[str, str] | None = None,
                 python: str = "python3", first_start: dict | None = None) -> ProbeResult:
    """Level-1 probe of ``image`` for ``target`` (a name, target object or ``ProbeTarget``).

    ``required``: the components that must import (default: the target's
    ``probe.required_imports``); the others of vllm/torch/flashinfer/cutlass/fastsafetensors are
    probed as optional and reported ``absent`` when missing. ``runtime_env``: the environment the
    image must have (default: the target's ``runtime_env``; pass the build's effective env when a
    spec overrides it). ``python``: the image's interpreter (the one vLLM is installed for).
    ``first_start``: verify's first-start record (``FirstStart.compact``) when the caller has
    it (a build, before the labels are written); else the image's verify label is read.
    """
    pending = Level1Run(engine, image, target, required=required, timeout=timeout,
                        import_timeout=import_timeout, runtime_env=runtime_env, python=python)
    return pending.result(first_start)


class Level1Run:
    """Probe level 1 under way: its container runs in a thread from here on, so the caller can
    do other work meanwhile (the build's tail reads the image's layers for verify); ``result``
    waits for it and judges, ``cancel`` stops it. The same arguments as ``probe_level1``."""

    def __init__(self, engine: DockerEngine, image: str, target: Any,
                 required: Iterable[str] | None = None, timeout: float = LEVEL1_TIMEOUT_S,
                 import_timeout: int = 600, runtime_env: dict[str, str] | None = None,
                 python: str = "python3"):
        target = probe_target(target)
        if runtime_env is not None:
            target = dataclasses.replace(target, runtime_env=dict(runtime_env))
        self.engine, self.image, self.target = engine, image, target
        self.need = set(target.required_imports if required is None else required)
        components = list(dict.fromkeys([*DEFAULT_COMPONENTS, *sorted(self.need)]))
        self.inspect = engine.image_inspect(image)  # a missing image fails here, at once
        self.name = f"edgevllm-probe-l1-{uuid.uuid4().hex[:8]}"
        self.started = time.monotonic()
        self.facts: dict[str, Any] | None = None
        self.error: BaseException | None = None
        self.cache, self.key = cached_facts_key(engine, self.inspect, [
            python, *check_arguments(target, components, import_timeout)])
        self.facts = self.cache.get(self.key) if self.cache and self.key else None
        self.from_cache = self.facts is not None
        self._thread = threading.Thread(
            target=self._collect, args=(components, timeout, import_timeout, python),
            name=self.name, daemon=True)
        if not self.from_cache:
            self._thread.start()

    def _collect(self, components: list[str], timeout: float, import_timeout: int,
                 python: str) -> None:
        try:
            self.facts = collect_facts(self.engine, self.image, self.target, components,
                                       timeout, import_timeout, python, name=self.name)
        except BaseException as exc:  # handed to the caller's thread by ``result``
            self.error = exc
            return
        if self.cache is not None and self.key is not None:
            self.cache.put(self.key, self.facts)

    def cancel(self) -> None:
        """Stop the probe's container (the caller failed or was interrupted meanwhile)."""
        if self._thread.is_alive():
            self.engine.remove_container(self.name)
            self._thread.join(timeout=60)

    def result(self, first_start: dict | None = None) -> ProbeResult:
        """Wait for the container, then judge its facts (``first_start``: as ``probe_level1``)."""
        try:
            while self._thread.is_alive():
                self._thread.join(timeout=0.5)  # a join with a timeout: Ctrl-C gets through
        except BaseException:
            self.cancel()
            raise
        result = ProbeResult(image=self.image, target=self.target.name, level=1)
        result.facts["image_id"] = self.inspect.get("Id")
        result.facts["from_cache"] = self.from_cache
        if isinstance(self.error, EngineError):  # a timeout or a daemon failure: a failed probe
            result.add("probe-run", FAIL, str(self.error))
        elif self.error is not None:
            raise self.error
        else:
            judge_all(result, self.facts or {}, self.need, self.target,
                      self.inspect.get("Config", {}).get("Labels") or {}, first_start)
        result.duration_s = round(time.monotonic() - self.started, 1)
        return result


def cached_facts_key(engine: DockerEngine, inspected: dict, arguments: list[str]):
    """(the probe cache, this probe's key in it), or (None, None) when the cache is off or the
    engine names no layers (``probe/factcache.py`` says what the key holds and why)."""
    from edgevllm.probe.factcache import FactCache, fact_key

    cache = FactCache.configured()
    if cache is None:
        return None, None
    emulator = ""
    arch = str(inspected.get("Architecture") or "")
    if engine.describe() == "default" and arch:
        from edgevllm.containers.host import emulator_version, host_arch

        if arch != host_arch():
            emulator = str(emulator_version(f"linux/{arch}") or "unknown")
    return cache, fact_key(inspected, engine.describe(), check_script(), arguments, emulator)


def judge_all(result: ProbeResult, facts: dict, need: set[str], target: ProbeTarget,
              labels: dict[str, str], first_start: dict | None) -> None:
    result.facts["python"] = facts.get("python")
    judge_imports(result, facts, need)
    judge_extensions(result, facts, need)
    judge_torch(result, facts, target)
    judge_cudart(result, facts, need)
    judge_mods(result, facts, labels)
    judge_env(result, facts, target.runtime_env)
    judge_lock(result, facts)
    judge_jit(result, facts, labels)
    judge_first_start(result, facts, first_start or recorded_first_start(labels))
