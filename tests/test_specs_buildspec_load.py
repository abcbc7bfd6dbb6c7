"""The build spec: from CLI values, a YAML file, or a lock; merged with the target's defaults."""

from __future__ import annotations

from typing import Any

import pytest

from edgevllm.cli.flags import BUILD_FLAGS, spec_overrides
from edgevllm.common.errors import SourceError, SpecError
from edgevllm.specs.buildspec import DEFAULT_VLLM_REF, BuildSpec, load_spec, resolve


def test_defaults_come_from_the_target():
    eff = resolve(load_spec("thor"))
    assert eff.spec.vllm.ref == DEFAULT_VLLM_REF
    assert eff.platform == "linux/arm64"
    assert eff.max_jobs == eff.target.max_jobs
    assert eff.mods == eff.target.default_mods
    assert eff.env["TORCH_CUDA_ARCH_LIST"] == "11.0a"
    assert eff.packages["flashinfer-python"] == eff.target.packages["flashinfer-python"]


def test_cli_values_override_and_mods_are_selected():
    overrides = spec_overrides(
        dict(
            vllm_pr="https://github.com/vllm-project/vllm/pull/40082",
            cherry_pick=["40898"],
            add_mod=["fused-moe-configs"],
            no_mod=["fastsafetensors"],
            max_jobs="3",
            env=["A=1"],
            package=["flashinfer-python=0.6.9"],
        )
    )
    eff = resolve(load_spec("spark", overrides={**overrides, "verify": False}))
    assert eff.spec.vllm.pr == 40082 and eff.spec.vllm.cherry_picks == ["40898"]
    assert "fastsafetensors" not in eff.mods and "fused-moe-configs" in eff.mods
    assert eff.max_jobs == 3 and eff.env["A"] == "1" and eff.spec.verify is False
    assert eff.packages["flashinfer-python"] == "0.6.9"


def test_spec_file_with_flags_on_top(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(
        "target: thor\nvllm:\n  ref: v0.20.2\nmax_jobs: 4\npackages:\n  nvidia-cutlass-dsl: null\n"
    )
    eff = resolve(load_spec(spec_file=str(path), overrides=spec_overrides({"max_jobs": 6})))
    assert (eff.spec.vllm.ref, eff.max_jobs) == ("v0.20.2", 6)
    assert "nvidia-cutlass-dsl" not in eff.packages


@pytest.mark.parametrize(
    "text, message",
    [
        ("target: thor\nmax_jobs: zero\n", "field 'max_jobs'"),
        ("target: thor\nvllm:\n  reff: main\n", "unknown field 'vllm.reff' (did you mean 'ref'?)"),
        ("target: thor\n  bad: [indent\n", "spec.yaml: line"),
        ("- just a list\n", "expected a mapping"),
    ],
)
def test_bad_spec_file_is_one_line(tmp_path, text, message):
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as failure:
        resolve(load_spec(spec_file=str(path)))
    assert message in str(failure.value) and "\n" not in str(failure.value)


def test_bad_flag_values():
    with pytest.raises(SpecError, match="--build-arg 'NOEQUALS': expected KEY=VALUE"):
        spec_overrides({"build_arg": ["NOEQUALS"]})
    with pytest.raises(SpecError, match="--max-jobs 'many'"):
        spec_overrides({"max_jobs": "many"})
    with pytest.raises(SpecError, match="no target given"):
        load_spec()


def test_secrets_are_refused_before_anything_is_built():
    for overrides in ({"env": {"HF_TOKEN": "hf_x"}}, {"build_args": {"GITHUB_TOKEN": "ghp_x"}}):
        with pytest.raises(SpecError) as failure:
            load_spec("thor", overrides=overrides)
        assert "looks like a secret" in str(failure.value)
        assert "hf_x" not in str(failure.value) and "ghp_x" not in str(failure.value)


def test_flashinfer_from_source_takes_pr_and_picks():
    overrides = spec_overrides(
        {
            "flashinfer_pr": "https://github.com/flashinfer-ai/flashinfer/pull/123",
            "flashinfer_cherry_pick": ["456"],
        }
    )
    eff = resolve(load_spec("spark", overrides=overrides))
    source = eff.spec.flashinfer.source
    assert source is not None
    assert (source.pr, source.cherry_picks) == (123, ["456"])
    assert source.repo.endswith("flashinfer-ai/flashinfer.git")
    assert "flashinfer-python" not in eff.packages  # built from source, not installed from PyPI


def test_a_fork_pr_url_builds_the_fork():
    overrides = spec_overrides({"vllm_pr": "https://github.com/somefork/vllm/pull/12"})
    spec = load_spec("spark", overrides=overrides)
    assert (spec.vllm.repo, spec.vllm.pr) == ("https://github.com/somefork/vllm.git", 12)


def test_a_fork_pr_url_and_another_repo_are_refused():
    with pytest.raises(SpecError, match="--vllm-pr .* another repository"):
        spec_overrides(
            {
                "vllm_pr": "https://github.com/somefork/vllm/pull/12",
                "vllm_repo": "vllm-project/vllm",
            }
        )
    with pytest.raises(SourceError, match="--vllm-pr 'x12'"):
        spec_overrides({"vllm_pr": "x12"})


def test_every_flag_with_a_field_names_a_real_spec_field():
    """The flag table and the spec schema cannot drift apart: each flag's path exists."""
    for flag in BUILD_FLAGS:
        if flag.field is None:
            continue
        model: Any = BuildSpec
        for part in flag.field.split("."):
            assert part in model.model_fields, f"{flag.option} → {flag.field}: no field '{part}'"
            annotation = model.model_fields[part].annotation
            model = next(
                (
                    a
                    for a in getattr(annotation, "__args__", (annotation,))
                    if hasattr(a, "model_fields")
                ),
                None,
            )


def test_publish_cache_is_a_build_step_not_an_image_input():
    """--publish-cache reaches the spec, but nothing that shapes the image (the lock's settings,
    hence the immutable tag) depends on it."""
    from edgevllm.builder.steps import lock_settings

    overrides = spec_overrides({"publish_cache": True})
    assert overrides == {"publish_cache": True}
    primed = resolve(load_spec("spark", overrides=overrides))
    plain = resolve(load_spec("spark"))
    assert primed.spec.publish_cache and not plain.spec.publish_cache
    assert lock_settings(primed) == lock_settings(plain)


def test_compile_cache_flag_and_spec_field(tmp_path):
    url = "redis://:s3cretpw@cache.lan:6379"
    overrides = spec_overrides({"compile_cache": url, "compile_cache_id": "ccache-mine"})
    spec = load_spec("spark", overrides=overrides)
    assert spec.compile_cache == url and spec.compile_cache_id == "ccache-mine"
    path = tmp_path / "spec.yaml"
    path.write_text("target: spark\ncompile_cache: http://cache.lan:8080/ccache\n")
    assert load_spec(spec_file=str(path)).compile_cache == "http://cache.lan:8080/ccache"
    path.write_text("target: spark\ncompile_cache: ftp://me:s3cretpw@cache.lan/\n")
    with pytest.raises(SpecError) as failure:
        load_spec(spec_file=str(path))
    text = str(failure.value)
    assert "compile_cache" in text and "redis://" in text and "s3cretpw" not in text
