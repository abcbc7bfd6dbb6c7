"""``inv diff``, ``inv sbom``, ``inv sign``, ``inv keygen``, ``inv verify-supply-chain``: what is
inside an image, what changed between two, and where an image came from (docs/inside.md)."""

from __future__ import annotations

import json as _json
from pathlib import Path

from edgevllm.cli._common import cli_task
from edgevllm.common.dataload import load_json
from edgevllm.common.errors import ConfigError

_TARGET_HELP = {
    "image": "a local image (tag or id)",
    "tarball": "a published set's <name>.manifest.json (read offline)",
    "lock": "the image's lock file: the files are written beside it (X.lock.json → X.sbom…)",
    "out": "folder for the files when there is no --lock or --tarball (default: .)",
    "name": "file name stem in --out (default: from the image tag)",
}


@cli_task(help={
    "old": "an image, a published <name>.manifest.json, or a lock file",
    "new": "the same kinds, in any pairing",
    "json": "print the diff as JSON (for tools) instead of markdown",
    "installed": "also compare installed Python distributions (a short python3 run in each "
                 "image; a published set's SBOM beside its manifest)",
    "bench": "bench records of the two (inv bench --out): --bench OLD.json,NEW.json (or the "
             "flag twice); median and roofline deltas",
}, positional=["old", "new"], iterable=["bench"])
def diff(c, old, new, json=False, installed=False, bench=None):
    """What changed between two images, published sets or locks (no docker save)."""
    from edgevllm.common.kv import split_csv
    from edgevllm.containers.docker import DockerEngine
    from edgevllm.inspect.diff import compare, markdown
    from edgevllm.inspect.facts import read_facts

    engine = DockerEngine()
    sides = [read_facts(text, engine) for text in (old, new)]
    extra = {}
    if installed:
        found = [_installed(engine, side) for side in sides]
        extra["installed"] = (found[0], found[1])
    if bench:
        paths = split_csv(bench)
        if len(paths) != 2:
            raise ConfigError("--bench takes two records: --bench OLD.json,NEW.json")
        records = [_bench_medians(Path(p)) for p in paths]
        extra["bench"] = (records[0], records[1])
    result = compare(sides[0], sides[1], extra)
    print(_json.dumps(result, indent=1, default=str) if json else markdown(result), end="\n"
          if json else "")


def _installed(engine, side) -> dict | None:
    from edgevllm.inspect import provenance, sbom

    if side.kind == "image":
        dists = sbom.installed_distributions(engine, side.source)
    elif side.kind == "tarball":
        path, _ = provenance.artefact_paths(provenance.stem_of(Path(side.source)))
        if not path.is_file():
            return None
        dists = list(sbom.sbom_dists(sbom.parse_sbom(path.read_text(), str(path))).values())
    else:
        return None
    return {d["name"]: {"version": d["version"], "record_sha256": (d["record_sha256"] or "")[:12]}
            for d in dists}


def _bench_medians(path: Path) -> dict:
    try:
        record = load_json(path.read_bytes(), str(path), ConfigError)
        found = {}
        for point in record.get("points", []):
            key = f"c{point['concurrency']} in{point['input_len']} out{point['output_len']}"
            for metric, stats in (point.get("summary") or {}).items():
                if isinstance(stats, dict) and "median" in stats:
                    found[f"{key} {metric}"] = round(stats["median"], 2)
        roof = (record.get("roofline") or {}).get("ceiling_tok_s")
        if roof is not None:
            found["roofline ceiling_tok_s"] = roof
        return found
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise ConfigError(f"--bench {path}: not a bench record (inv bench --out writes one)") \
            from None


def _stem(image, tarball, lock, out, name) -> Path:
    from edgevllm.inspect.provenance import image_stem, stem_of

    if bool(image) == bool(tarball):
        raise ConfigError("give exactly one of --image and --tarball")
    if tarball:
        return stem_of(Path(tarball))
    if lock:
        return stem_of(Path(lock))
    folder = Path(out or ".")  # made by the atomic write, once there is something to write
    return folder / name if name else image_stem(folder, image)


def _view(image, tarball):
    from edgevllm.containers.docker import DockerEngine
    from edgevllm.inspect.supplychain import view_of_image, view_of_tarball

    return view_of_tarball(Path(tarball)) if tarball else view_of_image(DockerEngine(), image)


@cli_task(help=_TARGET_HELP)
def sbom(c, image=None, tarball=None, lock=None, out=None, name=None):
    """Write the image's CycloneDX SBOM (every installed Python distribution, the lock's inputs)."""
    import time

    from edgevllm.common import console
    from edgevllm.inspect.supplychain import write_sbom

    stem = _stem(image, tarball, lock, out, name)
    started = time.perf_counter()
    view = _view(image, tarball)
    path, _ = write_sbom(view, stem)
    console.info(f"{len(view.dists)} Python distributions, {len(view.debs)} Debian packages, "
                 f"{time.perf_counter() - started:.1f}s")
    print(path)


@cli_task(help={**_TARGET_HELP,
                "key": "your private key: ECDSA P-256 (inv keygen makes one) or Ed25519 (PEM)",
                "attach": "also sign --image as pushed to HOST/REPO:TAG (or @sha256:…) and attest "
                          "its SBOM and SLSA provenance there, in cosign's layout"})
def sign(c, image=None, tarball=None, key=None, lock=None, out=None, name=None, attach=None):
    """Sign the image's provenance (in-toto statement, DSSE envelope) with an offline key."""
    from edgevllm.common import console
    from edgevllm.common.keys import is_ed25519
    from edgevllm.inspect.dsse import COSIGN_CANNOT, load_private_key
    from edgevllm.inspect.supplychain import sign as run_sign

    if not key:
        raise ConfigError("sign: --key required (a private key; inv keygen makes one)")
    if is_ed25519(load_private_key(key)):
        console.warn(f"--key {key}: {COSIGN_CANNOT}")
    if attach and not image:
        raise ConfigError("sign --attach: with --image (the local image pushed there)")
    stem = _stem(image, tarball, lock, out, name)
    print(run_sign(_view(image, tarball), stem, Path(key)))
    if attach:
        from edgevllm.containers.docker import DockerEngine
        from edgevllm.inspect.attach import attach_pushed

        for ref, digest in attach_pushed(DockerEngine(), image, attach, stem, Path(key)):
            print(f"{ref} {digest} attached")


@cli_task(help={"out": "where to write the private key (its public key goes to <out>.pub)",
                "kind": "p256 (default: ECDSA P-256, what cosign verifies) or ed25519"})
def keygen(c, out, kind="p256"):
    """Make a signing key (PEM PKCS#8, mode 0600) and its public key beside it (<out>.pub, the
    file cosign verify --key takes)."""
    from edgevllm.inspect.dsse import generate_key

    for path in generate_key(Path(out), kind):
        print(path)


SUPPLY_CHAIN_HELP = {**_TARGET_HELP, "key": "the signer's public key (or the private key file)",
                     "attached": "check what the registry holds for --image HOST/REPO:TAG or "
                                 "@sha256:… in cosign's layout (signature, attestations) instead"
                                 " of local files"}


@cli_task(help=SUPPLY_CHAIN_HELP)
def verify_supply_chain(c, image=None, tarball=None, key=None, lock=None, out=None, name=None,
                        attached=False):
    """Check signature, SBOM and image together (online, or offline on a published set)."""
    check_supply_chain("verify-supply-chain", image, tarball, key, lock, out, name, attached)


def check_supply_chain(task: str, image, tarball, key, lock, out, name,
                       attached: bool = False) -> None:
    """The supply-chain check of ``inv verify-supply-chain`` and ``inv verify --supply-chain``:
    online on ``image``, offline on the published set ``tarball``, or in the registry
    (``attached``); exit 8 on the first problem."""
    from edgevllm.common import console
    from edgevllm.inspect.supplychain import check, raise_first

    if not key:
        raise ConfigError(f"{task}: --key required (the signer's public key)")
    if attached:
        return _check_attached(task, image, key, {"--tarball": tarball, "--lock": lock,
                                                  "--out": out, "--name": name})
    stem = _stem(image, tarball, lock, out, name)
    view = _view(image, tarball)
    raise_first(check(view, stem, Path(key)))
    console.info(f"OK: {view.image_id}: signature, statement, SBOM ({len(view.dists)} "
                 f"distributions, {len(view.debs)} Debian packages) and image agree")


def _check_attached(task: str, image, key, others: dict) -> None:
    from edgevllm.common import console
    from edgevllm.common.keys import is_ed25519
    from edgevllm.inspect import cosign
    from edgevllm.inspect.dsse import COSIGN_CANNOT, load_public_key
    from edgevllm.inspect.supplychain import raise_first

    given = [flag for flag, value in others.items() if value]
    if given or not image:
        raise ConfigError(f"{task} --attached: give --image HOST/REPO:TAG (or @sha256:…) only, "
                          f"not {', '.join(given) or 'nothing'}")
    public = load_public_key(key)
    if is_ed25519(public):
        console.warn(f"--key {key}: {COSIGN_CANNOT}")
    found = cosign.check(image, public)
    raise_first(found.problems)
    console.info(f"OK: {image} ({found.digest}): {found.signatures} signature(s) and "
                 f"attestations {', '.join(sorted(found.predicates))} check with {key}")
