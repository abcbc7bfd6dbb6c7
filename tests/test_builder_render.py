"""Rendering: the right arch list and platform per target, byte-identical output for one spec."""

from __future__ import annotations

from edgevllm.builder.render import render_dockerfile
from edgevllm.specs.buildspec import load_spec, resolve


def test_each_target_renders_its_arch_list():
    from edgevllm.specs.targets import all_targets

    for target in all_targets():  # every target in targets/, from the data
        arch = target.torch_cuda_arch_list
        text = render_dockerfile(resolve(load_spec(target.name)))
        assert f'TORCH_CUDA_ARCH_LIST="{arch}"' in text
        assert f"FROM {target.images.build} AS base" in text
        assert "FROM scratch AS wheels" in text and "FROM base AS runtime" in text
        assert "--mount=type=bind,from=wheels," in text  # wheels never COPY'd into a layer
        assert "--mount=type=cache,target=/root/.cache/ccache" in text
        assert f'io.edgevllm.arch-list="{arch}"' in text, target.name


def test_same_spec_same_bytes_and_changes_show():
    spec = load_spec("spark", overrides={"env": {"B": "2", "A": "1"}})
    first, second = render_dockerfile(resolve(spec)), render_dockerfile(resolve(spec))
    assert first == second
    other = render_dockerfile(resolve(load_spec("spark", overrides={"max_jobs": 3})))
    # 3 compile jobs x the target's 2 nvcc threads: vLLM divides MAX_JOBS by NVCC_THREADS.
    assert other != first and "MAX_JOBS=6" in other


def test_thor_removes_flashinfer_cubin_and_offline_uses_wheelhouse(tmp_path):
    text = render_dockerfile(resolve(load_spec("thor", overrides={
        "wheelhouse": str(tmp_path), "offline": True})))
    assert "pip uninstall -y flashinfer-cubin" in text
    assert "--no-index --find-links /wheelhouse" in text
    assert "from=wheelhouse" in text


def test_render_task_writes_dockerfile_and_context(cli, tmp_path):
    code, _, stderr = cli("render", "--target", "thor", "--out", str(tmp_path / "r"))
    assert code == 0, stderr
    assert 'TORCH_CUDA_ARCH_LIST="11.0a"' in (tmp_path / "r" / "Dockerfile").read_text()
    assert (tmp_path / "r" / "build-plan.json").is_file()
    assert (tmp_path / "r" / "edgevllm-mods" / "plan.json").is_file()
