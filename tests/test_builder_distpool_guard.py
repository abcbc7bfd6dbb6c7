"""What keeps a --dist build from shipping what a pool got wrong (builder/distpool/guard.py,
objcheck.py, inimage_check.py).

- The in-image check, run for real: a stand-in "worker" (the sccache next to the check) that
  compiles honestly passes; one that flips a byte of the object's code is caught in one line
  and the unit fails; the sample is the first unit plus one in N. The compiler is the host's
  gcc under the name nvcc (the check takes nvcc's units only), the objects real ELF files.
- A failed --dist compile: a mismatch the check logged is the build's one line; a pool that
  changed under the build (its token now refused, its scheduler gone) is the pool's line with
  the way out; a pool that still serves, or no --dist, leaves the compile's own error. Against a
  real local HTTP scheduler (test_builder_dist_client's)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from test_builder_dist_client import SCHEDULER, _eff, _token_file, scheduler  # noqa: F401

from edgevllm.builder.distpool import guard, objcheck
from edgevllm.common.errors import BuildError, DistPoolError

COMPILE_FAILED = "compile (wheels stage) failed after 0m12s: … exit status 254 …"
HONEST = "#!/bin/sh\nexec \"$@\"\n"
# A worker gone bad: the object it returns has one byte of its code flipped.
LYING = f"""#!{sys.executable}
import subprocess, sys
code = subprocess.call(sys.argv[1:])
out = sys.argv[sys.argv.index("-o") + 1]
data = bytearray(open(out, "rb").read())
import struct
shoff, = struct.unpack_from("<Q", data, 40)
es, n, sx = struct.unpack_from("<HHH", data, 58)
sec = lambda k: struct.unpack_from("<IIQQQQ", data, shoff + k * es)
names = sec(sx)[4]
for k in range(n):
    name_at, _, _, _, offset, size = sec(k)
    if data[names + name_at:].startswith(b".text\\0") and size:
        data[offset] ^= 1
open(out, "wb").write(bytes(data))
sys.exit(code)
"""


@pytest.fixture
def step(tmp_path):
    """The edgevllm-sccache context as the compile step sees it, gcc as nvcc, a C unit."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.fail("the check's test compiles with the host's gcc: apt-get install gcc")
    context = tmp_path / "context"
    objcheck.stage_check(context)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvcc").symlink_to(gcc)
    for n in (1, 2):
        (tmp_path / f"unit{n}.c").write_text(f"int f{n}(int x) {{ return x * {n + 6}; }}\n")
    return context, bin_dir, tmp_path


def _run(step, worker: str, unit: int = 1, every: int = 0) -> subprocess.CompletedProcess:
    context, bin_dir, work = step
    (context / "sccache").write_text(worker)
    (context / "sccache").chmod(0o755)
    scratch = work / "tmp"
    scratch.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(scratch), "EDGEVLLM_DIST_CHECK_EVERY": str(every)}
    script = context / objcheck.CHECK_DIR / objcheck.CHECK_SCRIPT
    return subprocess.run([sys.executable, str(script), str(bin_dir / "nvcc"), "-O2", "-c",
                           str(work / f"unit{unit}.c"), "-o", str(work / f"unit{unit}.o")],
                          env=env, capture_output=True, text=True, cwd=work)


def test_an_honest_worker_s_object_is_compared_and_passes(step):
    done = _run(step, HONEST)
    assert done.returncode == 0, done.stderr
    assert f"{objcheck.CHECK_MARKER} same " in done.stderr


def test_a_worker_s_corrupt_object_fails_the_unit_in_one_line(step):
    done = _run(step, LYING)
    lines = [line for line in done.stderr.splitlines() if objcheck.CHECK_MARKER in line]
    assert done.returncode == 1 and len(lines) == 1, done.stderr
    assert lines[0].startswith(f"{objcheck.CHECK_MARKER} mismatch ") and ".text" in lines[0]


def test_the_sample_is_the_first_unit_and_one_in_n(step):
    assert _run(step, LYING, unit=1).returncode == 1          # the build's first unit
    assert _run(step, LYING, unit=2, every=0).returncode == 0   # then none: not compared
    assert _run(step, LYING, unit=2, every=1).returncode == 1   # one in 1: every unit


def test_the_shim_sends_nvcc_through_the_check_and_the_rest_straight(step):
    context, _, _ = step
    shim = (context / objcheck.CHECK_DIR / "sccache").read_text()
    assert f'exec python3 "{objcheck.SCCACHE_MOUNT}/check/inimage_check.py"' in shim
    assert f'exec "{objcheck.SCCACHE_MOUNT}/sccache" "$@"' in shim


def test_a_mismatch_in_the_log_is_the_build_s_one_line(scheduler, tmp_path):
    log = tmp_path / "build.log"
    log.write_text("#12 40.1 edgevllm-dist-check mismatch build/kernels.o (sections .text)\n")
    eff = _eff("spark", "cross", dist=scheduler, dist_token_file=_token_file(tmp_path))
    with pytest.raises(DistPoolError) as caught, guard.explained(eff, log):
        _fail()
    text = str(caught.value)
    assert "worker returned for build/kernels.o differs" in text and "without --dist" in text
    assert "\n" not in text


def _fail() -> None:
    raise BuildError(COMPILE_FAILED)


def test_a_token_refused_mid_build_is_the_pool_s_line_and_the_way_out(scheduler, tmp_path):
    wrong = _token_file(tmp_path, "sccd_" + "y" * 43)   # the pool took new tokens meanwhile
    eff = _eff("spark", "cross", dist=scheduler, dist_token_file=wrong)
    with pytest.raises(DistPoolError) as caught, guard.explained(eff, tmp_path / "none.log"):
        _fail()
    text = str(caught.value)
    assert text.startswith(f"--dist {scheduler}: ") and "refuses the token" in text, text
    assert "client.token" in text and "without --dist" in text and "\n" not in text


def test_a_scheduler_gone_mid_build_is_the_pool_s_line(tmp_path):
    with socket.socket() as sock:   # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    eff = _eff("spark", "cross", dist=f"sccache://127.0.0.1:{port}",
               dist_token_file=_token_file(tmp_path))
    with pytest.raises(DistPoolError, match="cannot be reached.*without --dist"), \
            guard.explained(eff, tmp_path / "none.log"):
        _fail()


def test_the_pool_is_asked_with_the_token_the_build_holds(scheduler, tmp_path):
    wrong = _token_file(tmp_path, "sccd_" + "y" * 43)   # what the build read and sent
    eff = _eff("spark", "cross", dist=scheduler, dist_token_file=wrong)
    with pytest.raises(DistPoolError, match="refuses the token"), \
            guard.explained(eff, tmp_path / "none.log"):
        _token_file(tmp_path)   # the pool's new token written over the file meanwhile
        _fail()


def test_a_pool_that_still_serves_leaves_the_compile_s_own_error(scheduler, tmp_path):
    eff = _eff("spark", "cross", dist=scheduler, dist_token_file=_token_file(tmp_path))
    with pytest.raises(BuildError) as caught, guard.explained(eff, tmp_path / "none.log"):
        _fail()
    assert str(caught.value) == COMPILE_FAILED


def test_without_dist_the_compile_s_error_is_untouched(tmp_path):
    with pytest.raises(BuildError) as caught, \
            guard.explained(_eff("spark", "cross"), tmp_path / "none.log"):
        _fail()
    assert str(caught.value) == COMPILE_FAILED and not isinstance(caught.value, DistPoolError)


def test_the_dist_block_puts_the_check_first_on_path():
    from test_builder_dist_client import _build_step, _render

    step = _build_step(_render(_eff("spark", "cross", dist=SCHEDULER,
                                    dist_token_file="/nonexistent/token")))
    assert (f'export PATH="/opt/edgevllm-sccache/check:$PATH" '
            f'EDGEVLLM_DIST_CHECK_EVERY={objcheck.CHECK_EVERY}') in step
    assert step.index("/check:$PATH") < step.index("sccache --start-server")
    assert Path(guard.__file__).with_name(objcheck.CHECK_SCRIPT).is_file()
