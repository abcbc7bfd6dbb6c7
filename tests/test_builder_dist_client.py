"""inv build --compile --dist (builder/distpool/client.py): the Dockerfile without --dist is the
text it was (byte for byte), the --dist block carries sccache and its config as a secret and no
token, the compile key is the same with and without a pool, a mode that does not compile or a
road whose compilers x86 workers cannot run refuses it in one line, and a pool that does not
serve (unreachable, wrong token) is one line naming --dist, against a real local HTTP server."""

from __future__ import annotations

import hashlib
import http.server
import json
import socket
import threading
from pathlib import Path

import pytest

from edgevllm.builder.buildlog import BuildFollower
from edgevllm.builder.distpool import client, inimage_stats
from edgevllm.builder.render import render_dockerfile
from edgevllm.builder.runner import compile_key
from edgevllm.common.errors import ConfigError, DistPoolError, SpecError
from edgevllm.common.labels import SCCACHE_STATS_MARKER
from edgevllm.sources.buildreqs import read_build_layout
from edgevllm.specs.buildspec import load_spec, resolve
from edgevllm.specs.moderule import Builder

FAKE_VLLM = Path(__file__).parent / "e2e" / "fixtures" / "fake-vllm"
TOKEN = "sccd_" + "x" * 43
SCHEDULER = "sccache://172.17.0.1:10600"

# sha256 of the text the templates rendered before --dist existed (commit 2261ad1d, by the
# code at `git merge-base HEAD main`): a build without --dist must render exactly this (CI's
# BuildKit layer cache and every compile key depend on it).
BEFORE_DIST = {
    ("spark", "cross"): "7869b8690d75b62e394fbc00f8288846cc112491bf72a998f3bb079a24802513",
    ("spark", "emulated"): "ad86a80c5c6c67823bc82a5d4de53bc8ddf1fbf50ba42467f2680c1a6fc3f20e",
    ("spark", "native"): "ad86a80c5c6c67823bc82a5d4de53bc8ddf1fbf50ba42467f2680c1a6fc3f20e",
    ("thor", "cross"): "084c626749a1c3eee11fa14fbf36eab26cd2c4b40a73cf3ec01050c3e028acc4",
    ("thor", "emulated"): "aeb75361cd23b800e38574196d535d07856afdbac6918944e7cf464d62bf8f01",
    ("thor", "native"): "aeb75361cd23b800e38574196d535d07856afdbac6918944e7cf464d62bf8f01",
    ("spark", "prebuilt"): "4af1d4a7c5a8533183e821a1d5946cf1a59a0892b4c01b44fc78ed304f32c2a5",
    ("thor", "prebuilt"): "af7dfe3878f59347b5614b4a42da482c0939727bfbbbacab2322eff825a5a031",
}


def _eff(target: str, road: str, **more):
    over: dict = {"mode": "compile", **more}
    if road == "emulated":
        over["toolchain"] = "emulated"
    if road == "prebuilt":
        over.update(mode="prebuilt", vllm_wheel="0.33.0")
    return resolve(load_spec(target, overrides=over),
                   builder=Builder("arm64" if road == "native" else "amd64"))


def _render(eff) -> str:
    return render_dockerfile(eff, {"A": "1"}, read_build_layout(FAKE_VLLM))


@pytest.mark.parametrize("case", sorted(BEFORE_DIST))
def test_without_dist_every_road_renders_byte_for_byte_as_before(case):
    text = _render(_eff(*case))
    assert hashlib.sha256(text.encode()).hexdigest() == BEFORE_DIST[case], case


def _build_step(text: str) -> str:
    return text.split("AS build\n", 1)[1].split("\nFROM ", 1)[0]


def test_the_dist_block_launches_sccache_with_its_config_as_a_secret_and_no_token():
    eff = _eff("spark", "cross", dist=SCHEDULER, dist_token_file="/nonexistent/token")
    step = _build_step(_render(eff))
    assert "--mount=type=bind,from=edgevllm-sccache,target=/opt/edgevllm-sccache" in step
    assert ("--mount=type=secret,id=sccache-dist,target=/run/secrets/sccache-dist,required=true"
            in step)
    assert 'export PATH="/opt/edgevllm-sccache:$PATH" SCCACHE_CONF=/run/secrets/sccache-dist' \
        in step
    # sccache 0.16 distributes nvcc only with the one-word spelling of the target folder
    assert ('NVCC_PREPEND_FLAGS="-ccbin aarch64-linux-gnu-g++ --target-directory=sbsa-linux"'
            in step)
    assert "sed -i 's|-target-dir sbsa-linux|--target-directory=sbsa-linux|'" in step
    # ccache's remote storage is never in a job's environment: not exported, unset
    assert "CCACHE_REMOTE_STORAGE=\"$(cat" not in step
    assert "unset CCACHE_REMOTE_STORAGE CCACHE_RESHARE" in step
    assert "sccache --show-stats --stats-format json | python3 " in step
    assert step.index("sccache --zero-stats") < step.index("pip wheel -v --no-index") \
        < step.index("sccache --show-stats")
    for secret in (TOKEN, "172.17.0.1", "10600", "/nonexistent/token"):
        assert secret not in _render(eff)


def test_the_compile_key_is_the_same_with_and_without_dist():
    plain = _eff("spark", "cross")
    dist = _eff("spark", "cross", dist=SCHEDULER)
    args = ({"vllm": "tree"}, {"VLLM_VERSION": "0.1.0"})
    key = compile_key(_render(plain), *args)
    # the --dist text itself would change the key: modes/compile.py hashes the text without it
    assert compile_key(_render(dist), *args) != key
    assert compile_key(_render(client.without_dist(dist)), *args) == key
    assert client.without_dist(dist).spec.dist is None and dist.spec.dist == SCHEDULER


def test_a_mode_that_does_not_compile_refuses_dist_in_one_line():
    with pytest.raises(SpecError) as caught:
        _eff("spark", "prebuilt", dist=SCHEDULER)
    text = str(caught.value)
    assert "'dist' (--dist, --dist-token-file)" in text and "\n" not in text


def test_an_emulated_compile_refuses_dist_in_one_line():
    with pytest.raises(ConfigError, match="--dist: this emulated compile .* drop --dist"):
        client.check_road(_eff("spark", "emulated", dist=SCHEDULER))
    with pytest.raises(ConfigError, match="--dist 'redis://x:1' is not sccache://HOST:PORT"):
        client.check_road(_eff("spark", "cross", dist="redis://x:1"))


class _Scheduler(http.server.BaseHTTPRequestHandler):
    asked = 0  # requests since the fixture started

    def do_GET(self):  # noqa: N802 - http.server's name
        type(self).asked += 1
        body = json.dumps({"num_servers": 2, "num_cpus": 32, "in_progress": 0}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):  # noqa: N802
        type(self).asked += 1
        ok = self.headers.get("Authorization") == f"Bearer {TOKEN}"
        self.send_response(400 if ok else 401)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def scheduler():
    _Scheduler.asked = 0
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Scheduler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"sccache://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _token_file(tmp_path: Path, token: str = TOKEN) -> str:
    path = tmp_path / "client.token"
    path.write_text(token + "\n")
    path.chmod(0o600)
    return str(path)


def test_a_serving_pool_gives_the_preflight_line_and_the_secret(scheduler, tmp_path):
    found = client.check(_eff("spark", "cross", dist=scheduler,
                              dist_token_file=_token_file(tmp_path)))
    assert found is not None
    line = found.preflight_line(190)
    assert "2 worker(s), 32 core(s)" in line and "190 CUDA units projected" in line
    assert TOKEN not in line
    secrets, env = found.secret()
    assert secrets == [f"id=sccache-dist,env={client.SECRET_ENV}"]  # the token in no argument
    assert f'token = "{TOKEN}"' in env[client.SECRET_ENV]


def test_a_wrong_token_or_no_scheduler_is_one_line_naming_dist(scheduler, tmp_path):
    wrong = _token_file(tmp_path, "sccd_" + "y" * 43)
    with pytest.raises(DistPoolError) as caught:
        client.check(_eff("spark", "cross", dist=scheduler, dist_token_file=wrong))
    assert str(caught.value).startswith(f"--dist {scheduler}: ")
    assert "refuses the token" in str(caught.value) and "\n" not in str(caught.value)
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    with pytest.raises(DistPoolError, match="cannot be reached .* build without --dist"):
        client.check(_eff("spark", "cross", dist=f"sccache://127.0.0.1:{port}",
                          dist_token_file=_token_file(tmp_path)))


def test_without_a_token_dist_says_where_to_give_it(scheduler, monkeypatch):
    monkeypatch.delenv(client.TOKEN_ENV, raising=False)
    with pytest.raises(ConfigError, match="--dist-token-file FILE"):
        client.check(_eff("spark", "cross", dist=scheduler))


def test_sccache_stats_reach_the_build_summary():
    stats = {"stats": {"dist_compiles": {"10.0.0.5:10601": 20, "10.0.0.6:10602": 6},
                       "dist_errors": 1,
                       "cache_misses": {"counts": {"CUDA": 28, "C/C++": 2}},
                       "requests_not_compile": 3, "compile_fails": 0,
                       "not_cached": {"multiple input files": 1}}}
    lines = [f"{name} {value}" for name, value in
             ((f"{inimage_stats.MARKER} {k}", v)
              for k, v in inimage_stats.counts(stats["stats"]).items())]
    assert inimage_stats.MARKER == SCCACHE_STATS_MARKER == client.STATS_MARKER
    follower = BuildFollower()
    for line in lines:
        follower.feed(f"#12 3.0 {line}")
    found = client.summary(follower.sccache)
    assert found == {"distributed": 26, "local": 4, "dist_errors": 1,
                     "workers": {"10.0.0.5:10601": 20, "10.0.0.6:10602": 6},
                     "stats": {"misses:CUDA": 28, "misses:C/C++": 2, "requests_not_compile": 3,
                               "not_cached:multiple_input_files": 1}}
    assert client.describe(found).startswith("dist: 26 unit(s) compiled on the pool, 4 here")


def test_inv_render_with_dist_writes_the_block_and_contacts_no_pool(cli, scheduler, tmp_path):
    out = tmp_path / "r"
    code, _, stderr = cli("render", "--target", "spark", "--compile", "--dist", scheduler,
                          "--dist-token-file", _token_file(tmp_path), "--out", str(out))
    assert code == 0, stderr
    assert "dist: http://127.0.0.1:" in stderr and "not contacted by render" in stderr
    assert _Scheduler.asked == 0, "inv render asked the pool"   # render needs no network
    text = (out / "Dockerfile").read_text()
    assert "--mount=type=secret,id=sccache-dist" in text and TOKEN not in text
    plan = json.loads((out / "build-plan.json").read_text())
    assert plan["contexts"][client.CONTEXT] == client.PLACEHOLDER
    assert TOKEN not in (out / "build-plan.json").read_text() + stderr
    code, _, stderr = cli("render", "--target", "spark", "--mode", "prebuilt", "--vllm-wheel",
                          "0.33.0", "--dist", scheduler, "--out", str(tmp_path / "p"))
    assert code == 2 and "(--dist, " in stderr and "Traceback" not in stderr


def test_the_summary_keeps_the_pool_figures_beside_ccache_s():
    from edgevllm.builder.buildlog import describe_compile_cache
    from edgevllm.builder.tail import compile_cache_report

    class Ran:  # what BuildRunner kept of the compile step's output
        ccache: dict[str, int] = {}
        sccache = {"distributed": 3, "local": 1, "dist_errors": 0, "worker:10.0.0.5:10601": 3}

    found = compile_cache_report(Ran(), _eff("spark", "cross", dist=SCHEDULER))  # type: ignore[arg-type]
    assert found is not None and found["dist"]["distributed"] == 3
    assert describe_compile_cache(found).startswith("compile cache: 0 hits")  # inv build's line


def _lan_address() -> str:
    """This host's address on its default route (a UDP socket sends nothing to connect)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe_socket:
        try:
            probe_socket.connect(("192.0.2.1", 9))
        except OSError:
            pytest.fail("this test needs a non-loopback IPv4 address (a network interface up)")
        found = probe_socket.getsockname()[0]
    assert not found.startswith("127."), found
    return found


def test_the_token_reaches_a_scheduler_on_a_lan_address_over_plain_http(tmp_path):
    """sccache-dist speaks plain http; a pool on the LAN (or Docker's bridge, where a build step
    reaches it) must get the token from the probe as from sccache itself."""
    address = _lan_address()
    server = http.server.ThreadingHTTPServer((address, 0), _Scheduler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"sccache://{address}:{server.server_address[1]}"
        found = client.check(_eff("spark", "cross", dist=url,
                                  dist_token_file=_token_file(tmp_path)))
        assert found is not None and found.status.workers == 2
    finally:
        server.shutdown()
        server.server_close()


def test_a_compile_sccache_never_saw_and_a_fallback_are_warnings(capsys):
    none = {"distributed": 0, "local": 0, "dist_errors": 0, "workers": {}}
    fallback = {"distributed": 0, "local": 1, "dist_errors": 1, "workers": {}}
    healthy = {"distributed": 4, "local": 0, "dist_errors": 0, "workers": {"10.0.0.5:10601": 4}}
    for found in (none, fallback, healthy):
        client.report(found)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("warning: dist: sccache compiled no unit") and "launcher" in lines[0]
    assert lines[1] == ("warning: dist: 0 unit(s) compiled on the pool, 1 here (1 dist error(s), "
                        "each compiled here instead)")
    assert lines[2].startswith("dist: 4 unit(s) compiled on the pool, 0 here")


def test_a_token_file_without_dist_is_refused_in_one_line(tmp_path):
    from edgevllm.specs.buildspec import load_spec

    spec = load_spec("spark", overrides={"mode": "compile",
                                         "dist_token_file": _token_file(tmp_path)})
    with pytest.raises(ConfigError, match="^--dist-token-file is given without --dist"):
        client.refuse_stray_token(spec)
    client.refuse_stray_token(load_spec("spark", overrides={"mode": "compile"}))
