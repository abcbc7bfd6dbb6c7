"""The known-bad log signature catalogue (edgevllm/probe/signatures.yaml) and log matching.

Every catalogue entry must match the real line users reported (from the seed documents and the
upstream facts) and nothing in a clean start-up log; a new entry without a sample here fails.
"""

from __future__ import annotations

import pytest

from edgevllm.common.errors import ManifestError
from edgevllm.probe.signatures import load_catalogue, match_log, parse_catalogue

# Lines as users saw them (seeds/thor-nemotron-nano-itl-forum-report.txt, spark blog, DFlash guide,
# upstream-facts.md sections 2-6).
SAMPLES = {
    "moe-default-config": "WARNING 05-12 10:01:02 fused_moe.py:812] Using default MoE config. "
                          "Performance might be sub-optimal! Config file not found at /usr/local/"
                          "lib/python3.12/dist-packages/vllm/model_executor/layers/fused_moe/"
                          "configs/E=128,N=768,device_name=NVIDIA_Thor.json",
    "no-kernel-image": "RuntimeError: CUDA error: no kernel image is available for execution on "
                       "the device",
    "no-native-fp4": "WARNING marlin_utils_fp4.py:204] Your GPU does not have native support for "
                     "FP4 computation but FP4 quantization is being used. Weight-only FP4 "
                     "compression will be used leveraging the Marlin kernel.",
    "unsupported-speculative-method": "NotImplementedError: Unsupported speculative method: 'mtp'",
    "negative-cuda-graph-memory": "INFO gpu_worker.py:448] Estimated CUDA graph memory: "
                                  "-35.63 GiB total",
    "fa3-tma-crash": "flash_fwd_launch_template.h: CUTE_ARCH_TMA_SM90_ENABLED not defined -> "
                     "cudaErrorLaunchFailure",
    "cuda-launch-failure": "torch.AcceleratorError: CUDA error: unspecified launch failure",
    "libcuda-undefined-symbol": "ImportError: /opt/venv/lib/python3.12/site-packages/vllm/"
                                "_C.abi3.so: undefined symbol: cuPointerGetAttribute",
    "cutlass-dsl-arch-rejected": "cutlass.base_dsl.common.OpError: expects arch to be one of "
                                 "['sm_120a'], but got Arch.sm_121a",
    "cutlass-dsl-libs-base-mma": "ptxas /tmp/x.ptx, line 88; error   : Unexpected instruction "
                                 "types specified for '_mma'",
    "triton-ptxas-arch": "ptxas fatal   : Value 'sm_110a' is not defined for option 'gpu-name'",
    "fastsafetensors-no-cudart": "RuntimeError: fastsafetensors: GPU runtime library not found",
    "mtp-weight-prefix": "ValueError: There is no module or parameter named 'language_model' in "
                         "Qwen3_5MoeMTP.",
    "cuda-out-of-memory": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "engine-core-failed": "RuntimeError: Engine core initialization failed. See root cause above.",
}

CLEAN_LOG = """\
INFO 05-12 10:00:01 api_server.py:1351] vLLM API server version 0.33.0
INFO 05-12 10:00:05 model.py:547] Resolved architecture: Qwen3ForCausalLM
INFO 05-12 10:00:09 cuda.py:300] Using FLASH_ATTN attention backend out of potential backends
INFO 05-12 10:00:40 gpu_model_runner.py:2030] Model loading took 1.12 GiB memory and 9.8 seconds
INFO 05-12 10:00:52 gpu_worker.py:448] Estimated CUDA graph memory: 0.41 GiB total
INFO 05-12 10:00:53 kv_cache_utils.py:1087] GPU KV cache size: 412,672 tokens
INFO 05-12 10:01:00 fused_moe.py:700] Using configuration from /x/E=128,N=768,device_name=X.json
INFO:     Application startup complete.
INFO:     127.0.0.1:51234 - "GET /health HTTP/1.1" 200 OK
""".splitlines()


def test_catalogue_loads_with_unique_ids_and_complete_entries():
    catalogue = load_catalogue()
    ids = [s.id for s in catalogue]
    assert len(ids) == len(set(ids))
    for sig in catalogue:
        assert sig.explanation.strip() and sig.remedy.strip(), sig.id


def test_every_signature_has_a_sample_and_matches_it():
    ids = {s.id for s in load_catalogue()}
    assert ids == set(SAMPLES), "add a real sample line for each catalogue entry (and only those)"
    for sig_id, line in SAMPLES.items():
        found = {m.signature.id for m in match_log([line])}
        assert sig_id in found, f"{sig_id} does not match its sample: {line}"


@pytest.mark.parametrize("sig_id", sorted(SAMPLES))
def test_each_sample_matches_only_related_signatures(sig_id):
    # A launch failure line may legitimately also hit the generic launch-failure entry.
    related = {"fa3-tma-crash": {"cuda-launch-failure"}, "cuda-launch-failure": set()}
    found = {m.signature.id for m in match_log([SAMPLES[sig_id]])}
    assert found - {sig_id} <= related.get(sig_id, set())


def test_clean_startup_log_matches_nothing():
    assert match_log(CLEAN_LOG) == []


def test_match_reports_first_line_and_count_in_catalogue_order():
    lines = CLEAN_LOG[:2] + [SAMPLES["no-native-fp4"], SAMPLES["moe-default-config"],
                             SAMPLES["moe-default-config"]]
    found = match_log(lines)
    assert [m.signature.id for m in found] == ["moe-default-config", "no-native-fp4"]
    moe = found[0]
    assert (moe.line_no, moe.count) == (4, 2)
    assert "NVIDIA_Thor" in moe.line
    assert found[1].signature.severity == "warn"


def test_stop_signature_is_the_negative_cuda_graph_estimate():
    assert [s.id for s in load_catalogue() if s.stop] == ["negative-cuda-graph-memory"]


def test_targets_field_limits_a_signature():
    sigs = parse_catalogue("""
signatures:
  - {id: only-thor, regex: 'boom', severity: fail, explanation: e, remedy: r, targets: [thor]}
""")
    assert [m.signature.id for m in match_log(["boom"], sigs, target="thor")] == ["only-thor"]
    assert match_log(["boom"], sigs, target="spark") == []


@pytest.mark.parametrize("text, expected", [
    ("signatures:\n  - {id: x, regex: 'a', severity: fatal, explanation: e, remedy: r}\n",
     "field 'signatures.0.severity'"),
    ("signatures:\n  - {id: x, regex: '(', severity: fail, explanation: e, remedy: r}\n",
     "not a regular expression"),
    ("signatures:\n  - {id: x, regex: 'a', severity: fail, explanation: e, remedy: r, fix: y}\n",
     "field 'signatures.0.fix'"),
    ("signatures:\n  - {id: x, regex: 'a', severity: fail, remedy: r}\n",
     "field 'signatures.0.explanation'"),
    ("signatures:\n  - {id: x, regex: 'a', severity: fail, explanation: e, remedy: r}\n"
     "  - {id: x, regex: 'b', severity: warn, explanation: e, remedy: r}\n", "appears twice"),
    ("signatures: [\n", "not valid YAML"),
])
def test_bad_catalogue_is_one_line_naming_the_field(text, expected):
    with pytest.raises(ManifestError) as info:
        parse_catalogue(text, "sigs.yaml")
    message = str(info.value)
    assert message.startswith("sigs.yaml: ") and expected in message and "\n" not in message
