"""``inv dist-pool check`` as a builder runs it (cli/distpool.py), in this process through the
CLI's entry: where its token comes from (``--token-file``, else ``$EDGEVLLM_DIST_TOKEN``, else
this host's pool), each refused in one line without echoing the token; and what it says of a
scheduler that is not there or is no sccache-dist scheduler (real servers on 127.0.0.1: a web
server, a TCP server that speaks no HTTP), one line with exit 3 and no traceback. A real pool
is tests/test_builder_distpool*.py."""

from __future__ import annotations

import socket
import socketserver
from pathlib import Path

import pytest

from support.inprocess import one_error, own_user_folders, run_cli
from support.localhttp import serve_handler, serve_pages

TOKEN = "edgevllm-dist-" + "t" * 30


@pytest.fixture
def work(tmp_path, monkeypatch) -> Path:
    own_user_folders(tmp_path, monkeypatch)
    monkeypatch.setenv("EDGEVLLM_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("EDGEVLLM_DIST_TOKEN", raising=False)
    token = tmp_path / "client.token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    return tmp_path


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_scheduler_that_is_not_there_is_one_line_saying_what_to_do(work, capsys,
                                                                     monkeypatch):
    port = _closed_port()
    code, err = run_cli(capsys, monkeypatch, "dist-pool", "check", "--scheduler",
                        f"sccache://127.0.0.1:{port}", "--token-file", str(work / "client.token"))
    assert code == 3, err
    line = one_error(err)
    assert line.startswith(f"error: the sccache-dist scheduler at http://127.0.0.1:{port} "
                           "cannot be reached")
    assert "inv dist-pool up" in line and TOKEN not in err


def test_a_web_server_that_is_no_scheduler_is_one_line(work, capsys, monkeypatch):
    with serve_pages({"/": b"<html>hello</html>"}) as base:
        port = base.rsplit(":", 1)[1]
        code, err = run_cli(capsys, monkeypatch, "dist-pool", "check", "--scheduler",
                            f"sccache://127.0.0.1:{port}", "--token-file",
                            str(work / "client.token"))
    assert code == 3, err
    assert one_error(err) == (f"error: the answer of http://127.0.0.1:{port}/api/v1/scheduler/"
                              "status is HTTP 404: is it an sccache-dist scheduler?")


class _NotHttp(socketserver.BaseRequestHandler):
    def handle(self):
        try:
            self.request.recv(1024)
            self.request.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")
        except OSError:
            return


def test_a_server_that_speaks_no_http_is_one_line(work, capsys, monkeypatch):
    with serve_handler(_NotHttp, socketserver.ThreadingTCPServer) as base:
        port = base.rsplit(":", 1)[1]
        code, err = run_cli(capsys, monkeypatch, "dist-pool", "check", "--scheduler",
                            f"sccache://127.0.0.1:{port}", "--token-file",
                            str(work / "client.token"))
    assert code == 3, err
    assert f"127.0.0.1:{port}" in one_error(err)


@pytest.mark.parametrize("value", ["short", "has a space in it somewhere", "x" * 600,
                                   TOKEN + "\n" + TOKEN])
def test_a_token_in_the_environment_that_is_no_token_is_one_line_not_echoed(
        work, capsys, monkeypatch, value):
    monkeypatch.setenv("EDGEVLLM_DIST_TOKEN", value)
    code, err = run_cli(capsys, monkeypatch, "dist-pool", "check", "--scheduler",
                        f"sccache://127.0.0.1:{_closed_port()}")
    assert code == 2, err
    assert one_error(err) == ("error: EDGEVLLM_DIST_TOKEN is not a token (16-512 letters, "
                              "digits or ._~+/=-)")
    assert value not in err


def test_the_token_file_flag_wins_over_the_environment(work, capsys, monkeypatch):
    """A bad token in the environment is not read when --token-file is given: the check goes
    on to the scheduler (which is not there)."""
    monkeypatch.setenv("EDGEVLLM_DIST_TOKEN", "short")
    code, err = run_cli(capsys, monkeypatch, "dist-pool", "check", "--scheduler",
                        f"sccache://127.0.0.1:{_closed_port()}", "--token-file",
                        str(work / "client.token"))
    assert code == 3, err
    assert "cannot be reached" in one_error(err)


def test_without_any_token_it_names_the_pools_token_file(work, capsys, monkeypatch):
    code, err = run_cli(capsys, monkeypatch, "dist-pool", "check", "--scheduler",
                        f"sccache://127.0.0.1:{_closed_port()}")
    assert code == 2, err
    assert one_error(err).startswith("error: --token-file ")


def test_this_hosts_pool_token_is_read_when_nothing_else_is_given(work, capsys, monkeypatch):
    pool = work / "cache" / "dist-pool"
    pool.mkdir(parents=True)
    (pool / "client.token").write_text(TOKEN + "\n")
    (pool / "client.token").chmod(0o600)
    code, err = run_cli(capsys, monkeypatch, "dist-pool", "check", "--scheduler",
                        f"sccache://127.0.0.1:{_closed_port()}")
    assert code == 3, err  # the token was taken: the check went on to the scheduler
    assert "cannot be reached" in one_error(err)
    (pool / "client.token").chmod(0o644)  # others may read it: refused, and said how to fix
    code, err = run_cli(capsys, monkeypatch, "dist-pool", "check", "--scheduler",
                        f"sccache://127.0.0.1:{_closed_port()}")
    assert code == 2, err
    assert one_error(err).endswith(f"chmod 600 {pool / 'client.token'}")
