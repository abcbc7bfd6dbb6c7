"""Probe level 2: serve, wait for /health, /v1/models, one chat completion, log signatures,
and removal of the server container in every case (success, failure, timeout, early exit,
Ctrl-C, SIGTERM).

There is no GPU here, so vLLM cannot serve: the server is a fixture image whose ``vllm``
executable is a small stdlib HTTP server (tests/support/probe_fixture/fake_vllm_serve.py) with
the same endpoints, steered by FAKE_VLLM_* variables (log lines, start-up delay, never healthy,
early exit, chat failure). Everything else is real: the Docker engine, the published port, the
HTTP calls, the container's log and its removal.
"""

from __future__ import annotations

import json
import signal
import time
import uuid
from typing import Any

import pytest

from edgevllm.probe import ProbeTarget, ServeSettings, probe_level2
from support.checks import check_of
from support.probe_images import probe_cli

pytestmark = pytest.mark.e2e

MOE_LINE = ("WARNING fused_moe.py:812] Using default MoE config. Performance might be "
            "sub-optimal! Config file not found at /x/E=128,N=768,device_name=NVIDIA_Thor.json")
FP4_LINE = ("WARNING marlin_utils_fp4.py:204] Your GPU does not have native support for FP4 "
            "computation but FP4 quantization is being used.")


@pytest.fixture(scope="module")
def image(engine):
    from support.probe_images import fake_vllm_image

    tag = fake_vllm_image(engine)
    yield tag
    engine.remove_image(tag, force=True)


def thor(**overrides) -> ProbeTarget:
    fields: dict[str, Any] = dict(name="thor", cuda_arch="11.0a", device_name="NVIDIA Thor",
                  runtime_env={"VLLM_TARGET_DEVICE": "cuda"}, level2_model="Qwen/Qwen3-0.6B",
                  serve_args=["--max-model-len", "4096", "--enforce-eager"])
    fields.update(overrides)
    return ProbeTarget(**fields)


def name() -> str:
    return f"edgevllm-test-probe-{uuid.uuid4().hex[:8]}"


def settings(**env: str) -> ServeSettings:
    # no --gpus: the fixture is the stand-in for the GPU server
    return ServeSettings(gpus=None, ipc=None, env=env, poll_s=0.5)


def gone(engine, container: str) -> bool:
    return engine.container_inspect(container) is None


def test_healthy_server_passes_and_is_removed(engine, image):
    container = name()
    result = probe_level2(engine, image, thor(), timeout=120, container_name=container,
                          settings=settings(FAKE_VLLM_STARTUP_S="2"))
    assert result.passed, result.render()
    assert [c.id for c in result.checks] == ["health", "models", "chat", "log-signatures"]
    assert check_of(result, "models").message == "serves Qwen/Qwen3-0.6B"
    assert "Hello." in check_of(result, "chat").message
    # the target's serve flags reached `vllm serve`, its runtime env the container
    started = next(line for line in result.log_tail if "serving" in line)
    assert "'--max-model-len', '4096', '--enforce-eager'" in started
    assert result.facts["model"] == "Qwen/Qwen3-0.6B" and "seconds_to_healthy" in result.facts
    assert gone(engine, container)


def test_model_and_serve_args_override_the_target(engine, image):
    container = name()
    result = probe_level2(engine, image, thor(), model="org/other-model", timeout=120,
                          serve_args=["--kv-cache-memory-bytes", "2G"], container_name=container,
                          settings=settings())
    assert result.passed, result.render()
    started = next(line for line in result.log_tail if "serving" in line)
    assert "org/other-model" in started and "--kv-cache-memory-bytes" in started
    assert "--enforce-eager" not in started
    assert gone(engine, container)


def test_known_bad_line_fails_with_explanation_and_remedy(engine, image):
    container = name()
    result = probe_level2(engine, image, thor(), timeout=120, container_name=container,
                          settings=settings(FAKE_VLLM_LOG=f"{MOE_LINE}\n{FP4_LINE}"))
    assert not result.passed
    assert check_of(result, "chat").status == "pass"  # it served, but the log says it is wrong
    moe = check_of(result, "signature:moe-default-config")
    assert moe.status == "fail" and "fused-MoE" in moe.message
    assert moe.remedy is not None
    assert "fused-MoE config mod" in moe.remedy and moe.detail["line"] == MOE_LINE
    assert check_of(result, "signature:no-native-fp4").status == "warn"
    assert result.summary() == "level2 fail: signature:moe-default-config"
    assert "remedy: enable the fused-MoE config mod" in result.render()
    assert gone(engine, container)


def test_never_healthy_times_out_and_the_container_is_removed(engine, image):
    container = name()
    result = probe_level2(engine, image, thor(), timeout=3, container_name=container,
                          settings=settings(FAKE_VLLM_NEVER_HEALTHY="1"))
    assert not result.passed
    assert check_of(result, "health").status == "fail"
    assert "no healthy /health within 3s" in check_of(result, "health").message
    assert result.get("models") is None
    assert gone(engine, container)


def test_early_exit_fails_fast_with_the_log_tail(engine, image):
    container = name()
    line = "NotImplementedError: Unsupported speculative method: 'mtp'"
    # a long deadline: the probe must notice the exit, not wait for the timeout
    result = probe_level2(engine, image, thor(), timeout=3600, container_name=container,
                          settings=settings(FAKE_VLLM_LOG=line, FAKE_VLLM_EXIT_CODE="1"))
    start = check_of(result, "server-start")
    assert start.status == "fail" and "exited with code 1" in start.message
    assert result.get("health") is None
    assert line in result.log_tail
    sig = check_of(result, "signature:unsupported-speculative-method")
    assert sig.remedy is not None
    assert sig.status == "fail" and "num_nextn_predict_layers" in sig.remedy
    assert gone(engine, container)


def test_stop_signature_ends_the_wait_early(engine, image):
    container = name()
    line = "INFO gpu_worker.py:448] Estimated CUDA graph memory: -35.63 GiB total"
    result = probe_level2(engine, image, thor(), timeout=3600, container_name=container,
                          settings=settings(FAKE_VLLM_LOG=line, FAKE_VLLM_NEVER_HEALTHY="1"))
    start = check_of(result, "server-start")
    assert start.status == "fail" and "negative-cuda-graph-memory" in start.message
    assert start.remedy is not None
    assert "--kv-cache-memory-bytes" in start.remedy
    assert check_of(result, "signature:negative-cuda-graph-memory").status == "fail"
    assert gone(engine, container)


def test_failing_chat_completion_fails(engine, image):
    container = name()
    result = probe_level2(engine, image, thor(), timeout=120, container_name=container,
                          settings=settings(FAKE_VLLM_CHAT_STATUS="500"))
    assert check_of(result, "models").status == "pass"
    chat = check_of(result, "chat")
    assert chat.status == "fail" and "status 500" in chat.message
    assert gone(engine, container)


def test_target_without_model_is_a_config_error(engine, image):
    from edgevllm.common.errors import ConfigError

    with pytest.raises(ConfigError, match="probe.level2_model"):
        probe_level2(engine, image, thor(level2_model=None), settings=settings())


# -- through the command line --------------------------------------------------------------------
def test_cli_writes_json_and_exits_zero(engine, image, tmp_path):
    out = tmp_path / "result.json"
    container = name()
    proc = probe_cli("--image", image, "--target", "thor", "--level", "2", "--gpus", "none",
               "--json", str(out), "--name", container, "--timeout", "120",
               "--serve-arg=--max-model-len", "--serve-arg", "1024")
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    data = json.loads(out.read_text())
    assert data["passed"] is True and data["level"] == 2 and data["target"] == "thor"
    assert data["facts"]["serve_args"] == ["--max-model-len", "1024"]
    assert data["facts"]["model"] == "Qwen/Qwen3-0.6B"  # targets/thor.yaml probe.level2_model
    assert "PASSED: level2 pass" in stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]
    assert gone(engine, container)


def test_cli_failure_exits_with_the_probe_code(engine, image, tmp_path):
    proc = probe_cli("--image", image, "--target", "thor", "--level", "2", "--gpus", "none",
               "--env", f"FAKE_VLLM_LOG={MOE_LINE}", "--json", "-", "--timeout", "120")
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 9
    assert json.loads(stdout)["summary"] == "level2 fail: signature:moe-default-config"
    assert "error: probe of" in stderr and "Traceback" not in stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupt_removes_the_container_and_writes_no_result(engine, image, tmp_path, sig):
    out = tmp_path / "result.json"
    container = name()
    proc = probe_cli("--image", image, "--target", "thor", "--level", "2", "--gpus", "none",
               "--env", "FAKE_VLLM_NEVER_HEALTHY=1", "--json", str(out), "--name", container,
               "--timeout", "3600")
    try:
        for _ in range(600):  # until the server container runs (bounded: never hang the suite)
            state = (engine.container_inspect(container) or {}).get("State", {})
            if state.get("Running"):
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        else:
            pytest.fail("the probe never started its container")
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=120)
        removed_by_probe = gone_after_probe(engine, container)  # before our own cleanup below
    finally:
        if proc.poll() is None:
            proc.kill()
        engine.remove_container(container)  # only matters when the test already failed
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
    assert removed_by_probe
    assert list(tmp_path.iterdir()) == []


def gone_after_probe(engine, container: str) -> bool:
    labelled = [c for c in engine.containers(label="io.edgevllm.probe")
                if c.get("Names") == container]
    return not labelled and gone(engine, container)


def test_missing_image_is_reported_before_anything_starts(engine):
    from edgevllm.common.errors import ImageNotFoundError

    container = name()
    with pytest.raises(ImageNotFoundError, match="not found"):
        probe_level2(engine, "edgevllm-test-probe-fakevllm:does-not-exist", thor(),
                     container_name=container, settings=settings())
    assert gone(engine, container)
