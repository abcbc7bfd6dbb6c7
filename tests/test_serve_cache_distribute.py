"""Putting a model on every node without a Docker engine (``serve/cache/distribute.py``): the
real ``inv model-fetch`` against a Hugging Face hub stand-in on 127.0.0.1 (tests/support/
hf_fixture.py: a cut download resumed, the token sent and never shown, a missing repository in one
line), the real rsync to nodes through a local ``ssh`` stand-in on PATH that runs the remote side
here (the only stand-in: no sshd in the fast loop; tests/e2e/test_serve_distribute.py uses real
nodes), ssh node URLs, and a bundle's copy beside its ``.sha256``."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from edgevllm.common.errors import RecipeError
from edgevllm.serve.cache.distribute import (
    SshNode,
    bundle_beside,
    fetch_model,
    hub_folder,
    sync_model,
)
from support.hf_fixture import HubFixture
from support.localhttp import serve_pages

TOKEN = "hf_distribute_token_must_not_leak"
WEIGHTS = bytes(range(256)) * 4096 * 11  # 11 MiB: a cut past huggingface_hub's 10 MiB chunk

# ssh as rsync calls it: [-p PORT] [user@]host COMMAND...; the command runs here, in sh, as the
# node's login shell would run it. A host named "down.invalid" is a node that does not answer.
FAKE_SSH = """#!/bin/sh
while [ $# -gt 0 ]; do case "$1" in -p|-l) shift 2;; -*) shift;; *) break;; esac; done
echo "$1" >> "$FAKE_SSH_LOG"
case "$1" in *down.invalid*) echo "ssh: connect to host $1 port 22: Connection refused" >&2
  exit 255;; esac
shift
exec sh -c "$*"
"""


# -- model-fetch, the real CLI against a hub on 127.0.0.1 ------------------------------------------
@pytest.fixture
def hub():
    fixture = HubFixture("org/tiny-model", {"config.json": b'{"model_type": "stand-in"}',
                                            "model.safetensors": WEIGHTS},
                         cut_after={"model.safetensors": [10_600_000]}).start()
    yield fixture
    fixture.stop()


def hub_env(hub: HubFixture) -> dict[str, str]:
    return {"HF_ENDPOINT": hub.url, "EDGEVLLM_FETCH_TOKEN": TOKEN,
            "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_XET": "1"}


def test_model_fetch_finishes_a_cut_download_and_never_shows_the_token(hub, tmp_path, cli):
    cache = tmp_path / "hf"
    argv = ["model-fetch", "org/tiny-model", "--hf-cache", str(cache),
            "--token-env", "EDGEVLLM_FETCH_TOKEN"]
    code, out, err = cli(*argv, env=hub_env(hub))
    if code != 0:  # the cut is an error to huggingface_hub: the second run resumes it
        code, out, err = cli(*argv, env=hub_env(hub))
    assert code == 0, err
    assert TOKEN not in out + err
    snapshot = next((hub_folder(cache, "org/tiny-model") / "snapshots").iterdir())
    weights = (snapshot / "model.safetensors").read_bytes()
    assert hashlib.sha256(weights).digest() == hashlib.sha256(WEIGHTS).digest()
    downloads = [s for s in hub.seen if s.method == "GET" and s.path.endswith("/model.safetensors")]
    assert [d.range for d in downloads] == [None, "bytes=10485760-"]  # resumed, not restarted
    assert all(s.authorization == f"Bearer {TOKEN}" for s in hub.seen if "/org/" in s.path)


def test_model_fetch_of_a_repository_the_hub_lacks_is_one_line(hub, tmp_path, cli):
    code, out, err = cli("model-fetch", "org/absent", "--hf-cache", str(tmp_path / "hf"),
                         env=hub_env(hub))
    assert code == RecipeError.exit_code, err
    assert "Traceback" not in err
    [line] = [x for x in err.splitlines() if x.startswith("error: ")]
    assert "downloading org/absent failed (HTTP 404); check the name" in line
    assert "$HF_TOKEN" in line  # the token variable to check, by name


def test_a_hub_that_does_not_answer_is_named_as_such(tmp_path, cli):
    # huggingface_hub says "not in the local cache" for it; the line gave its class name alone
    # (LocalEntryNotFoundError), the same words as for a cut download
    with serve_pages({}) as base:
        pass  # nothing listens there any more
    code, out, err = cli("model-fetch", "org/tiny-model", "--hf-cache", str(tmp_path / "hf"),
                         env={"HF_ENDPOINT": base, "HF_HUB_DISABLE_TELEMETRY": "1"})
    assert code == RecipeError.exit_code and "Traceback" not in err
    [line] = [x for x in err.splitlines() if x.startswith("error: ")]
    assert "Connection refused" in line and "HF_ENDPOINT" in line


@pytest.mark.parametrize("model", ["tiny-model", "org/name/extra", "../org", "org/na me", ""])
def test_a_name_that_is_no_repo_id_is_refused_before_any_request(model, tmp_path):
    with pytest.raises(RecipeError, match="expected a Hugging Face repo id"):
        fetch_model(model, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


def test_hub_folder_is_huggingface_hubs_layout(tmp_path):
    assert hub_folder(tmp_path, "org/name") == tmp_path / "hub" / "models--org--name"


# -- nodes -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec, user_host, port, ssh", [
    ("ssh://root@10.0.0.2", "root@10.0.0.2", None, "ssh"),
    ("ssh://node-b:2222", "node-b", 2222, "ssh -p 2222"),
])
def test_node_urls_become_rsyncs_arguments(spec, user_host, port, ssh):
    node = SshNode.parse(spec)
    assert (node.user_host, node.port, node.ssh_command()) == (user_host, port, ssh)


@pytest.mark.parametrize("spec", ["node-b", "tcp://node-b:2375", "ssh://", "ssh://a b",
                                  "ssh://node:port"])
def test_a_node_that_is_no_ssh_url_is_one_line_naming_it(spec):
    with pytest.raises(RecipeError) as caught:
        SshNode.parse(spec)
    assert f"node '{spec}'" in str(caught.value) and "ssh://" in str(caught.value)


# -- rsync to nodes, through the local ssh stand-in ------------------------------------------------
@pytest.fixture
def transport(tmp_path, monkeypatch) -> Path:
    """``ssh`` on PATH runs the node's side here; returns the log of the hosts it was asked for."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text(FAKE_SSH)
    (bin_dir / "ssh").chmod(0o755)
    log = tmp_path / "ssh.log"
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SSH_LOG", str(log))
    return log


def model_folder(root: Path) -> Path:
    folder = hub_folder(root, "org/tiny-model")
    (folder / "blobs").mkdir(parents=True)
    (folder / "blobs" / ("a" * 40)).write_bytes(b"weights")
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text("0" * 40)
    return folder


def test_rsync_copies_then_skips_a_node_that_is_complete(tmp_path, transport):
    folder = model_folder(tmp_path / "here")
    remote = tmp_path / "node" / "deep" / "cache" / "models--org--tiny-model"
    node = SshNode.parse("ssh://root@node-a:2200")
    [first] = sync_model(folder, [node], str(remote))
    assert (first.node, first.status) == ("ssh://root@node-a:2200", "copied"), first.detail
    assert (remote / "blobs" / ("a" * 40)).read_bytes() == b"weights"  # parent folders made
    assert (remote / "refs" / "main").read_text() == "0" * 40
    [again] = sync_model(folder, [node], str(remote))
    assert again.status == "up to date"
    (folder / "refs" / "main").write_text("1" * 40)  # a new commit: same size, a later time
    later = (folder / "refs" / "main").stat().st_mtime + 60
    os.utime(folder / "refs" / "main", (later, later))
    [changed] = sync_model(folder, [node], str(remote))
    assert changed.status == "copied" and (remote / "refs" / "main").read_text() == "1" * 40
    assert set(transport.read_text().split()) <= {"root@node-a", "node-a"}  # or -l root


def test_one_node_down_is_its_own_row_and_the_others_are_copied(tmp_path, transport):
    folder = model_folder(tmp_path / "here")
    remote = tmp_path / "node" / "models--org--tiny-model"
    rows = sync_model(folder, [SshNode.parse("ssh://down.invalid"),
                               SshNode.parse("ssh://node-b")], str(remote))
    assert [(r.node, r.status) for r in rows] == [("ssh://down.invalid", "failed"),
                                                  ("ssh://node-b", "copied")]
    assert "\n" not in rows[0].detail and rows[0].detail  # rsync's last line, as it said it
    assert (remote / "blobs" / ("a" * 40)).is_file()


def test_the_same_path_is_the_default_on_the_node(tmp_path, transport):
    # without a remote folder the node gets the same path: here that is the folder itself
    folder = model_folder(tmp_path / "here")
    [row] = sync_model(folder, [SshNode.parse("ssh://node-c")])
    assert row.status == "up to date"


def test_a_remote_folder_with_a_space_is_one_folder(tmp_path, transport):
    folder = model_folder(tmp_path / "here")
    remote = tmp_path / "node with space" / "models--org--tiny-model"
    [row] = sync_model(folder, [SshNode.parse("ssh://node-d")], str(remote))
    assert row.status == "copied", row.detail
    assert (remote / "refs" / "main").is_file()


# -- a bundle beside its checksum ------------------------------------------------------------------
def test_bundle_beside_writes_a_copy_sha256sum_accepts(tmp_path):
    bundle = tmp_path / "in.tar"
    bundle.write_bytes(os.urandom(3 << 20) + b"end")  # more than one chunk
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    copy, checksum = bundle_beside(bundle, out_dir, "qwen-spark")
    assert copy == out_dir / "qwen-spark.jitcache.tar"
    assert copy.read_bytes() == bundle.read_bytes()
    assert checksum.read_text() == f"{hashlib.sha256(bundle.read_bytes()).hexdigest()}  " \
                                   "qwen-spark.jitcache.tar\n"
    proc = subprocess.run(["sha256sum", "-c", checksum.name], cwd=out_dir, capture_output=True,
                          text=True)
    assert proc.returncode == 0 and "OK" in proc.stdout
    assert sorted(p.name for p in out_dir.iterdir()) == [copy.name, checksum.name]
