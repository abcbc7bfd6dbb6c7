"""``inv copy`` and ``inv model-fetch --nodes`` against real nodes: containers running sshd and
their own Docker engine on the local engine (tests/support/sshd_node.py), one of them already up
to date. ``model-fetch`` downloads from a local stand-in for the Hugging Face Hub served on
127.0.0.1 (``HF_ENDPOINT``), whose first transfer of the weights file is cut mid-way."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from edgevllm.serve.cache.distribute import SshNode, hub_folder, sync_model

pytestmark = pytest.mark.e2e

TOKEN = "hf_fixture_token_must_not_leak"
WEIGHTS = os.urandom(24_000_000)  # > huggingface_hub's 10 MiB chunk: the cut lands mid-file


@pytest.fixture(scope="module")
def nodes(engine, tmp_path_factory):
    from support.sshd_node import SshNodes

    with SshNodes(engine, "edgevllm-test-dist", 2, tmp_path_factory.mktemp("ssh")) as made:
        yield made


@pytest.fixture(scope="module")
def tiny_image(engine, tmp_path_factory):
    """A one-file image (kilobytes), so that streaming it to two nodes stays quick."""
    from support.images import one_file_image

    return one_file_image(engine, tmp_path_factory.mktemp("img"), "edgevllm-test/copy-me:1",
                          b"edgevllm copy test\n")


def test_copy_streams_to_nodes_skips_the_current_one_and_verifies(engine, nodes, tiny_image,
                                                                  cli, monkeypatch):
    monkeypatch.setenv("PATH", nodes.env()["PATH"])
    want = engine.image_id(tiny_image)
    first = nodes.node_engine(0)
    with engine.save_stream([tiny_image]) as stream:  # node 0 already has the image
        first.load_from(lambda sink: sink.write(stream.read()))
    assert first.image_id(tiny_image) == want
    second = nodes.node_engine(1)
    assert not second.image_exists(tiny_image)

    code, out, err = cli("copy", "--image", tiny_image, "--to", ",".join(nodes.urls()),
                         env=nodes.env())
    assert code == 0, err
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()}
    assert rows[nodes.urls()[0]][:3] == ["up", "to", "date"]
    assert rows[nodes.urls()[1]][0] == "copied"
    assert second.image_id(tiny_image) == want  # the id was verified after the load

    code, out, err = cli("copy", "--image", tiny_image, "--to", ",".join(nodes.urls()),
                         env=nodes.env())
    assert code == 0 and out.count("up to date") == 2, err


def test_model_fetch_resumes_and_copies_to_nodes_without_the_token(engine, nodes, tmp_path,
                                                                   cli, monkeypatch):
    from support.hf_fixture import HubFixture

    monkeypatch.setenv("PATH", nodes.env()["PATH"])
    hub = HubFixture("org/tiny-model", {"config.json": b'{"model_type": "stand-in"}',
                                        "model.safetensors": WEIGHTS},
                     cut_after={"model.safetensors": [15_000_000]}).start()
    cache, remote = tmp_path / "hf", "/srv/hf"
    folder = hub_folder(cache, "org/tiny-model")
    env = {**nodes.env(), "HF_ENDPOINT": hub.url, "EDGEVLLM_FETCH_TOKEN": TOKEN,
           "HF_HUB_DISABLE_TELEMETRY": "1"}
    try:
        # Node 0 gets a complete copy first; the fetch must then skip it.
        code, out, err = cli("model-fetch", "org/tiny-model", "--hf-cache", str(cache),
                             "--token-env", "EDGEVLLM_FETCH_TOKEN", env=env)
        assert code == 0, err
        [done] = sync_model(folder, [SshNode.parse(nodes.urls()[0])],
                            str(hub_folder(Path(remote), "org/tiny-model")))
        assert done.status == "copied", done.detail
        code, out2, err2 = cli("model-fetch", "org/tiny-model", "--hf-cache", str(cache),
                               "--token-env", "EDGEVLLM_FETCH_TOKEN", "--remote-cache", remote,
                               "--nodes", ",".join(nodes.urls()), env=env)
    finally:
        hub.stop()
    assert code == 0, err2
    # The cut transfer continued where it stopped, and the token was sent but never shown.
    gets = [s for s in hub.seen if s.method == "GET" and s.path.endswith("/model.safetensors")]
    assert [g.range for g in gets] == [None, "bytes=10485760-"]
    assert all(s.authorization == f"Bearer {TOKEN}" for s in hub.seen if "/org/" in s.path)
    assert TOKEN not in out + err + out2 + err2
    rows = {line.split()[0]: " ".join(line.split()[1:]) for line in out2.splitlines()
            if line.startswith("ssh://")}
    assert rows == {nodes.urls()[0]: "up to date", nodes.urls()[1]: "copied"}
    snapshot = next((folder / "snapshots").iterdir())
    expected = hashlib.sha256(WEIGHTS).hexdigest()
    assert hashlib.sha256((snapshot / "model.safetensors").read_bytes()).hexdigest() == expected
    inside = f"{remote}/hub/models--org--tiny-model/snapshots/{snapshot.name}/model.safetensors"
    for name in nodes.names:
        proc = engine.exec(name, ["sha256sum", inside])
        assert proc.returncode == 0 and proc.stdout.decode().split()[0] == expected
