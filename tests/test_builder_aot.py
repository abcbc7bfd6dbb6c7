"""inv build --aot (FlashInfer AOT modules; --warm, its old name, still works):
the plan staged as a build context (module names as
data, never Dockerfile text), the template's AOT step for the target's arch, inv render showing
both, the record's summary, and bad input. The step's in-image run is tests/e2e/test_aot_e2e.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgevllm.builder.aot.plan import aot_plan, aot_summary, describe_aot, stage_aot
from edgevllm.builder.render import render_dockerfile
from edgevllm.common.errors import ConfigError
from edgevllm.specs.buildspec import load_spec, resolve

CONFIGS = Path(__file__).parent / "fixtures" / "model-configs"
TINY = CONFIGS / "tiny-llama.json"
PRIMARY = ("batch_prefill_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_"
           "head_dim_qk_64_head_dim_vo_64_posenc_0_use_swa_False_use_logits_cap_False_f16qk_False"
           "_kv_stride_equal")


def test_stage_writes_the_script_and_the_plan(tmp_path):
    names = stage_aot(str(TINY), tmp_path / "ctx")
    assert names == [PRIMARY, "sampling"]
    plan = json.loads((tmp_path / "ctx" / "plan.json").read_text())
    assert plan["config"] == "tiny-llama.json"
    assert plan["modules"][0] == {"name": PRIMARY, "kind": "batch_prefill", "dtype_q": "bfloat16",
                                  "dtype_kv": "bfloat16", "head_dim": 64,
                                  "sliding_window": False, "logits_soft_cap": False}
    script = (tmp_path / "ctx" / "inimage_build.py").read_text()
    assert "_gen_batch_prefill_primary_module" in script and "import edgevllm" not in script


@pytest.mark.parametrize("target,arch", [("spark", "12.1a"), ("thor", "11.0a")])
def test_the_aot_step_builds_for_the_targets_arch_after_the_mods(target, arch):
    spec = load_spec(target, overrides={"mode": "prebuilt", "vllm_wheel": "0.33.0",
                                        "aot": str(TINY)})
    text = render_dockerfile(resolve(spec))
    step = text.index("inimage_build.py")
    assert text.index("inimage_applier.py apply") < step < text.index("COPY --from=edgevllm-meta")
    assert f'FLASHINFER_CUDA_ARCH_LIST="{arch}"' in text[text.rindex("RUN", 0, step):step]
    assert "from=edgevllm-aot,target=/edgevllm-aot" in text
    assert "--record /opt/edgevllm/aot.json" in text
    assert "batch_prefill" not in text  # the modules are plan.json's data, not Dockerfile text
    plain = render_dockerfile(resolve(load_spec(target, overrides={"mode": "prebuilt",
                                                                   "vllm_wheel": "0.33.0"})))
    assert "inimage_build.py" not in plain and "edgevllm-aot" not in plain


def test_render_task_stages_the_aot_context(cli, tmp_path):
    code, _, stderr = cli("render", "--target", "spark", "--vllm-wheel", "0.33.0", "--aot",
                          str(TINY), "--out", str(tmp_path / "r"))
    assert code == 0, stderr
    assert "--warm" not in stderr
    plan = json.loads((tmp_path / "r" / "build-plan.json").read_text())
    assert plan["contexts"]["edgevllm-aot"].rstrip("/").endswith("edgevllm-aot")
    staged = json.loads((tmp_path / "r" / "edgevllm-aot" / "plan.json").read_text())
    assert [m["name"] for m in staged["modules"]] == [PRIMARY, "sampling"]


def test_warm_is_the_old_name_of_aot_and_says_so_in_one_line(cli, tmp_path):
    """``--warm`` (the flag's name before) still builds them, with one line naming --aot; a spec
    file's ``warm:`` still reads as ``aot``."""
    code, _, stderr = cli("render", "--target", "spark", "--vllm-wheel", "0.33.0", "--warm",
                          str(TINY), "--out", str(tmp_path / "r"))
    assert code == 0, stderr
    said = [line for line in stderr.splitlines() if "--warm" in line]
    assert said == ["warning: --warm is now --aot (FlashInfer's AOT modules built into the "
                    "image; inv warm harvests a running server's JIT caches)"]
    assert (tmp_path / "r" / "edgevllm-aot" / "plan.json").is_file()
    code, _, stderr = cli("render", "--target", "spark", "--warm", str(TINY), "--aot",
                          str(tmp_path / "other.json"), "--out", str(tmp_path / "r2"))
    assert code == 2 and "error: --warm" in stderr and "give --aot alone" in stderr
    old = load_spec("spark", overrides={"mode": "prebuilt", "vllm_wheel": "0.33.0",
                                        "warm": str(TINY)})
    assert old.aot is not None and str(old.aot).endswith(TINY.name)
    assert "aot" in old.model_dump() and "warm" not in old.model_dump()


def test_bad_aot_input_is_one_error_line(cli, tmp_path):
    code, _, stderr = cli("render", "--target", "spark", "--aot", str(tmp_path / "none.json"),
                          "--out", str(tmp_path / "r"))
    assert code == 2 and "error: --aot" in stderr and "is not a file" in stderr
    assert "Traceback" not in stderr
    odd = tmp_path / "config.json"
    odd.write_text(json.dumps({"hidden_size": 96 * 4, "num_attention_heads": 4}))
    code, _, stderr = cli("render", "--target", "spark", "--aot", str(odd),
                          "--out", str(tmp_path / "r"))
    assert code == 2 and "head_dim 96" in stderr and "Traceback" not in stderr
    code, _, stderr = cli("render", "--target", "spark", "--aot", "recipe:no-such-recipe",
                          "--out", str(tmp_path / "r"))
    assert code != 0 and "no-such-recipe" in stderr and "Traceback" not in stderr


def test_recipe_model_config_comes_from_the_local_hf_cache(cli, tmp_path):
    """recipe:NAME reads the recipe's model's config.json from the Hugging Face cache layout
    (huggingface_hub's own lookup); without a local copy it says how to get one."""
    from edgevllm.serve.recipe.load import all_recipes

    recipe = all_recipes()[0].recipe
    env = {"HF_HOME": str(tmp_path / "hf")}
    code, _, stderr = cli("render", "--target", recipe.targets[0], "--warm",
                          f"recipe:{recipe.name}", "--out", str(tmp_path / "r"), env=env)
    assert code == 2 and f"no local copy of {recipe.model}'s config.json" in stderr
    assert f"inv model-fetch {recipe.name}" in stderr
    snapshot = (tmp_path / "hf" / "hub" / ("models--" + recipe.model.replace("/", "--"))
                / "snapshots" / ("0" * 40))
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(TINY.read_text())
    refs = snapshot.parent.parent / "refs"
    refs.mkdir()
    (refs / "main").write_text("0" * 40)
    code, _, stderr = cli("render", "--target", recipe.targets[0], "--warm",
                          f"recipe:{recipe.name}", "--out", str(tmp_path / "r"), env=env)
    assert code == 0, stderr
    staged = json.loads((tmp_path / "r" / "edgevllm-aot" / "plan.json").read_text())
    assert staged["modules"][0]["name"] == PRIMARY


def test_a_config_outside_flashinfers_names_is_refused(tmp_path, monkeypatch):
    import edgevllm.builder.aot.plan as aot
    from edgevllm.builder.aot.modules import AotModule

    # Stands in for a future AOT list whose names leave FlashInfer's grammar.
    monkeypatch.setattr(aot, "aot_modules",
                        lambda *a, **k: [AotModule(name="x; rm -rf /", kind="sampling")])
    with pytest.raises(ConfigError, match="not a FlashInfer module name"):
        aot_plan(str(TINY))


def test_summary_of_the_in_image_record():
    record = {"arch_list": "12.1a", "flashinfer": "0.7.2.post1", "config": "tiny-llama.json",
              "seconds": 412.5, "toolchain": {"notes": ["nvcc 13.5 with CUDA 13.0 headers"]},
              "modules": [{"name": "sampling", "path": "/x/sampling.so", "bytes": 2_500_000,
                           "sha256": "ab" * 32, "machine": "aarch64"}]}
    summary = aot_summary(record)
    assert summary is not None
    assert summary["modules"] == [{"name": "sampling", "bytes": 2_500_000, "sha256": "ab" * 32,
                                   "machine": "aarch64"}]
    lines = describe_aot(summary)
    assert lines[0] == "flashinfer aot: 1 module(s) for 12.1a in 412.5s (from tiny-llama.json)"
    assert "sampling: 2.5 MB, aarch64, sha256 abababababababab" in lines[1]
    assert lines[2] == "  note: nvcc 13.5 with CUDA 13.0 headers"
    assert aot_summary(None) is None and describe_aot(None) == []


def test_the_lock_records_the_aot_modules_so_such_an_image_gets_its_own_tag():
    from edgevllm.builder.steps import lock_settings
    from edgevllm.specs.buildspec import lock_overrides
    from edgevllm.specs.lock import Lock, image_tag

    plain = resolve(load_spec("spark", overrides={"mode": "prebuilt", "vllm_wheel": "0.33.0"}))
    aot = resolve(load_spec("spark", overrides={"mode": "prebuilt", "vllm_wheel": "0.33.0",
                                                "aot": str(TINY)}))
    assert "aot" not in lock_settings(plain)
    assert lock_settings(aot)["aot"] == {"config": "tiny-llama.json",
                                         "modules": [PRIMARY, "sampling"]}
    locks = [Lock(target="spark", mode="prebuilt", settings=lock_settings(eff))
             for eff in (plain, aot)]
    assert image_tag(locks[0]) != image_tag(locks[1])
    assert "aot" not in lock_overrides(locks[1])  # a lock rebuild builds them only with --aot
    # a lock from before the rename holds them as "warm": it still reads, and still rebuilds
    before = Lock(target="spark", mode="prebuilt",
                  settings={"warm": lock_settings(aot)["aot"]})
    assert "warm" not in lock_overrides(before) and "aot" not in lock_overrides(before)


def test_the_label_holds_the_summary_only_when_the_build_built_them():
    from edgevllm.builder.steps import outcome_labels

    summary = {"arch_list": "12.1a", "modules": [{"name": "sampling", "bytes": 1,
                                                   "sha256": "0" * 64}]}
    assert "io.edgevllm.aot" not in outcome_labels(None, {}, {})
    assert json.loads(outcome_labels(None, {}, {}, summary)["io.edgevllm.aot"]) == summary
