"""``inv keygen`` and ``inv diff`` on locks (cli/inspect.py) as a user runs them, in this process
through the CLI's own entry: real keys that sign and verify, real lock files
(tests/support/inside_locks.py), and bad input as one ``error:`` line with its own exit code, no
traceback, nothing written or overwritten. No engine: ``DOCKER_HOST`` is a socket nobody
listens on."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from edgevllm.common.errors import ConfigError
from edgevllm.common.keys import sign_bytes, verify_bytes
from edgevllm.inspect import dsse
from support.inprocess import exit_code, one_error, run_cli
from support.inside_locks import lock_data


@pytest.fixture(autouse=True)
def no_engine(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'nobody-listens.sock'}")
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")


# -- inv keygen ----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["p256", "ed25519"])
def test_keygen_writes_a_private_key_for_its_owner_and_a_public_key_that_checks_it(
        tmp_path, capsys, kind):
    out = tmp_path / "keys" / "site.key"  # a folder not there yet is made
    capsys.readouterr()
    assert exit_code(["keygen", "--out", str(out), "--kind", kind]) == 0
    printed = capsys.readouterr().out.split()
    public = Path(f"{out}.pub")
    assert printed == [str(out), str(public)]
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    private_key, public_key = dsse.load_private_key(out), dsse.load_public_key(public)
    signature = sign_bytes(private_key, b"statement")
    assert verify_bytes(public_key, signature, b"statement")
    assert not verify_bytes(public_key, signature, b"statement, changed")


def test_keygen_never_overwrites_a_key(tmp_path, capsys, monkeypatch):
    out = tmp_path / "site.key"
    assert exit_code(["keygen", "--out", str(out)]) == 0
    before = (out.read_bytes(), Path(f"{out}.pub").read_bytes())
    code, err = run_cli(capsys, monkeypatch, "keygen", "--out", str(out))
    assert code == ConfigError.exit_code
    assert "already exists; pick another --out (keys are never overwritten)" in one_error(err)
    assert (out.read_bytes(), Path(f"{out}.pub").read_bytes()) == before


@pytest.mark.parametrize(("argv", "said"), [
    (["--kind", "rsa"], "--kind 'rsa': one of p256, ed25519"),
    (["--kind", ""], "--kind"),
], ids=["rsa", "empty-kind"])
def test_keygen_refuses_a_kind_it_cannot_make(tmp_path, capsys, monkeypatch, argv, said):
    out = tmp_path / "site.key"
    code, err = run_cli(capsys, monkeypatch, "keygen", "--out", str(out), *argv)
    assert code == ConfigError.exit_code and said in one_error(err)
    assert list(tmp_path.iterdir()) == []


def test_keygen_onto_a_public_key_already_there_writes_nothing(tmp_path, capsys, monkeypatch):
    """The private key's name is free but its ``.pub`` is someone's: both are kept apart."""
    out = tmp_path / "site.key"
    Path(f"{out}.pub").write_text("someone's public key\n")
    code, err = run_cli(capsys, monkeypatch, "keygen", "--out", str(out))
    assert code == ConfigError.exit_code, err
    assert f"{out}.pub already exists" in one_error(err)
    assert Path(f"{out}.pub").read_text() == "someone's public key\n"
    assert not out.exists()


# -- inv diff on locks ---------------------------------------------------------------------------
def locks(folder: Path, **changes) -> tuple[Path, Path]:
    old, new = folder / "old.lock.json", folder / "new.lock.json"
    old.write_text(json.dumps(lock_data()))
    new.write_text(json.dumps(lock_data(**changes)))
    return old, new


def test_diff_of_two_locks_names_each_change_once(tmp_path, capsys):
    old, new = locks(tmp_path, six="1.17.0", mod_version="2.0")
    capsys.readouterr()
    assert exit_code(["diff", "--old", str(old), "--new", str(new)]) == 0
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert first.startswith("# ") and "old.lock.json → " in first, first  # paths as markdown
    assert first.endswith("new.lock.json"), first
    assert "## wheels\n- changed `six`: 1.16.0 (sha256 " in out
    assert "## mods\n- changed `fastsafetensors`: version=1.0 → version=2.0" in out
    assert out.count("- changed") == 2, out


def test_diff_as_json_holds_the_same_changes(tmp_path, capsys):
    old, new = locks(tmp_path, pick_head="pick-b")
    capsys.readouterr()
    assert exit_code(["diff", "--old", str(old), "--new", str(new), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["old"]["kind"] == report["new"]["kind"] == "lock"
    assert report["old"]["source"] == str(old)
    assert set(report["sections"]) != set(), report
    assert "wheels" not in report["sections"] and "mods" not in report["sections"]


def test_diff_of_a_lock_with_itself_says_no_differences(tmp_path, capsys):
    old, _ = locks(tmp_path)
    capsys.readouterr()
    assert exit_code(["diff", "--old", str(old), "--new", str(old)]) == 0
    assert "No differences in what both sides record." in capsys.readouterr().out


def test_diff_needs_both_sides_and_readable_ones(tmp_path, capsys, monkeypatch):
    old, _ = locks(tmp_path)
    code, err = run_cli(capsys, monkeypatch, "diff", "--old", str(old))
    assert code == ConfigError.exit_code and "'new' required" in one_error(err)
    broken = tmp_path / "broken.lock.json"
    broken.write_text("{\"target\": ")
    code, err = run_cli(capsys, monkeypatch, "diff", "--old", str(old), "--new", str(broken))
    assert code != 0 and str(broken) in one_error(err), err
    latin = tmp_path / "latin.lock.json"
    latin.write_bytes(b'{"target": "caf\xe9"}')
    code, err = run_cli(capsys, monkeypatch, "diff", "--old", str(old), "--new", str(latin))
    assert code != 0 and "not UTF-8 text" in one_error(err), err
