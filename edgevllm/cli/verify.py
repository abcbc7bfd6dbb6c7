"""``inv verify``: which GPU architectures an image's CUDA libraries carry, judged for a target;
with ``--supply-chain``, the signed provenance check of ``inv verify-supply-chain`` too (first;
the arch gate follows where ``--target`` is given). The gate comes from the target and the
command line, or from ``--lock`` signed by ``--key``; never from the image's own label
(inspect/gate.py)."""

from __future__ import annotations

from edgevllm.cli._common import cli_task
from edgevllm.common.errors import ArchGateFailed, ConfigError


@cli_task(help={
    "target": "thor, spark, or an arch: sm_121a, 121a, 12.1a, sm_110",
    "image": "a local Docker image to scan (streamed through docker save)",
    "tarball": "a docker-save tarball (.tar, .tar.gz, .tar.zst) or a published .manifest.json",
    "path": "a folder, a .whl, one library or one .cubin to scan",
    "json": "also write the full verdict (every unit and kernel) as JSON to this file",
    "cuobjdump": "cross-check every library with NVIDIA cuobjdump; any disagreement fails",
    "policy": "policy YAML naming which libraries gate, and how (default: built in)",
    "diff": "compare two sources (images, tarballs, wheels, folders): --diff A,B",
    "max_library_size": "the most one library may hold, e.g. 8G (default 4G; "
                        "EDGEVLLM_MAX_LIBRARY_SIZE)",
    "supply_chain": "check signature, SBOM and image together (--image online, --tarball "
                    "X.manifest.json offline; as inv verify-supply-chain); with --target, "
                    "the arch gate after it",
    "key": "the signer's public key (or the private key file): --supply-chain's, or the one "
           "that signed --lock",
    "lock": "the image's lock file, its signed statement beside it (inv sign): with --key, the "
            "gate is this lock's (stock kernels, planned PTX); never the image's own label",
    "out": "--supply-chain: folder holding the SBOM and statement when there is no --lock or "
           "--tarball (default: .)",
    "name": "--supply-chain: their file name stem in --out (default: from the image tag)",
    "attached": "--supply-chain: check the signature and attestations the registry holds for "
                "--image HOST/REPO:TAG in cosign's layout (cosign sign/attest, inv push --attach)",
    "engine": "the engine --image is on: ssh://[user@]host[:port] or a docker context (default: "
              "this one); its layers are read through the link, never stored here",
}, iterable=["diff"])
def verify(c, target=None, image=None, tarball=None, path=None, json=None, cuobjdump=False,
           policy=None, diff=None, max_library_size=None, supply_chain=False, key=None,
           lock=None, out=None, name=None, engine=None, attached=False):
    """Gate: vLLM/FlashInfer/flash-attn/torch CUDA libraries must run on the target GPU."""
    supply_chain_only = {"--out": out, "--name": name, "--attached": attached}
    if supply_chain:
        gate_only = {"--json": json, "--cuobjdump": cuobjdump, "--policy": policy,
                     "--max-library-size": max_library_size}
        _refuse_with_supply_chain({"--path": path, "--diff": diff,
                                   **({} if target else gate_only)})
        from edgevllm.cli.inspect import check_supply_chain

        check_supply_chain("verify --supply-chain", image, tarball, key, lock, out, name,
                           attached)
        if not target:
            return None
    given = [flag for flag, value in supply_chain_only.items() if value]
    if given and not supply_chain:
        raise ConfigError(f"{', '.join(given)}: only with --supply-chain")
    if key and not lock and not supply_chain:
        raise ConfigError("--key: only with --supply-chain or --lock (the signed lock whose gate "
                          "to use)")
    if lock and not key:
        raise ConfigError("--lock needs --key (the signer's public key): a lock's gate is used "
                          "only once its signature checks")
    if not target:
        raise ConfigError("verify: --target required; see 'inv --help verify'")
    if max_library_size:
        _set_ceiling(str(max_library_size))
    if diff:
        return _diff(target, diff, policy)
    from edgevllm.containers.docker import DockerEngine
    from edgevllm.verify import print_verdict
    from edgevllm.verify import verify as run_verify

    on = DockerEngine.named(engine)
    gate = _gate(image, on, lock, key)
    verdict = run_verify(target, image=image, tarball=tarball, path=path,
                         policy=policy or gate.policy, cuobjdump=cuobjdump, json_out=json,
                         engine=on, planned=gate.planned)
    print_verdict(verdict)
    if not verdict.passed:
        raise ArchGateFailed(f"arch gate failed for {verdict.target}: {_why(verdict)}")


def _refuse_with_supply_chain(flags: dict) -> None:
    given = [flag for flag, value in flags.items() if value]
    if given:
        raise ConfigError(f"--supply-chain checks signature, SBOM and image of --image or "
                          f"--tarball; it takes no {', '.join(given)} (add --target ... for the "
                          "arch gate as well)")


def _set_ceiling(text: str) -> None:
    """The flag sets what every reader consults (edgevllm/verify/limits.py), checked first."""
    import os

    from edgevllm.verify.limits import SETTING, max_library_bytes

    previous = os.environ.get(SETTING)
    os.environ[SETTING] = text
    try:
        max_library_bytes()
    except ConfigError:
        if previous is None:
            del os.environ[SETTING]
        else:
            os.environ[SETTING] = previous
        raise ConfigError(f"--max-library-size '{text}': expected a size such as 4G, 512M or "
                          "1000000") from None


def _gate(image: str | None, engine, lock: str | None, key: str | None):
    """The gate (inspect/gate.py): the target's and the command line's, or the signed --lock's;
    what the image's own lock label asks beyond it is reported, never obeyed."""
    from edgevllm.common.errors import EdgeVllmError
    from edgevllm.inspect.gate import choose_gate, signed_lock

    found: dict = {}
    if image:
        try:
            found = engine.image_inspect(image)
        except EdgeVllmError:
            found = {}  # the scan itself reports a missing image
    image_labels = (found.get("Config") or {}).get("Labels") or {}
    signed = signed_lock(lock, key or "", found.get("Id")) if lock else None
    return choose_gate(image_labels if isinstance(image_labels, dict) else {}, signed,
                       f"--lock {lock}")


def _why(verdict) -> str:
    from edgevllm.verify.library import short_path

    failures = verdict.failures
    if not failures:
        return "; ".join(verdict.notes)
    if len(failures) == 1:
        lib = failures[0]
        return (f"{short_path(lib.report.path)}: {lib.note or lib.reason or lib.level} "
                "(see the table above)")
    return f"{len(failures)} libraries fall short (see the table above)"


def _diff(target, sources, policy) -> None:
    sources = [part for value in sources for part in str(value).split(",") if part]
    if len(sources) != 2:
        raise ConfigError("--diff takes two sources: --diff OLD --diff NEW")
    from edgevllm.verify.diff import diff_sources, print_diff

    print_diff(diff_sources(target, sources[0], sources[1], policy=policy))
