"""Hostile inputs to the offline road, through the CLI as a user runs it: ``inv deploy --from`` a
bundle whose signed manifest lies about its files' sizes (signed with the site's own key, so the
signature passes and only the size check stands between the lie and the engine), and ``inv
bundle --recipe`` a file that is not UTF-8 text. Each is one ``error:`` line, a non-zero exit
code of edgevllm's own, no traceback, nothing installed or written, and the engine never asked:
``DOCKER_HOST`` is a socket nobody listens on, so reaching it would end with the engine's code.
Real keys, real files, the real CLI in this process (and once each in a real subprocess)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgevllm.common.errors import IntegrityError, RecipeError
from edgevllm.common.fsutil import atomic_write_json
from edgevllm.inspect import dsse
from edgevllm.serve.bundlefiles import MANIFEST_NAME, PAYLOAD_TYPE, hash_file
from support.inprocess import one_error, run_cli

PARTS = {"image/index.json": b'{"schemaVersion": 2}',
         "recipe/tiny.yaml": b"name: tiny\n",
         "caches/tiny-0123456789abcdef.jitcache.tar": bytes(range(256)) * 8}


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A bundle folder's files (no manifest yet), the site's key pair, and an engine nobody
    runs."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'nobody-listens.sock'}")
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
    folder = tmp_path / "bundle"
    for relative, data in PARTS.items():
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_bytes(data)
    private, public = dsse.generate_key(tmp_path / "keys" / "site.key")
    return folder, private, public


def sign(folder: Path, private: Path, sizes: dict[str, object]) -> None:
    """A manifest of the folder's files with the true sha256 of each and the sizes given
    (the true one where none is), signed with the site's own key."""
    files = [{"path": rel, "sha256": hash_file(folder / rel),
              "size": sizes.get(rel, len(data)), "blob": None} for rel, data in PARTS.items()]
    payload = {"schema_version": 1, "kind": "edgevllm-offline-bundle",
               "image": {"ref": "tiny:1", "id": "sha256:" + "c" * 64, "serves_as": None},
               "recipe": "recipe/tiny.yaml", "target": "thor", "lock": None,
               "caches": "caches/tiny-0123456789abcdef.jitcache.tar", "model": None,
               "files": files}
    body = json.dumps(payload, sort_keys=True).encode()
    envelope = dsse.sign(body, dsse.load_private_key(private), PAYLOAD_TYPE)
    atomic_write_json(folder / MANIFEST_NAME, envelope)


CACHES = "caches/tiny-0123456789abcdef.jitcache.tar"
TRUE_SIZE = len(PARTS[CACHES])
LIES = {"one byte more": TRUE_SIZE + 1, "one byte less": TRUE_SIZE - 1, "empty": 0,
        "more than any disk": 10 ** 30, "past 64 bits": 2 ** 64 + TRUE_SIZE}


@pytest.mark.parametrize("lie", sorted(LIES))
def test_a_signed_manifest_that_lies_about_a_size_is_one_line_before_the_engine(
        site, tmp_path, capsys, monkeypatch, lie):
    folder, private, public = site
    sign(folder, private, {CACHES: LIES[lie]})
    hf = tmp_path / "hf"
    code, err = run_cli(capsys, monkeypatch, "deploy", "--from", str(folder), "--key", str(public),
                        "--hf-cache", str(hf))
    line = one_error(err)
    assert code == IntegrityError.exit_code, (code, line)
    assert line == (f"error: {folder / CACHES}: {TRUE_SIZE} bytes, the manifest says "
                    f"{LIES[lie]}; the copy is incomplete or changed (copy the bundle again)")
    assert not hf.exists()  # nothing installed


@pytest.mark.parametrize(("size", "said"), [(-1, "greater than or equal to 0"),
                                            (1.5, "size"), (None, "size"), ([2048], "size")],
                         ids=["negative", "fraction", "null", "list"])
def test_a_size_that_is_no_byte_count_is_one_line_naming_the_field(site, capsys, monkeypatch,
                                                                    size, said):
    folder, private, public = site
    sign(folder, private, {CACHES: size})
    code, err = run_cli(capsys, monkeypatch, "deploy", "--from", str(folder), "--key", str(public))
    line = one_error(err)
    assert code == IntegrityError.exit_code, (code, line)
    assert str(folder / MANIFEST_NAME) in line and said in line, line


def test_the_true_sizes_pass_the_check_and_only_then_meet_the_engine(site, capsys, monkeypatch):
    """The control: the same bundle with honest sizes passes every check, and the first thing
    that fails is the engine nobody runs (so the lies above were stopped by the size check)."""
    folder, private, public = site
    sign(folder, private, {})
    code, err = run_cli(capsys, monkeypatch, "deploy", "--from", str(folder), "--key", str(public))
    line = one_error(err)
    assert code not in (0, IntegrityError.exit_code), (code, line)
    assert "signature and 3 files checked" in err, err


def test_a_lying_size_in_a_real_process(site, cli, tmp_path):
    folder, private, public = site
    sign(folder, private, {CACHES: 10 ** 30})
    code, out, err = cli("deploy", "--from", str(folder), "--key", str(public),
                         env={"DOCKER_HOST": f"unix://{tmp_path / 'nobody-listens.sock'}"})
    line = one_error(err)
    assert code == IntegrityError.exit_code and "the manifest says " + "1" + "0" * 30 in line
    assert out == ""


# ``inv bundle --recipe FILE`` where FILE is not UTF-8 text: refused before any image is read.
NOT_UTF8 = {"latin-1 byte": b"name: caf\xe9\nmodel: x\n",
            "utf-16": "name: tiny\n".encode("utf-16"),
            "binary": bytes(range(256)),
            "in a value": b"name: tiny\nenv:\n  A: \"\xff\xfe\"\n"}


@pytest.mark.parametrize("kind", sorted(NOT_UTF8))
def test_a_recipe_that_is_not_utf8_is_one_line_before_the_engine(site, tmp_path, capsys,
                                                                 monkeypatch, kind):
    _, private, _ = site
    recipe = tmp_path / "odd.yaml"
    recipe.write_bytes(NOT_UTF8[kind])
    out = tmp_path / "out"
    code, err = run_cli(capsys, monkeypatch, "bundle", "--image", "tiny:1", "--recipe",
                        str(recipe), "--out", str(out), "--key", str(private))
    line = one_error(err)
    assert code == RecipeError.exit_code, (code, line)
    assert line.startswith(f"error: {recipe}: not UTF-8 text (byte ") and \
        line.endswith("save it as UTF-8"), line
    assert not out.exists()


def test_a_recipe_whose_name_is_not_utf8_is_one_line_in_a_real_process(site, cli, tmp_path):
    """A file name of bytes that are not UTF-8 (as a Linux shell passes them) is said escaped,
    never a crash of the console writing it."""
    _, private, _ = site
    name = tmp_path / b"odd\xff.yaml".decode("utf-8", "surrogateescape")
    name.write_bytes(b"name: caf\xe9\n")
    code, out, err = cli("bundle", "--image", "tiny:1", "--recipe", str(name),
                         "--out", str(tmp_path / "out"), "--key", str(private),
                         env={"DOCKER_HOST": f"unix://{tmp_path / 'nobody-listens.sock'}"})
    line = one_error(err)
    assert code == RecipeError.exit_code, (code, line)
    assert "odd\\udcff.yaml: not UTF-8 text" in line, line
    assert not (tmp_path / "out").exists() and out == ""
