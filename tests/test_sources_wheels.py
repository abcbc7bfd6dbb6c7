"""The prebuilt closure: platform tags, --vllm-wheel input, uv resolution, the wheelhouse.

Real resolutions with uv against PyPI (small packages, a few seconds each); real downloads into
a temporary wheelhouse; a local HTTP server feeds the interrupted-download test.
"""

from __future__ import annotations

import hashlib
import http.server
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from edgevllm.common.errors import ConfigError, SpecError, WheelHashMismatch
from edgevllm.sources import wheelhouse, wheels
from edgevllm.sources.wheelhouse import Wheelhouse, requirements_text
from edgevllm.sources.wheels import (
    Closure,
    ClosureError,
    IndexUnreachable,
    WheelInputError,
    WheelPin,
    check_wheel_fits,
    python_platform,
    python_version_of,
    resolve_closure,
    vllm_requirement,
)

ARM = "aarch64-manylinux_2_34"
X86 = "x86_64-manylinux_2_34"


def test_platforms_map_to_uv_python_platforms():
    assert python_platform("linux/arm64") == ARM
    assert python_platform("linux/amd64") == X86
    assert python_version_of("python3.12") == "3.12" and python_version_of("python3") is None
    with pytest.raises(ConfigError, match="linux/riscv64"):
        python_platform("linux/riscv64")


def test_a_wheel_for_another_platform_or_python_is_one_line_before_any_download():
    check_wheel_fits("vllm-0.33.0-cp38-abi3-manylinux_2_28_aarch64.whl", ARM, "3.12")
    check_wheel_fits("vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl", X86, "3.13")
    with pytest.raises(WheelInputError, match="does not install on the target") as err:
        check_wheel_fits("vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl", ARM, "3.12")
    assert "\n" not in str(err.value)
    with pytest.raises(WheelInputError, match="Python 3.13"):
        check_wheel_fits("torch-2.14.0-cp312-cp312-manylinux_2_28_aarch64.whl", ARM, "3.13")
    with pytest.raises(WheelInputError, match="manylinux_2_39"):
        check_wheel_fits("x-1.0-py3-none-manylinux_2_39_aarch64.whl", ARM, "3.12")


def test_vllm_wheel_argument_forms(tmp_path):
    assert vllm_requirement("0.33.0", ARM, "3.12") == "vllm==0.33.0"
    assert vllm_requirement("v0.33.0", ARM, "3.12") == "vllm==0.33.0"
    url = "https://example.org/w/vllm-0.33.0-cp38-abi3-manylinux_2_28_aarch64.whl"
    assert vllm_requirement(url, ARM, "3.12") == f"vllm @ {url}"
    with pytest.raises(WheelInputError, match="no such file"):
        vllm_requirement(str(tmp_path / "vllm-0.33.0-cp38-abi3-linux_aarch64.whl"), ARM, "3.12")
    with pytest.raises(WheelInputError, match="give a version"):
        vllm_requirement("latest please", ARM, "3.12")
    local = tmp_path / "vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    local.write_bytes(b"not really a wheel")
    with pytest.raises(WheelInputError, match="does not install"):
        vllm_requirement(str(local), ARM, "3.12")
    assert vllm_requirement(str(local), X86, "3.12") == f"vllm @ {local.as_uri()}"


def test_resolve_picks_the_target_platform_wheel_with_overrides_and_hashes():
    closure = resolve_closure(["requests==2.32.3", "pyyaml==6.0.2"], platform=ARM,
                              python_version="3.12", overrides=["urllib3==2.2.3"])
    pyyaml, urllib3 = closure.pin("pyyaml"), closure.pin("urllib3")
    assert pyyaml is not None and urllib3 is not None
    assert "cp312" in pyyaml.filename and "aarch64" in pyyaml.filename
    assert urllib3.version == "2.2.3" and closure.overrides == ["urllib3==2.2.3"]
    assert {p.name for p in closure.pins} >= {"requests", "idna", "certifi", "charset-normalizer"}
    assert all(len(p.sha256) == 64 and p.url.endswith(p.filename) for p in closure.pins)
    assert Closure.from_dict(closure.to_dict()).pins == closure.pins
    text = requirements_text(closure)
    assert f"pyyaml==6.0.2 --hash=sha256:{pyyaml.sha256}" in text


def test_an_override_with_a_false_marker_removes_a_package():
    closure = resolve_closure(["requests==2.32.3"], platform=X86, python_version="3.12",
                              overrides=["charset-normalizer ; sys_platform == 'edgevllm-never'"])
    assert closure.pin("charset-normalizer") is None and closure.pin("requests")


def test_unknown_vllm_version_is_one_line():
    with pytest.raises(ClosureError, match=r"unknown vLLM version: vllm==0\.0\.999") as err:
        resolve_closure(["vllm==0.0.999"], platform=ARM, python_version="3.12")
    assert "\n" not in str(err.value)


def test_a_package_without_a_wheel_names_it_and_what_pulled_it():
    # docopt 0.6.2 exists only as an sdist; nothing is built on the host (--no-build).
    with pytest.raises(ClosureError, match=r"^docopt \(required by the requested packages\) "
                                           r"has no wheel for .*--package docopt==VER") as err:
        resolve_closure(["docopt==0.6.2"], platform=ARM, python_version="3.12")
    assert "\n" not in str(err.value)
    with pytest.raises(ClosureError, match=r"^docopt \(required by pykwalify\) has no wheel"):
        resolve_closure(["pykwalify==1.8.0"], platform=ARM, python_version="3.12")


def test_every_resolve_passes_no_build(tmp_path):
    """The argv of every resolve (closure, build tools, the failure path's annotations) is
    _compile_args's, and it holds uv's --no-build: no build backend runs on the host."""
    args = wheels._compile_args(tmp_path, ["six"], X86, "3.12", ["idna==3.7"], ["http://x/s"])
    assert wheels.NO_BUILD == "--no-build" and wheels.NO_BUILD in args
    out = subprocess.run([wheels.uv_binary(), "pip", "compile", "--help"], capture_output=True,
                         text=True, check=True).stdout
    assert re.search(r"^\s+--no-build$", out, re.M), "this uv has no --no-build"


class _IndexHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def test_an_sdist_only_package_is_one_line_and_its_build_never_runs(tmp_path):
    """A real resolve against a PEP 503 index on 127.0.0.1 whose one package is an sdist with
    a build backend that writes a canary: uv stops (--no-build), the canary stays unwritten,
    and the error is one line naming the package and the way out."""
    import functools

    from support.hostile_requirements import SDIST_NAME, sdist_only_index

    canary = tmp_path / "CANARY"
    root = sdist_only_index(tmp_path / "index", canary).parent
    handler = functools.partial(_IndexHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(ClosureError) as err:
            resolve_closure([SDIST_NAME], platform=X86, python_version="3.12",
                            indexes=[f"http://127.0.0.1:{server.server_address[1]}/simple"])
    finally:
        server.shutdown()
    assert not canary.exists(), canary.read_text()
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{SDIST_NAME} (required by the "), message
    assert f"--package {SDIST_NAME}==VER" in message and "docs/security.md" in message


def test_an_unreachable_index_is_named_with_the_offline_path():
    with pytest.raises(IndexUnreachable, match=r"http://127\.0\.0\.1:9/simple.*--lock"):
        resolve_closure(["six"], platform=ARM, python_version="3.12",
                        indexes=["http://127.0.0.1:9/simple"])


@pytest.fixture(scope="module")
def six_pin():
    return resolve_closure(["six==1.16.0"], platform=X86, python_version="3.12").pin("six")


def test_wheelhouse_is_content_addressed_and_assembles_links_with_hashes(six_pin, tmp_path):
    house = Wheelhouse(tmp_path / "cache")
    house.fetch([six_pin])
    cached = house.path_for(six_pin)
    assert cached == tmp_path / "cache" / "sha256" / six_pin.sha256 / six_pin.filename
    closure = Closure(python_platform=X86, python_version="3.12", requirements=["six"],
                      pins=[six_pin])
    folder = house.assemble(closure, tmp_path / "build" / "wh")
    assert (folder / six_pin.filename).stat().st_ino == cached.stat().st_ino
    assert six_pin.sha256 in (folder / "requirements.txt").read_text()
    assert house.missing([six_pin]) == []
    kept = house.assemble(closure)
    assert kept == house.set_folder(closure) and kept.parent.name == "sets"
    stamp = (kept / "requirements.txt").stat().st_mtime_ns
    assert house.assemble(closure) == kept  # reused untouched: BuildKit sees the same files
    assert (kept / "requirements.txt").stat().st_mtime_ns == stamp


def test_the_modes_vllm_is_in_the_folder_but_not_in_the_closures_requirements(tmp_path):
    """``over``: the mode's vLLM stays a wheel of the folder (precompiled's build reads it) and
    a pin of the lock, but the closure stage's requirements.txt leaves it to
    requirements-mode.txt, which the stage vllm-files installs."""
    from support.wheelhouse import cached_pins

    house = Wheelhouse(tmp_path / "cache")
    pins = cached_pins(house, ("idna", "vllm"))
    closure = Closure(python_platform=X86, python_version="3.12", requirements=["vllm"],
                      pins=pins)
    folder = house.assemble(closure, over=("vllm",))
    closure_text = (folder / "requirements.txt").read_text()
    mode_text = (folder / "requirements-mode.txt").read_text()
    assert pins[0].requirement_line() in closure_text and "vllm==" not in closure_text
    assert pins[1].requirement_line() in mode_text and "idna" not in mode_text
    assert (folder / pins[1].filename).is_file()
    whole = house.assemble(closure)   # nothing left out: another folder, no mode file
    assert whole != folder and whole == house.set_folder(closure)
    assert "vllm==" in (whole / "requirements.txt").read_text()
    assert not (whole / "requirements-mode.txt").exists()
    assert house.assemble(closure, over=("flashinfer-python",)) == whole   # not in the closure


def test_a_changed_cached_wheel_is_refused_and_named(six_pin, tmp_path):
    house = Wheelhouse(tmp_path / "cache")
    house.fetch([six_pin])
    house.path_for(six_pin).write_bytes(b"tampered")
    closure = Closure(python_platform=X86, python_version="3.12", requirements=[],
                      pins=[six_pin])
    with pytest.raises(WheelHashMismatch, match=six_pin.filename) as err:
        house.assemble(closure, tmp_path / "wh")
    assert "nothing installed" in str(err.value) and not (tmp_path / "wh").exists()


def test_a_download_with_the_wrong_hash_leaves_nothing_under_its_name(six_pin, tmp_path):
    wrong = WheelPin(**{**six_pin.__dict__, "sha256": "0" * 64})
    house = Wheelhouse(tmp_path / "cache")
    with pytest.raises(WheelHashMismatch, match="nothing installed"):
        house.fetch([wrong])
    assert not any(house.path_for(wrong).parent.iterdir())


class _SlowHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Length", str(50 << 20))
        self.end_headers()
        for _ in range(500):
            self.wfile.write(b"x" * (100 << 10))
            time.sleep(0.05)

    def log_message(self, *args):
        pass


def test_ctrl_c_during_a_download_leaves_no_partial_wheel(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _SlowHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/big-1.0-py3-none-any.whl"
    script = textwrap.dedent(f"""
        from pathlib import Path
        from edgevllm.sources.wheelhouse import Wheelhouse
        from edgevllm.sources.wheels import WheelPin
        pin = WheelPin(name="big", version="1.0", filename="big-1.0-py3-none-any.whl",
                       sha256="1" * 64, url="{url}")
        print("start", flush=True)
        Wheelhouse(Path({str(tmp_path / 'cache')!r})).fetch([pin])
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "start"
        deadline = time.time() + 30
        while time.time() < deadline and not list((tmp_path / "cache").rglob(".*.tmp-*")):
            time.sleep(0.1)
        assert list((tmp_path / "cache").rglob(".*.tmp-*")), "the download never started"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) != 0
    finally:
        proc.kill()
        server.shutdown()
    left = [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    assert left == []


def test_uv_is_never_asked_to_fetch_an_interpreter():
    assert wheels.uv_env()["UV_PYTHON_DOWNLOADS"] == "never"
    assert os.path.exists(wheels.uv_binary())


# --- modes in the spec ---------------------------------------------------------------------------

def test_mode_is_chosen_with_a_reason_and_bad_combinations_are_refused():
    from edgevllm.specs.buildspec import load_spec, resolve

    eff = resolve(load_spec("spark", None, {"vllm_wheel": "0.33.0"}))
    assert eff.mode == "prebuilt" and "--vllm-wheel 0.33.0" in eff.mode_reason
    assert eff.images.runtime == eff.target.prebuilt.image and eff.python == "python3.12"
    assert resolve(load_spec("thor", None, {})).mode == "compile"
    with pytest.raises(SpecError, match="vllm_wheel"):
        resolve(load_spec("spark", None, {"mode": "compile", "vllm_wheel": "0.33.0"}))
    based = resolve(load_spec("spark", None, {"mode": "prebuilt", "base_image": "b:1"}))
    assert based.images.build == based.images.runtime == "b:1"


def test_flags_reach_the_spec():
    from edgevllm.cli.flags import spec_overrides

    data = spec_overrides({"vllm_wheel": "0.33.0", "override": ["certifi>=2026.10.18"],
                           "base_image": "img:1", "mode": "prebuilt"})
    assert data == {"vllm_wheel": "0.33.0", "overrides": ["certifi>=2026.10.18"],
                    "base_image": "img:1", "mode": "prebuilt"}


def test_prebuilt_dockerfile_installs_the_closure_offline_by_hash():
    from edgevllm.builder.render import render_dockerfile
    from edgevllm.specs.buildspec import load_spec, resolve

    text = render_dockerfile(resolve(load_spec("thor", None, {"vllm_wheel": "0.33.0"})))
    closure = text[text.index("AS closure-files"):text.index("##### runtime")]
    runtime = text[text.index("##### runtime"):]
    assert "--no-deps" in closure and "--require-hashes" in closure and "UV_NO_CACHE=1" in closure
    assert "--mount=type=bind,from=wheelhouse,target=/wheelhouse" in closure
    assert "from=wheels" not in text and '"torch==' not in text
    assert "ENV CUDA_HOME=/usr/local/cuda" in closure and "FROM vllm-files AS runtime" in runtime
    # The release wheel over the closure, by its pin in the wheelhouse's requirements-mode.txt.
    vllm = closure[closure.index("AS vllm-files"):closure.index("AS vllm-bytecode")]
    assert "--require-hashes" in vllm and "-r /wheelhouse/requirements-mode.txt" in vllm
    assert "pip uninstall -y flashinfer-cubin" in runtime
    assert 'io.edgevllm.mode="prebuilt"' in runtime


def test_prebuilt_overrides_come_from_target_mods_and_user():
    from edgevllm.builder.modes.closure import NEVER, closure_overrides
    from edgevllm.specs.buildspec import load_spec, resolve

    eff = resolve(load_spec("thor", None, {"vllm_wheel": "0.33.0",
                                           "overrides": ["certifi>=2026.10.18"],
                                           "packages": {"fastsafetensors": "=0.5.0"}}))
    overrides = closure_overrides(eff, ["fastsafetensors==0.5.0"])
    assert overrides[0] == "torch==2.14.0"
    assert "flashinfer-python==0.7.2.post1" in overrides and "fastsafetensors==0.5.0" in overrides
    assert f"flashinfer-cubin ; {NEVER}" in overrides and overrides[-1] == "certifi>=2026.10.18"


def test_prebuilt_installs_every_pinned_package_even_one_vllm_does_not_ask_for():
    """A recipe's InstantTensor is nobody's dependency: as a requirement it joins the closure
    (an override alone pins only what something asks for)."""
    from edgevllm.builder.modes.closure import release_inputs
    from edgevllm.specs.buildspec import load_spec, resolve

    eff = resolve(load_spec("spark", None, {"vllm_wheel": "0.33.0",
                                            "packages": {"instanttensor": "0.2.2",
                                                         "nvidia-cutlass-dsl": None}}))
    inputs = release_inputs(eff, [])
    assert inputs["requirements"][0] == "vllm==0.33.0"
    assert inputs["requirements"][2:] == ["flashinfer-python==0.7.2.post1",
                                          "instanttensor==0.2.2"]
    assert "instanttensor==0.2.2" in inputs["overrides"]


def test_probe_judges_flashinfers_jit_toolchain():
    from edgevllm.common.labels import EXTENSIONS
    from edgevllm.probe.level1 import judge_jit
    from edgevllm.probe.result import FAIL, PASS, WARN, ProbeResult

    def verdict(jit, image_labels=None):
        result = ProbeResult(image="i", target="spark", level=1)
        judge_jit(result, {"jit": jit} if jit is not None else {}, image_labels or {})
        return [(c.status, c.message) for c in result.checks]

    assert verdict(None) == []
    ok = {"nvcc": "/usr/local/cuda/bin/nvcc", "cxx": "/usr/bin/g++", "ninja": "/opt/venv/bin/ninja",
          "compiled": True, "arch": "sm_121a", "triton_ptxas": "/usr/local/cuda/bin/ptxas"}
    assert verdict(ok)[0][0] == PASS
    status, message = verdict({**ok, "nvcc": None})[0]
    assert status == FAIL and "nvcc" in message and "nvidia-cuda-nvcc" in message
    status, message = verdict({**ok, "compiled": False, "error": "unsupported gpu"})[0]
    assert status == FAIL and "sm_121a" in message and "unsupported gpu" in message
    # a partial kernel build says it cannot serve: the same findings warn
    partial = {EXTENSIONS: '{"partial":true,"extensions":["spinloop"],"serves":false}'}
    status, message = verdict({**ok, "nvcc": None}, partial)[0]
    assert status == WARN and "nvidia-cuda-nvcc" in message and "cannot serve" in message
    whole = {EXTENSIONS: '{"partial":false,"left_out":["_vllm_fa3_C"],"serves":true}'}
    assert verdict({**ok, "nvcc": None}, whole)[0][0] == FAIL
    assert verdict({**ok, "nvcc": None}, {EXTENSIONS: "not json"})[0][0] == FAIL


# --- no login of the user's reaches an index or a wheel others chose (issue 42, item 3) ----------

WHEEL = b"the bytes of a wheel"
WHEEL_PIN = WheelPin(name="tiny", version="1.0", filename="tiny-1.0-py3-none-any.whl",
                     sha256=hashlib.sha256(WHEEL).hexdigest(), size=len(WHEEL))


def _netrc_home(tmp_path, monkeypatch) -> Path:
    """A temporary HOME whose ~/.netrc has a login for 127.0.0.1 (the local servers' host)."""
    from test_common_http import netrc_login

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("NETRC", raising=False)
    netrc_login(home / ".netrc")
    return home


def test_a_wheel_download_carries_no_netrc_login(tmp_path, monkeypatch):
    """A lock may pin a wheel on any host: requests would send the user's ~/.netrc login for it
    (the control); the wheelhouse's download sends none, and keeps the hash check."""
    import requests
    from test_common_http import answer, scripted

    _netrc_home(tmp_path, monkeypatch)
    with scripted({"/tiny.whl": answer(body=WHEEL)}) as (base, seen):
        requests.get(f"{base}/tiny.whl", timeout=10)
        assert seen[0].get("authorization", "").startswith("Basic "), "the control sent none"
        seen.clear()
        house = Wheelhouse(tmp_path / "cache")
        pin = WheelPin(**{**WHEEL_PIN.__dict__, "url": f"{base}/tiny.whl"})
        house.fetch([pin])
    assert house.path_for(pin).read_bytes() == WHEEL
    assert [s["path"] for s in seen] == ["/tiny.whl"]
    assert not any("authorization" in s for s in seen), seen


def test_a_trickling_wheel_server_ends_at_the_deadline_in_one_line(tmp_path):
    """A server sending a byte every 0.2 s never lets a per-read timeout fire; the download's
    deadline (1 s here; by default a floor and the pin's size at a minimum rate) ends it in one
    line, and nothing stays in the wheelhouse."""
    from test_common_http import scripted, trickle

    sent, done = [0], threading.Event()
    with scripted({"/slow.whl": trickle(100, 0.2, sent, done, False)}) as (base, _):
        pin = WheelPin(**{**WHEEL_PIN.__dict__, "url": f"{base}/slow.whl", "size": 100})
        house = Wheelhouse(tmp_path / "cache")
        with pytest.raises(ClosureError) as info:
            house.fetch([pin], seconds=1)
        assert done.wait(60)
    assert sent[0] < 100, "the download went on past its deadline"
    assert re.fullmatch(rf"downloading {pin.filename}: {base}/slow.whl did not arrive within the "
                        r"1 s a download may take \(\d+ bytes by then\); .*builds offline\)",
                        str(info.value))
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    assert wheelhouse.stream_bounded is not None and wheelhouse.MAX_WHEEL == 4 << 30


def test_a_wheel_larger_than_its_pin_is_cut_off_at_its_size(tmp_path):
    from test_common_http import answer, scripted

    with scripted({"/big.whl": answer(body=WHEEL * 100)}) as (base, _):
        pin = WheelPin(**{**WHEEL_PIN.__dict__, "url": f"{base}/big.whl"})
        with pytest.raises(ClosureError, match=rf"is over the {len(WHEEL)} bytes a download"):
            Wheelhouse(tmp_path / "cache").fetch([pin])
    from edgevllm.common.http import download_seconds

    assert download_seconds(1 << 30) == 60 + 2048   # a 1 GiB wheel: 35 min at most


def test_uv_gets_the_users_logins_only_for_the_users_own_indexes(tmp_path, monkeypatch):
    """An index a recipe, a --spec or a lock names (not PyPI, not a target file's
    torch.index_url) is resolved with NETRC on an empty file, uv's stored logins on an empty
    folder, no keyring and no UV_INDEX_<NAME>_PASSWORD; the target's own index keeps them."""
    monkeypatch.setenv("UV_INDEX_MIRROR_PASSWORD", "s3cret")
    monkeypatch.delenv("NETRC", raising=False)
    others = wheels.resolve_env(tmp_path, ["https://mirror.example/simple"])
    assert Path(others["NETRC"]).read_text() == "" and others["NETRC"].startswith(str(tmp_path))
    assert not any(Path(others["UV_CREDENTIALS_DIR"]).iterdir())
    assert others["UV_KEYRING_PROVIDER"] == "disabled"
    assert "UV_INDEX_MIRROR_PASSWORD" not in others
    mixed = wheels.resolve_env(tmp_path, [wheels.PYPI, "https://mirror.example/simple/"])
    assert "NETRC" in mixed
    own = wheels.resolve_env(tmp_path, ["https://download.pytorch.org/whl/cu130/"])
    assert "NETRC" not in own and own["UV_INDEX_MIRROR_PASSWORD"] == "s3cret"
    assert wheels.resolve_env(tmp_path, []) == wheels.uv_env()


class _LoginIndex(http.server.BaseHTTPRequestHandler):
    """An index that asks for a login (401) and records each request's headers."""

    seen: list[dict[str, str]] = []

    def do_GET(self):  # noqa: N802 - http.server's name
        self.seen.append({"path": self.path, **{k.lower(): v for k, v in self.headers.items()}})
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="index"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_HEAD = do_GET  # noqa: N815 - http.server's name

    def log_message(self, *args):
        pass


def test_a_resolve_over_an_index_others_chose_never_sends_the_users_netrc(tmp_path, monkeypatch):
    """Real uv, a real index on 127.0.0.1 that asks for a login, a ~/.netrc with one for it:
    with the index named by a target file of the user's (the control) uv sends the login; named
    by anything else (a recipe, a lock) neither uv nor the index check sends it."""
    home = _netrc_home(tmp_path, monkeypatch)
    monkeypatch.setenv("UV_CACHE_DIR", str(home / "uv-cache"))
    _LoginIndex.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _LoginIndex)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    index = f"http://127.0.0.1:{server.server_address[1]}/simple"
    try:
        with pytest.raises(ClosureError):
            resolve_closure(["six"], platform=X86, python_version="3.12", indexes=[index])
        asked = list(_LoginIndex.seen)
        targets = tmp_path / "targets"
        targets.mkdir()
        text = (Path(__file__).parents[1] / "targets" / "spark.yaml").read_text()
        (targets / "spark.yaml").write_text(text.replace(
            "https://download.pytorch.org/whl/cu130", index))
        monkeypatch.setenv("EDGEVLLM_TARGETS_PATH", str(targets))
        _LoginIndex.seen = []
        with pytest.raises(ClosureError):
            resolve_closure(["six"], platform=X86, python_version="3.12", indexes=[index])
        control = list(_LoginIndex.seen)
    finally:
        server.shutdown()
        server.server_close()
    assert any(s["path"].startswith("/simple/six") for s in asked), asked
    assert not any("authorization" in s for s in asked), asked
    assert any(s.get("authorization", "").startswith("Basic ") for s in control), \
        "the control: uv did not send the login for the user's own index"
