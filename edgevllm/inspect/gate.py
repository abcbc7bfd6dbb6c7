"""Where ``inv verify``'s gate comes from: the target and the command line, or a lock the user
names whose signed statement the user's key checks; never the image under test.

Two things relax the default gate: the stock-kernel policy (``verify.policy.mode_policy``, for a
mode whose kernels are a release's) and the kernel plan's ``+PTX`` arches (those extensions'
PTX-only units pass as planned). An image's lock label is written by whoever built the image, so
an unsigned image could choose a laxer gate for itself: a label asking for either is reported in
one line and not obeyed. ``--lock FILE --key KEY`` uses the lock's gate once ``signed_lock`` has
checked it: the provenance statement beside the lock (``inv sign`` wrote it) is signed by KEY, it
names this lock's sha256, and, for an image, this image's id. The build's own tail needs none of
this: it judges its image with the lock it has just made (``builder/tail.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from edgevllm.common import console, labels
from edgevllm.common.errors import SupplyChainError
from edgevllm.specs.lock import Lock, lock_hash, planned_arches_of, read_lock


@dataclass(frozen=True)
class Gate:
    """The policy file (None: the built-in one) and the kernel plan's arches by extension."""

    policy: Path | None = None
    planned: dict[str, list[str]] | None = None
    source: str = "the target and the command line"


def gate_of(mode: object, kernel_plan: object, source: str) -> Gate:
    """The gate a build of ``mode`` with ``kernel_plan`` was judged by (as the lock records
    them; every field's type checked, for a label's sake)."""
    from edgevllm.verify.policy import mode_policy

    policy = mode_policy(mode if isinstance(mode, str) else None)
    return Gate(policy, planned_arches_of(kernel_plan), source)


def relaxations(gate: Gate) -> set[str]:
    """What in ``gate`` is laxer than the default, in words."""
    found = set()
    if gate.policy is not None:
        found.add("the stock-kernel gate")
    for name, arches in sorted((gate.planned or {}).items()):
        if any(arch.endswith("+PTX") for arch in arches):
            found.add(f"PTX-only units of {name} passing as planned")
    return found


def choose_gate(image_labels: dict[str, str] | None, signed: Lock | None = None,
                origin: str = "--lock") -> Gate:
    """The gate: the signed lock's (``signed_lock``), else the default. What the image's own
    lock label asks beyond it is reported in one line, never obeyed."""
    chosen = gate_of(signed.mode, signed.kernel_plan, f"{origin} (signed)") if signed \
        else Gate()
    label = labels.label_record(image_labels or {}, "lock")
    if isinstance(label, dict):
        asked = relaxations(gate_of(label.get("mode"), label.get("kernel_plan"), "label"))
        extra = sorted(asked - relaxations(chosen))
        if extra:
            console.warn(f"the image's label asks for {', '.join(extra)}; not obeyed: pass "
                         "--lock with --key to use it")
    for what in sorted(relaxations(chosen)):
        console.info(f"gate: {what}, from {chosen.source}")
    return chosen


def signed_lock(lock_path: Path | str, key_path: Path | str, image_id: str | None = None
                ) -> Lock:
    """The lock at ``lock_path``, once the provenance statement beside it is signed by the key
    at ``key_path`` and names this lock (and ``image_id``, where given); else one line."""
    from edgevllm.inspect import dsse, provenance

    lock_path = Path(lock_path)
    lock = read_lock(lock_path)
    _, envelope_path = provenance.artefact_paths(provenance.stem_of(lock_path))
    if not envelope_path.is_file():
        raise SupplyChainError(f"--lock {lock_path}: no signed statement beside it "
                               f"({envelope_path.name}); sign it with inv sign --key KEY")
    payload = dsse.verify(dsse.read_envelope(envelope_path), dsse.load_public_key(key_path),
                          str(envelope_path))
    found = provenance.parse_statement(payload, str(envelope_path))
    if provenance.lock_digest(found) != lock_hash(lock):
        raise SupplyChainError(f"--lock {lock_path}: not the lock {envelope_path.name} was "
                               "signed with (its sha256 differs): its gate is not used")
    if image_id and provenance.subject_id(found) != image_id:
        raise SupplyChainError(f"--lock {lock_path}: signed for image "
                               f"{provenance.subject_id(found)}, not {image_id}: its gate is "
                               "not used")
    return lock
