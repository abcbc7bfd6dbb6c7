"""Where ``inv verify``'s gate comes from (edgevllm/inspect/gate.py): the target and the command
line, or a lock the user names whose signed statement ``--key`` checks; never the image under
test. An image's lock label asking for a laxer gate (the stock-kernel policy, PTX-only units
passing as planned) is reported in one line and not obeyed. The labels are a plain dict (data,
as the engine's inspect gives them); the key, SBOM, statement and lock are real files written by
the real code."""

from __future__ import annotations

import json

import pytest

from edgevllm.common.errors import SupplyChainError
from edgevllm.common.labels import LOCK
from edgevllm.inspect import dsse, supplychain
from edgevllm.inspect.gate import Gate, choose_gate, signed_lock
from edgevllm.specs.lock import write_lock
from edgevllm.verify.policy import STOCK_POLICY
from support.inprocess import run_cli
from support.inside_locks import lock_data, make_lock
from support.inside_view import IMAGE_ID, make_view

PLAN = {"extensions": {"_moe_C": {"arches": ["12.1a", "8.0+PTX"]}}}
LAX_LABELS = {LOCK: json.dumps({"mode": "prebuilt", "kernel_plan": PLAN})}


def _warnings(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if "not obeyed" in line]


def test_a_label_asking_for_a_laxer_gate_is_reported_not_obeyed(capsys, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    capsys.readouterr()
    assert choose_gate(LAX_LABELS) == Gate()  # the built-in policy, no plan
    lines = _warnings(capsys)
    assert len(lines) == 1, lines
    assert "the image's label asks for PTX-only units of _moe_C passing as planned, the " \
        "stock-kernel gate; not obeyed: pass --lock with --key to use it" in lines[0]
    compiled = {LOCK: json.dumps({"mode": "compile"})}
    for quiet in ({}, compiled, {LOCK: "not json"}, {LOCK: json.dumps(["a list"])}):
        assert choose_gate(quiet) == Gate()
        assert _warnings(capsys) == []


@pytest.fixture
def signed(tmp_path):
    """A lock file with its SBOM and signed statement beside it (``inv sign``), and the key."""
    private, public = dsse.generate_key(tmp_path / "key.pem")
    lock_file = write_lock(make_lock(), tmp_path / "img.lock.json")
    stem = tmp_path / "img"
    supplychain.write_sbom(make_view(), stem)
    supplychain.sign(make_view(), stem, private)
    return lock_file, public


def test_a_signed_lock_the_user_names_gives_the_gate(signed, capsys, monkeypatch):
    lock_file, public = signed
    monkeypatch.setenv("NO_COLOR", "1")
    lock = signed_lock(lock_file, public, IMAGE_ID)
    gate = choose_gate(LAX_LABELS, lock, f"--lock {lock_file}")
    assert gate.policy == STOCK_POLICY and gate.planned is None  # the lock's, not the label's
    lines = _warnings(capsys)
    assert len(lines) == 1 and "PTX-only units of _moe_C" in lines[0] and \
        "stock-kernel" not in lines[0]  # what the signed lock already grants is no news


def test_a_lock_whose_signature_does_not_check_gives_no_gate(signed, tmp_path):
    lock_file, public = signed
    _, other = dsse.generate_key(tmp_path / "other.pem")
    with pytest.raises(SupplyChainError, match="no valid signature"):
        signed_lock(lock_file, other)
    with pytest.raises(SupplyChainError, match="signed for image"):
        signed_lock(lock_file, public, "sha256:" + "ef" * 32)
    laxer = lock_data()
    laxer["kernel_plan"] = PLAN
    lock_file.write_text(json.dumps(laxer))
    with pytest.raises(SupplyChainError, match="not the lock img.provenance.dsse.json was signed"):
        signed_lock(lock_file, public)
    alone = write_lock(make_lock(), tmp_path / "alone" / "x.lock.json")
    with pytest.raises(SupplyChainError, match="no signed statement beside it"):
        signed_lock(alone, public)


def test_inv_verify_takes_the_gate_of_a_signed_lock_only(signed, tmp_path, capsys, monkeypatch):
    """``inv verify --path``: --lock needs --key; a signed lock's stock gate is said; a lock
    changed after signing is one line, exit 8, nothing judged."""
    lock_file, public = signed
    empty = tmp_path / "libs"
    empty.mkdir()
    code, err = run_cli(capsys, monkeypatch, "verify", "--target", "spark", "--path", str(empty),
                     "--lock", str(lock_file))
    assert code == 2 and "--lock needs --key" in err, err
    code, err = run_cli(capsys, monkeypatch, "verify", "--target", "spark", "--path", str(empty),
                     "--lock", str(lock_file), "--key", str(public))
    assert "gate: the stock-kernel gate, from --lock" in err, err
    lock_file.write_text(lock_file.read_text().replace("MAX_JOBS", "MIN_JOBS"))
    code, err = run_cli(capsys, monkeypatch, "verify", "--target", "spark", "--path", str(empty),
                     "--lock", str(lock_file), "--key", str(public))
    assert code == 8 and "signed with (its sha256 differs)" in err, err
    assert "Traceback" not in err
