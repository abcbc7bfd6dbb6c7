"""The staged applier inside a container, as the image build runs it.

Exercises: the image's own ``python3`` (Debian's, no edgevllm installed) running the staged,
self-contained ``inimage_applier.py`` with the plan folder bind-mounted read-only at /edgevllm-mods
and a
wheelhouse at /wheelhouse (``--pip-find-links /wheelhouse --pip-no-index``, hermetic); the real
cutlass-dsl-gb10 mod on real cutlass-dsl 4.4.2 wheels (the site is bind-mounted); the record
written where the build reads it; and the library_link step registering a folder the loader does
not know with ldconfig (root in a container; never done on the host).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from edgevllm.containers.docker import DockerEngine, RunOptions
from support.images import python_image
from support.modenv import cuda_bindings_wheels, outcome, site_with, wheel, working_copy
from support.platforms import native_arch

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def engine() -> DockerEngine:
    engine = DockerEngine()
    engine.check_daemon()
    return engine


def run(engine, image, volumes, script: str, network: str | None = None) -> tuple[int, str]:
    proc = engine.run(
        RunOptions(image=image, remove=True, volumes=volumes, command=["sh", "-c", script],
                   network=network),
        timeout=600,
    )
    return proc.returncode, (proc.stdout + proc.stderr).decode(errors="replace")


def test_gb10_mod_applied_in_container_read_only_plan(engine, tmp_path):
    from edgevllm.mods.catalog import stage_mods

    image = python_image(engine, native_arch())
    # The image has no numpy: the site carries cutlass-dsl's run-time imports too.
    site = working_copy(
        site_with(
            "cutlass-4.4.2-base-cu13-numpy",
            [
                wheel("nvidia-cutlass-dsl==4.4.2", platform=False),
                wheel("nvidia-cutlass-dsl-libs-cu13==4.4.2"),
                wheel("nvidia-cutlass-dsl-libs-base==4.4.2"),
                *cuda_bindings_wheels(),
                wheel("numpy==2.2.6", glibc="2_17"),
                wheel("typing-extensions==4.15.0", platform=False),
            ],
        ),
        tmp_path / "site",
    )
    stage_mods(["cutlass-dsl-gb10"], "spark", tmp_path / "stage")
    wheelhouse = wheel("nvidia-cutlass-dsl-libs-cu13==4.4.2").parent
    out = tmp_path / "out"
    out.mkdir()
    apply = (
        "python3 /edgevllm-mods/inimage_applier.py apply --plan /edgevllm-mods/plan.json "
        "--site-packages /site --pip-find-links /wheelhouse --pip-no-index "
        "--record /opt/edgevllm/{}.json"
    )
    code, output = run(
        engine,
        image,
        [
            f"{tmp_path / 'stage'}:/edgevllm-mods:ro",
            f"{site}:/site",
            f"{wheelhouse}:/wheelhouse:ro",
            f"{out}:/opt/edgevllm",
        ],
        apply.format("first") + " && " + apply.format("second"),
    )
    assert code == 0, output
    first = json.loads((out / "first.json").read_text())
    second = json.loads((out / "second.json").read_text())
    mod = outcome(first, "cutlass-dsl-gb10")
    assert mod["outcome"] == "applied", mod
    assert mod["steps"][3]["detail"] == "MmaMXF4NVF4Op accepts sm_121a"
    assert outcome(second, "cutlass-dsl-gb10")["outcome"] == "already-applied"
    assert first["python"] == "/usr/bin/python3"
    assert (out / "mods.env").read_text() == "CUTE_DSL_ARCH=sm_121a\n"


def test_failed_mod_exits_non_zero_in_container(engine, tmp_path):
    from edgevllm.mods.catalog import stage_mods

    image = python_image(engine, native_arch())
    site = working_copy(
        site_with("flashinfer-0.6.11", [wheel("flashinfer-python==0.6.11", platform=False)]),
        tmp_path / "site",
    )
    kernel = next(site.glob("flashinfer/gemm/kernels/dense_blockscaled_gemm_sm120_b12x.py"))
    text = kernel.read_text().replace('if sm_version != "sm_120":', "if sm_version is None:")
    kernel.unlink()
    kernel.write_text(text)
    stage_mods(["flashinfer-sm121"], "spark", tmp_path / "stage")
    code, output = run(
        engine,
        image,
        [f"{tmp_path / 'stage'}:/edgevllm-mods:ro", f"{site}:/site", f"{tmp_path}:/out"],
        "python3 /edgevllm-mods/inimage_applier.py apply --plan /edgevllm-mods/plan.json "
        "--site-packages /site --record /out/mods.json",
    )
    assert code == 1
    assert (
        "error: mod flashinfer-sm121: flashinfer-python 0.6.11: file /site/flashinfer/gemm/"
        "kernels/dense_blockscaled_gemm_sm120_b12x.py: missing anchor" in output
    )
    assert json.loads((tmp_path / "mods.json").read_text())["ok"] is False


def test_library_link_registers_an_unknown_folder_with_ldconfig(engine, tmp_path):
    """libcudart.so.13 (real, from nvidia-cuda-runtime) in a folder the loader does not know."""
    import zipfile

    image = python_image(engine, native_arch())
    libs = tmp_path / "libs"
    libs.mkdir()
    with zipfile.ZipFile(wheel("nvidia-cuda-runtime==13.0.96", glibc="2_17")) as z:
        (libs / "libcudart.so.13").write_bytes(z.read("nvidia/cu13/lib/libcudart.so.13"))
    stage = tmp_path / "stage"
    stage.mkdir()
    shutil.copy(
        Path(__file__).parents[2] / "edgevllm" / "mods" / "inimage_applier.py", stage /
        "inimage_applier.py"
    )
    plan = {
        "format": 1,
        "target": "thor",
        "mods": [
            {
                "name": "cudart",
                "version": "1",
                "steps": [
                    {
                        "kind": "library_link",
                        "name": "libcudart.so",
                        "pattern": "libcudart.so.[0-9]*",
                        "dirs": ["/opt/libs"],
                        "packages": [],
                    },
                    {
                        "kind": "verify",
                        "python": "import ctypes; ctypes.CDLL('libcudart.so'); print('ok')",
                    },
                ],
            }
        ],
    }
    (stage / "plan.json").write_text(json.dumps(plan))
    apply = (
        "python3 /edgevllm-mods/inimage_applier.py apply --plan /edgevllm-mods/plan.json "
        "--record /out/{}.json"
    )
    code, output = run(
        engine,
        image,
        [f"{stage}:/edgevllm-mods:ro", f"{libs}:/opt/libs", f"{tmp_path}:/out"],
        apply.format("first") + " && " + apply.format("second"),
    )
    assert code == 0, output
    first = outcome(json.loads((tmp_path / "first.json").read_text()), "cudart")
    assert first["outcome"] == "applied"
    assert (
        "registered /opt/libs with the loader (/etc/ld.so.conf.d/edgevllm-cudart.conf)"
        in first["steps"][0]["detail"]
    )
    assert first["steps"][1]["outcome"] == "passed"
    second = outcome(json.loads((tmp_path / "second.json").read_text()), "cudart")
    assert second["outcome"] == "already-applied"


def test_eugr_script_mod_runs_in_the_image_without_network(engine, tmp_path, monkeypatch):
    """An eugr mod (run.sh copying its template into the workspace and downloading a plugin) as a
    build-time mod, run by the applier with the image's own python3, --network none: its
    download comes from the pinned file, its files land in the image's /workspace."""
    from edgevllm.mods.catalog import stage_mods
    from edgevllm.mods.eugr import import_eugr_mod
    from support import web_standin

    fixtures = Path(__file__).parents[1] / "fixtures" / "eugr-recipes" / "mods"
    mods = tmp_path / "mods"
    with web_standin.serve({web_standin.PLUGIN_PATH: b"# plugin\n"}) as base:
        plugin = web_standin.plugin_mod(fixtures / "plugin-download",
                                        tmp_path / "eugr" / "plugin-download", base)
        for folder in (fixtures / "fix-chat-template", plugin):
            import_eugr_mod(folder, mods, ["spark"])
        monkeypatch.setenv("EDGEVLLM_MODS_PATH", str(mods))
        stage_mods(["eugr-fix-chat-template", "eugr-plugin-download"], "spark",
                   tmp_path / "stage")  # the download fetched on the host, pinned
    code, output = run(
        engine, python_image(engine, native_arch()),
        [f"{tmp_path / 'stage'}:/edgevllm-mods:ro", f"{tmp_path}:/out"],
        "python3 /edgevllm-mods/inimage_applier.py apply --plan /edgevllm-mods/plan.json "
        "--record /out/mods.json && cp /workspace/* /out/",
        network="none",
    )
    assert code == 0, output
    record = json.loads((tmp_path / "mods.json").read_text())
    assert [outcome(record, n)["outcome"] for n in ("eugr-fix-chat-template",
                                                    "eugr-plugin-download")] == ["applied"] * 2
    assert (tmp_path / "plugin_parser.py").read_bytes() == b"# plugin\n"
    assert (tmp_path / "fixed_template.jinja").read_bytes() == \
        (fixtures / "fix-chat-template" / "chat_template.jinja").read_bytes()
