"""inv track's mod outcomes (``track/modcheck``) against what the build's applier records.

Real flashinfer-python wheels from PyPI (the ones the applier's own tests cache), served by a local
index in PyPI's JSON shape: for each case, the outcome track predicts from the wheel alone is
compared with the record of the staged applier run over a site installed from the same wheel
(``support.modenv.stage_and_apply``, as the build runs it). The cases: applies (0.6.9, 0.6.11),
not applicable by range (0.6.12), already upstream (0.6.11 whose file already carries the
replacement) and fails (0.6.11 whose anchor changed: the file and the anchor named).
"""

from __future__ import annotations

import contextlib
import io
import platform
import zipfile
from pathlib import Path

import pytest

from edgevllm.track import modcheck
from support.modenv import (
    cuda_bindings_wheels,
    outcome,
    site_with,
    stage_and_apply,
    wheel,
    working_copy,
)
from support.pypiindex import serve_index, serve_projects, wheel_entry

ANCHOR = 'if sm_version != "sm_120":'
EDITS = {  # how a case changes the kernel file of the real wheel (and of the installed site)
    "as published": lambda text: text,
    "upstream has it": lambda text: text.replace(
        ANCHOR, 'if sm_version not in ("sm_120", "sm_121"):  # edgevllm mod flashinfer-sm121'),
    "anchor changed": lambda text: text.replace(ANCHOR, "if sm_version not in SM12X:"),
}
CASES = [("0.6.9", "as published", "applied"), ("0.6.11", "as published", "applied"),
         ("0.6.12", "as published", "not-applicable"),
         ("0.6.11", "upstream has it", "already-applied"),
         ("0.6.11", "anchor changed", "failed")]


def flashinfer_site(version: str) -> Path:  # the site test_mods_applier_flashinfer installs
    return site_with(f"flashinfer-{version}", [wheel(f"flashinfer-python=={version}",
                                                    platform=False)])


def kernel_file(site: Path) -> Path:
    return next(site.glob("flashinfer/gemm/kernels/dense_blockscaled_gemm_sm120*.py"))


def altered_wheel(path: Path, edit) -> bytes:
    """The wheel with its sm120 kernel file passed through ``edit`` (other members as they are)."""
    out = io.BytesIO()
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = src.read(info)
            if "/dense_blockscaled_gemm_sm120" in info.filename:
                data = edit(data.decode()).encode()
            dst.writestr(info, data)
    return out.getvalue()


def normalised(record: dict, site: Path) -> tuple:
    """What both sides decide: the outcome, its detail and each step's (paths made relative)."""
    strip = lambda text: text.replace(f"{site}/", "")  # noqa: E731
    return (record["outcome"], strip(record["detail"]),
            [(s["index"], s["outcome"], strip(s["detail"])) for s in record["steps"]
             if s["kind"] == "edit"])


@pytest.mark.parametrize("version,case,expected", CASES)
def test_track_predicts_what_the_applier_records(version, case, expected, tmp_path, monkeypatch):
    real = wheel(f"flashinfer-python=={version}", platform=False)
    body = altered_wheel(real, EDITS[case])
    monkeypatch.setenv("EDGEVLLM_CACHE", str(tmp_path / "cache"))
    with serve_index("flashinfer-python", {version: [wheel_entry(real.name, body)]},
                     {real.name: body}) as base:
        monkeypatch.setenv("EDGEVLLM_PYPI_URL", base)
        predicted = modcheck.outcomes(["flashinfer-sm121"], "spark",
                                      {"flashinfer-python": version})
    assert [p["name"] for p in predicted] == ["flashinfer-sm121"]
    prediction = predicted[0]
    assert prediction["left_to_build"] == ["verify"]  # the one step track does not judge

    site = working_copy(flashinfer_site(version), tmp_path / "site")
    path = kernel_file(site)
    text = path.read_text()
    path.unlink()  # the pristine cached site is hard-linked: write a new file, never through it
    path.write_text(EDITS[case](text))
    _, record, _, _ = stage_and_apply(["flashinfer-sm121"], "spark", site, tmp_path / "run")
    assert record is not None
    applied = outcome(record, "flashinfer-sm121")

    assert prediction["outcome"] == expected == applied["outcome"], (prediction, applied)
    assert normalised(prediction, Path("/nowhere")) == normalised(applied, site)
    if expected == "failed":
        assert "dense_blockscaled_gemm_sm120_b12x.py: missing anchor" in prediction["detail"]
        assert ANCHOR in prediction["detail"]
        assert prediction["verdict"] == "fails"
    if expected == "already-applied":
        assert prediction["verdict"] == "already upstream"


def test_a_missing_wheel_is_unknown_not_a_guess(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEVLLM_CACHE", str(tmp_path / "cache"))
    with serve_index("flashinfer-python", {}, {}) as base:
        monkeypatch.setenv("EDGEVLLM_PYPI_URL", base)
        judged = modcheck.outcomes(["flashinfer-sm121"], "spark",
                                   {"flashinfer-python": "0.6.11"})
        unpinned = modcheck.outcomes(["flashinfer-sm121"], "spark", {})
    assert judged[0]["outcome"] == "unknown"
    assert "no wheel of flashinfer-python 0.6.11 for aarch64" in judged[0]["detail"]
    assert unpinned[0]["outcome"] == "unknown"
    assert unpinned[0]["detail"] == "the new tree pins no exact version of flashinfer-python"


def serve_wheels(paths: list[Path]) -> contextlib.AbstractContextManager[str]:
    """A local index in PyPI's JSON shape for several projects: each wheel under its project."""
    releases: dict[str, dict[str, list[dict]]] = {}
    files = {p.name: p.read_bytes() for p in paths}
    for path in paths:
        project, version = path.name.split("-")[:2]
        releases.setdefault(project.replace("_", "-"), {}).setdefault(version, []).append(
            wheel_entry(path.name, files[path.name]))
    return serve_projects(releases, files)


def test_cutlass_dsl_edit_as_the_applier_records_it(tmp_path, monkeypatch):
    """CuTe DSL 4.4.2 (the cutlass-dsl-gb10 fix applies): only the meta wheel's version is
    pinned; libs-base and libs-cu13 come from its == requirements, and the edit (in_class
    anchors) lands in the file the applier edits in a site where both are installed."""
    wheels = [wheel("nvidia-cutlass-dsl==4.4.2", platform=False),
              wheel("nvidia-cutlass-dsl-libs-cu13==4.4.2"),
              wheel("nvidia-cutlass-dsl-libs-base==4.4.2")]
    monkeypatch.setenv("EDGEVLLM_CACHE", str(tmp_path / "cache"))
    with serve_wheels(wheels) as base:
        monkeypatch.setenv("EDGEVLLM_PYPI_URL", base)
        (predicted,) = modcheck.outcomes(["cutlass-dsl-gb10"], "spark",
                                         {"nvidia-cutlass-dsl": "4.4.2"}, arch=host_arch())
    assert predicted["packages"] == {"nvidia-cutlass-dsl": "4.4.2",
                                     "nvidia-cutlass-dsl-libs-base": "4.4.2",
                                     "nvidia-cutlass-dsl-libs-cu13": "4.4.2"}
    assert predicted["left_to_build"] == ["dist_files", "env", "verify"]

    site = working_copy(site_with("cutlass-4.4.2-base-cu13", [
        *wheels[:1], wheels[1], wheels[2], *cuda_bindings_wheels()]), tmp_path / "site")
    links = ["--pip-find-links", str(wheels[1].parent), "--pip-no-index"]
    _, record, _, _ = stage_and_apply(["cutlass-dsl-gb10"], "spark", site, tmp_path / "run", links)
    assert record is not None
    applied = outcome(record, "cutlass-dsl-gb10")
    assert predicted["outcome"] == "applied" == applied["outcome"], (predicted, applied)
    assert normalised(predicted, Path("/nowhere"))[2] == normalised(applied, site)[2]
    assert normalised(predicted, Path("/nowhere"))[2][0][:2] == (1, "applied")


def host_arch() -> str:
    return platform.machine()
