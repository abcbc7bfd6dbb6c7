"""The seam between a mode and the shared tail (``builder/prepared.py``) and the tail's own pieces
that need no image (``builder/tail.py``): the named build contexts one build gets (the mods when
any are chosen, the AOT context staged with real files, the meta folder or its placeholder), the
runtime target's wheels context, a render's job that has no engine, the tail's refusal to run a
render, its tags and its clock."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgevllm.builder.aot.plan import AOT_CONTEXT, PLAN, SCRIPT
from edgevllm.builder.prepared import (
    META_PLACEHOLDER,
    Job,
    PreparedBuild,
    engine_of,
    named_contexts,
    runtime_contexts,
)
from edgevllm.builder.runner import Workspace
from edgevllm.builder.tail import Clock, final_tags, planned_arches, run
from edgevllm.common.errors import BuildError, ConfigError
from edgevllm.containers.docker import DockerEngine
from edgevllm.specs.buildspec import load_spec, resolve
from edgevllm.specs.lock import Lock

TINY = Path(__file__).parent / "fixtures" / "model-configs" / "tiny-llama.json"


def eff(**overrides):
    if overrides.pop("mods", None) == []:  # no mods: the target's defaults taken off
        overrides["remove_mods"] = resolve(load_spec("spark", overrides={
            "vllm_wheel": "0.33.0"})).mods
    return resolve(load_spec("spark", overrides={"vllm_wheel": "0.33.0", **overrides}))


def job(tmp_path: Path, fetch: bool = True, engine: DockerEngine | None = None, **overrides):
    return Job(eff=eff(**overrides), ws=Workspace(tmp_path / "out"), engine=engine, fetch=fetch)


def build(job_: Job, stages: tuple[str, ...] = ("runtime",), lock: Lock | None = None):
    return PreparedBuild(eff=job_.eff, dockerfile="FROM scratch\n",
                         contexts=named_contexts(job_, folders={"wheelhouse": "/w"}),
                         stages=stages, lock=lock)


# -- named contexts --------------------------------------------------------------------------------
def test_a_render_names_the_meta_folder_as_a_placeholder(tmp_path):
    contexts = named_contexts(job(tmp_path, fetch=False, mods=[]))
    assert contexts == {"edgevllm-meta": META_PLACEHOLDER}


def test_a_build_gets_the_meta_folder_and_the_modes_folders(tmp_path):
    found = named_contexts(job(tmp_path, mods=[]), folders={"wheelhouse": "/cache/w"})
    assert found == {"wheelhouse": "/cache/w",
                     "edgevllm-meta": str(tmp_path / "out" / "context" / "edgevllm-meta")}


def test_chosen_mods_are_a_context_and_none_is_none(tmp_path):
    with_mods = job(tmp_path)
    assert with_mods.eff.mods, "spark selects mods by default: the test needs one"
    assert named_contexts(with_mods)["edgevllm-mods"] == str(
        tmp_path / "out" / "context" / "edgevllm-mods")
    assert "edgevllm-mods" not in named_contexts(job(tmp_path, mods=[]))


def test_aot_stages_its_plan_and_script_into_its_context(tmp_path):
    contexts = named_contexts(job(tmp_path, fetch=False, aot=str(TINY), mods=[]))
    folder = Path(contexts[AOT_CONTEXT])
    assert folder == tmp_path / "out" / "context" / AOT_CONTEXT
    assert sorted(p.name for p in folder.iterdir()) == sorted([PLAN, SCRIPT])
    plan = json.loads((folder / PLAN).read_text())
    assert plan["config"] == TINY.name and plan["modules"]


def test_a_bad_aot_config_stops_before_any_context_is_made(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError):
        named_contexts(job(tmp_path, fetch=False, aot=str(bad), mods=[]))
    assert not (tmp_path / "out" / "context" / AOT_CONTEXT).exists()


def test_the_runtime_target_reads_exported_wheels_only_where_a_stage_exports_them(tmp_path):
    closure = build(job(tmp_path, mods=[]))
    assert runtime_contexts(closure, "/out/wheels/k") == closure.contexts
    compiled = build(job(tmp_path, mods=[]), stages=("wheels", "runtime"))
    assert runtime_contexts(compiled, "/out/wheels/k") == {**compiled.contexts,
                                                           "wheels": "/out/wheels/k"}
    assert "wheels" not in compiled.contexts  # the build's own contexts are left alone


# -- a render has no engine ------------------------------------------------------------------------
def test_a_job_without_an_engine_can_be_rendered_not_built(tmp_path):
    with pytest.raises(BuildError, match="no engine: it can be rendered, not built"):
        engine_of(job(tmp_path, fetch=False))
    engine = DockerEngine()
    assert engine_of(job(tmp_path, engine=engine)) is engine


def test_the_tail_refuses_a_prepared_render(tmp_path):
    render_job = job(tmp_path, fetch=False, mods=[])
    with pytest.raises(BuildError, match="nothing was fetched for this build"):
        run(render_job, build(render_job))
    fetched = job(tmp_path, engine=DockerEngine(), mods=[])
    with pytest.raises(BuildError, match="nothing was fetched"):
        run(fetched, build(fetched, lock=None))
    assert not (tmp_path / "out" / "context" / "Dockerfile").exists()


# -- the tail's tags and clock ---------------------------------------------------------------------
def test_the_lock_tag_leads_and_user_tags_join_the_repository():
    spec = eff(image_repo="registry.lan:5000/me/vllm", tags=["dev", "other/repo:pinned"])
    assert final_tags(spec, "0.33.0-spark-abc") == [
        "registry.lan:5000/me/vllm:0.33.0-spark-abc", "registry.lan:5000/me/vllm:dev",
        "other/repo:pinned"]
    assert final_tags(eff(tags=[]), "t") == [f"{eff().spec.image_repo}:t"]


def test_planned_arches_come_from_a_compiles_plan_only():
    assert planned_arches(Lock()) == {}
    planned = Lock(kernel_plan={"extensions": {"_C": {"arches": ["12.1a"]},
                                               "_moe_C": {"arches": ["12.1a", "12.0+PTX"]}}})
    assert planned_arches(planned) == {"_C": ["12.1a"], "_moe_C": ["12.1a", "12.0+PTX"]}


def test_the_clock_keeps_one_figure_a_step_and_reports_in_one_line(capsys):
    clock = Clock()
    for step in ("labels", "sbom", "labels"):
        with clock(step):
            pass
    report = clock.report()
    assert list(report["seconds"]) == ["total", "labels", "sbom"]  # a step run twice: one figure
    assert all(isinstance(v, float) and v >= 0 for v in report["seconds"].values())
    assert report["seconds"]["total"] >= report["seconds"]["labels"]
    assert report["verify_layers"] is None
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("tail: ") and " s after the image (" in line


def test_a_step_that_fails_still_counts_its_time():
    clock = Clock()
    with pytest.raises(RuntimeError), clock("checks"):
        raise RuntimeError("verify failed")
    assert list(clock.seconds) == ["checks"] and clock.seconds["checks"] >= 0
