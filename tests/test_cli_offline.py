"""``inv bundle`` and ``inv deploy``'s checks of their own input (cli/offline.py) as a user runs
them, in this process through the CLI's own entry: a flag missing, a key that is not one (or the
wrong half of a pair), an output that is a file or someone's folder, an image name that is no
reference, an ``--attach`` without its SBOM, a folder that is no bundle. Each is one ``error:``
line with its exit code, no traceback, and nothing written; no engine is asked (``DOCKER_HOST``
is a socket nobody listens on). Lying manifests and recipes that are not UTF-8:
tests/test_serve_offline_hostile.py; whole bundles: tests/e2e/test_offline_bundle_e2e.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgevllm.common.errors import (
    ConfigError,
    EdgeVllmError,
    IntegrityError,
    OutputFolderError,
)
from edgevllm.inspect import dsse
from support.inprocess import one_error, run_cli
from support.inside_locks import lock_data

RECIPE = "nemotron-3-nano-nvfp4-spark"


@pytest.fixture
def work(tmp_path, monkeypatch):
    """A folder holding a key pair, a folder of someone's files, an empty folder, a file, a
    non-key and a lock without its SBOM; the engine is nobody."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'nobody-listens.sock'}")
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
    monkeypatch.chdir(tmp_path)
    dsse.generate_key(tmp_path / "site.key")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "other.txt").write_text("someone's\n")
    (tmp_path / "empty").mkdir()
    (tmp_path / "afile").write_text("a file\n")
    (tmp_path / "notakey.pem").write_text("not a key\n")
    (tmp_path / "img.lock.json").write_text(json.dumps(lock_data()))
    return tmp_path


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else b""
            for p in sorted(folder.rglob("*"))}


BUNDLE = ["bundle", "--image", "tiny:1", "--recipe", RECIPE]
BUNDLE_CASES: list[tuple[list[str], type[EdgeVllmError], str]] = [
    ([*BUNDLE, "--key", "site.key"], ConfigError, "bundle: --out required"),
    ([*BUNDLE, "--out", "o", "--key", "notakey.pem"], ConfigError,
     "--key notakey.pem: not a PEM key without a passphrase"),
    ([*BUNDLE, "--out", "o", "--key", "site.key.pub"], ConfigError,
     "--key site.key.pub: not an ECDSA P-256 or Ed25519 private key; make one with 'inv keygen"),
    ([*BUNDLE, "--out", "full", "--key", "site.key"], OutputFolderError,
     "--out full: holds other files (other.txt)"),
    ([*BUNDLE, "--out", "afile", "--key", "site.key"], OutputFolderError,
     "--out afile: a file, not a folder"),
    (["bundle", "--image", "BAD$(id)", "--recipe", RECIPE, "--out", "o", "--key", "site.key"],
     ConfigError, "--image: 'BAD$(id)' is not an image reference"),
    ([*BUNDLE, "--out", "o", "--key", "site.key", "--attach", "img.lock.json"], ConfigError,
     "--attach img.lock.json: img.sbom.cdx.json not found; run inv sbom first"),
]
DEPLOY_CASES: list[tuple[list[str], type[EdgeVllmError], str]] = [
    (["deploy", "--from", "empty"], ConfigError, "deploy: --from BUNDLE and --key PUBLIC_KEY"),
    (["deploy", "--from", "nowhere", "--key", "site.key.pub"], ConfigError,
     "--from nowhere: no such bundle folder"),
    (["deploy", "--from", "empty", "--key", "site.key.pub"], IntegrityError,
     "empty/bundle.dsse.json: no signed manifest; the bundle is incomplete"),
    (["deploy", "--from", "empty", "--key", "notakey.pem"], ConfigError,
     "--key notakey.pem: not a PEM key without a passphrase"),
]


@pytest.mark.parametrize(("argv", "error", "said"), BUNDLE_CASES + DEPLOY_CASES,
                         ids=["bundle-no-out", "bundle-not-a-key", "bundle-public-key",
                              "bundle-others-folder", "bundle-out-file", "bundle-bad-image",
                              "bundle-attach-no-sbom", "deploy-no-key", "deploy-no-folder",
                              "deploy-no-manifest", "deploy-not-a-key"])
def test_an_offline_task_refuses_its_input_in_one_line_writing_nothing(work, capsys,
                                                                       monkeypatch, argv,
                                                                       error, said):
    before = tree(work)
    code, err = run_cli(capsys, monkeypatch, *argv)
    line = one_error(err)
    assert said in line and code == error.exit_code, (code, line)
    assert tree(work) == before


def test_a_bundle_signed_by_another_site_is_refused_before_its_files_are_read(work, capsys,
                                                                              monkeypatch):
    """Only the signature is read: a folder whose manifest is another key's says so."""
    from edgevllm.serve.bundlefiles import MANIFEST_NAME, PAYLOAD_TYPE

    dsse.generate_key(work / "other.key")
    envelope = dsse.sign(b'{"files": []}', dsse.load_private_key(work / "other.key"),
                         PAYLOAD_TYPE)
    (work / "empty" / MANIFEST_NAME).write_text(json.dumps(envelope))
    code, err = run_cli(capsys, monkeypatch, "deploy", "--from", "empty", "--key",
                        "site.key.pub")
    assert "another key" in one_error(err), err
    assert code not in (0, ConfigError.exit_code)
