"""``inv publish`` and ``inv load``'s checks of their own input (cli/publish.py) as a user runs
them, in this process through the CLI's own entry: a compression setting out of its range, a part
size that is no size, a set that is not there, not JSON, not a manifest, or not an archive. Each
is one ``error:`` line with its exit code, no traceback, nothing written, and the engine (a socket
nobody listens on) never asked: a refusal that waited for the engine would say so instead.
Publishing and loading real images: tests/test_image_publish.py."""

from __future__ import annotations

import json

import pytest

from edgevllm.common.errors import ConfigError, IntegrityError, MissingInputError
from support.inprocess import one_error, run_cli
from support.inside_locks import lock_data

PUBLISH = ["publish", "--image", "tiny:1", "--out", "pub"]


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'nobody-listens.sock'}")
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
    monkeypatch.setenv("EDGEVLLM_LAYER_CACHE", str(tmp_path / "layers"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken.manifest.json").write_text("{")
    (tmp_path / "other.manifest.json").write_text(json.dumps({"schema": 1}))
    (tmp_path / "a.lock.json").write_text(json.dumps(lock_data()))
    return tmp_path


@pytest.mark.parametrize(("argv", "error", "said"), [
    ([*PUBLISH, "--format", "xz"], ConfigError, "--format 'xz': use zst or gz"),
    ([*PUBLISH, "--level", "99"], ConfigError, "--level 99: expected a whole number from 1 to 22"),
    ([*PUBLISH, "--level", "-5"], ConfigError, "--level -5: expected a whole number"),
    ([*PUBLISH, "--long", "40"], ConfigError, "--long 40: expected a whole number from 10 to 31"),
    ([*PUBLISH, "--part-size", "12QB"], ConfigError,
     "--part-size '12QB': expected a size such as 1900M, 2G or 2GiB"),
    ([*PUBLISH, "--part-size", "1K"], ConfigError, "parts must be at least 1M"),
    (["load", "nothere.manifest.json"], MissingInputError,
     "nothere.manifest.json: no such file; give the <name>.manifest.json that inv publish"),
    (["load", "broken.manifest.json"], IntegrityError, "broken.manifest.json: not valid JSON"),
    (["load", "other.manifest.json"], IntegrityError,
     "unknown field 'schema' (did you mean 'schema_version'?)"),
    (["load", "a.lock.json"], IntegrityError, "a.lock.json: neither a tar, gzip nor zstd file"),
], ids=["format", "level-high", "level-negative", "long", "part-size-unit", "part-size-small",
        "load-missing", "load-not-json", "load-not-a-manifest", "load-not-an-archive"])
def test_a_publish_or_load_refuses_its_input_before_the_engine(work, capsys, monkeypatch, argv,
                                                               error, said):
    before = sorted(p.name for p in work.iterdir())
    code, err = run_cli(capsys, monkeypatch, *argv)
    line = one_error(err)
    assert said in line and code == error.exit_code, (code, line)
    assert "Docker daemon" not in err
    assert sorted(p.name for p in work.iterdir()) == before  # no pub/, no layer cache


def test_a_publish_that_passes_its_checks_meets_the_engine_and_writes_nothing(work, capsys,
                                                                             monkeypatch):
    """The control: good flags reach the engine (nobody there: one line, its code)."""
    code, err = run_cli(capsys, monkeypatch, *PUBLISH, "--format", "gz", "--level", "1")
    assert "cannot reach the Docker daemon" in one_error(err), err
    assert code not in (0, ConfigError.exit_code)
    assert not (work / "pub").exists()
