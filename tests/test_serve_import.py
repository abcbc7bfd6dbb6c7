"""eugr-format recipes (tests/fixtures/eugr-recipes, written for these tests) import as eugr's own
runner would launch them: each dry-run's server argv is compared token by token with the argv
eugr's documented behaviour gives (solo forces tensor parallel 1; cluster-only runs torch
distributed without Ray on tensor × pipeline × data parallel nodes, ``--nnodes/--node-rank/
--master-addr/--master-port`` plus ``--headless`` on ranks > 0; a trailing ``\\`` is stripped;
``recipe_version`` 2 is read as v1)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml

from edgevllm.common.errors import RecipeError
from edgevllm.common.paths import user_data_dir
from edgevllm.containers.docker import DockerEngine
from edgevllm.serve.cluster import Cluster, ClusterOptions, Node
from edgevllm.serve.launch import serve
from edgevllm.serve.recipe.importfolder import convert_file, import_dir, import_file
from edgevllm.serve.recipe.load import load_recipe, parse_recipe, render
from support import web_standin

EUGR = Path(__file__).parent / "fixtures" / "eugr-recipes"
PLUGIN_URL = web_standin.PLUGIN_URL


RECIPES = EUGR / "recipes"
HEAD, WORKER = "10.0.0.1", "10.0.0.2"


def imported(name: str, tmp_path: Path):
    """Import one fixture into tmp_path (files included) and load it back from disk."""
    result = import_file(RECIPES / name, tmp_path / f"{Path(name).stem}.yaml")
    return result, load_recipe(str(result.path))


def solo_argv(loaded, image: str = "vllm-node", **kw) -> list[str]:
    argv = shlex.split(serve(render(loaded, **kw), DockerEngine(), dry_run=True))
    return argv[argv.index(image) + 1:]


def cluster_lines(loaded, count: int, **kw) -> list[list[str]]:
    rendered = render(loaded, {"hf_cache": "/data/hf"}, clustered=True, **kw)
    nodes = [Node(f"n{i}", DockerEngine(host=f"ssh://me@spark{i}"), f"10.0.0.{i + 1}")
             for i in range(count)]
    plan = Cluster(rendered, nodes, ClusterOptions(name=rendered.name, iface="enp1s0f1np1"))
    return [shlex.split(line) for line in plan.dry_run()]


def torch_tail(count: int, rank: int) -> list[str]:
    tail = ["--nnodes", str(count), "--node-rank", str(rank), "--master-addr", HEAD,
            "--master-port", "29501"]
    return tail + (["--headless"] if rank else [])


def test_cluster_only_recipe_is_a_torch_cluster_like_eugr(tmp_path):
    result, loaded = imported("cluster-moe.yaml", tmp_path)
    assert loaded.recipe.topology.mode == "torch" and loaded.recipe.topology.nodes == 2
    assert any("--distributed-executor-backend ray: dropped" in n for n in result.notes)
    assert "1 comment line(s) (eugr keeps known issues there) are not carried: read them in " \
           "cluster-moe.yaml" in result.notes
    lines = cluster_lines(loaded, 2)
    assert len(lines) == 2
    serve_args = ["vllm", "serve", "example-org/Cluster-MoE-AWQ", "--host", "0.0.0.0",
                  "--port", "8000", "--tensor-parallel-size", "2",
                  "--gpu-memory-utilization", "0.8", "--max-model-len", "65536",
                  "--enable-auto-tool-choice", "--tool-call-parser", "minimax_m2"]
    for argv, rank in zip(lines, (1, 0), strict=True):  # workers first, rank 0 last
        assert argv[argv.index("vllm-node") + 1:] == serve_args + torch_tail(2, rank)
        assert "VLLM_USE_FLASHINFER_MOE_FP16=1" in argv
        # Spark's cluster launch defaults, {iface} filled; NCCL_IB_HCA left out (no --ib-hca).
        for env in ("NCCL_IB_DISABLE=0", "UCX_NET_DEVICES=enp1s0f1np1",
                    "OMPI_MCA_btl_tcp_if_include=enp1s0f1np1"):
            assert env in argv
        assert not any(a.startswith("NCCL_IB_HCA=") for a in argv)


def test_node_count_is_tensor_times_pipeline_times_data_parallel(tmp_path):
    _, loaded = imported("4x-spark-cluster/big-moe.yaml", tmp_path)
    assert loaded.recipe.topology.nodes == 4
    lines = cluster_lines(loaded, 4)
    assert [a[a.index("--node-rank") + 1] for a in lines] == ["1", "2", "3", "0"]
    head = lines[-1]
    assert head[head.index("vllm-node") + 1:] == [
        "vllm", "serve", "example-org/Big-MoE-NVFP4", "--host", "0.0.0.0", "--port", "8000",
        "-tp", "4", "--kv-cache-dtype", "fp8"] + torch_tail(4, 0)


def test_dual_recipe_runs_solo_with_tp1_or_clustered_with_nodes(tmp_path):
    _, loaded = imported("dual-dense.yaml", tmp_path)
    assert loaded.recipe.topology.mode == "solo"
    assert loaded.recipe.topology.cluster.nodes == 2
    spec = '{{"method": "draft_model", "draft_tensor_parallel_size": {}}}'
    assert solo_argv(loaded) == [
        "vllm", "serve", "example-org/Dual-Dense-FP8", "--host", "0.0.0.0", "--port", "8000",
        "-tp", "1", "--speculative-config", spec.format(1)]
    head = cluster_lines(loaded, 2)[-1]
    assert head[head.index("vllm-node") + 1:] == [
        "vllm", "serve", "example-org/Dual-Dense-FP8", "--host", "0.0.0.0", "--port", "8000",
        "-tp", "2", "--speculative-config", spec.format(2)] + torch_tail(2, 0)


def test_solo_only_recipe_with_tp2_renders_tp1(tmp_path):
    result, loaded = imported("solo-tp2.yaml", tmp_path)
    assert loaded.recipe.topology.cluster is None
    assert solo_argv(loaded) == [
        "vllm", "serve", "example-org/Solo-TP2", "--host", "0.0.0.0", "--port", "8000",
        "--tensor-parallel-size", "1", "--max-model-len", "32768"]
    assert any("solo renders tensor_parallel 1 (defaults say 2)" in n for n in result.notes)
    with pytest.raises(RecipeError, match="runs on one node only"):
        render(loaded, clustered=True)


def test_version_2_is_read_as_v1_with_a_note(tmp_path):
    result, loaded = imported("v2-quickstart.yaml", tmp_path)
    assert result.notes[0].startswith("recipe_version 2: read as version 1")
    assert solo_argv(loaded) == ["vllm", "serve", "example-org/Quickstart", "--host", "0.0.0.0",
                                 "--port", "8000", "--max-num-seqs", "4"]


def test_trailing_backslash_is_stripped(tmp_path):
    result, loaded = imported("trailing-backslash.yaml", tmp_path)
    assert any("ends in '\\'" in n for n in result.notes)
    assert solo_argv(loaded) == ["vllm", "serve", "example-org/Trailing", "--port", "8000",
                                 "--enforce-eager"]


def test_thor_container_makes_a_thor_recipe(tmp_path):
    _, loaded = imported("thor-small.yaml", tmp_path)
    assert loaded.recipe.targets == ["thor"] and loaded.recipe.status == {"thor": "untested"}
    full = shlex.split(serve(render(loaded, {"target": "thor"}), DockerEngine(), dry_run=True))
    assert full[full.index("--runtime") + 1] == "nvidia" and "--gpus" not in full
    assert full[full.index("vllm-thor") + 1:] == [
        "vllm", "serve", "example-org/Thor-Small", "--host", "0.0.0.0", "--port", "8000",
        "--max-model-len", "8192"]


def test_mod_file_is_carried_and_missing_mod_files_warn_naming_the_mod(tmp_path):
    result, loaded = imported("mod-args.yaml", tmp_path)
    # The chat template's mod folder is beside the recipes: the file travels with the recipe.
    # The mod copies its chat_template.jinja as fixed_template.jinja (read from its run.sh).
    carried = tmp_path / "mod-args.files" / "fixed_template.jinja"
    assert carried.read_bytes() == (EUGR / "mods/fix-chat-template/chat_template.jinja")\
        .read_bytes()
    assert any("(its chat_template.jinja, copied as fixed_template.jinja)" in n
               for n in result.notes)
    # The parser plugin's mod is not at hand: a warning naming that mod.
    assert len(result.warnings) == 1 and "mod 'mods/nano-parser'" in result.warnings[0]
    # --gpu-memory-utilization-gb (a flag only eugr's patch adds) becomes gpu_memory_gb.
    assert loaded.recipe.gpu_memory_gb == 40
    full = shlex.split(serve(render(loaded), DockerEngine(), dry_run=True))
    assert f"{carried}:/edgevllm/files/fixed_template.jinja:ro" in full
    tail = full[full.index("vllm-node") + 1:]
    assert tail[:3] == ["python3", "-c", tail[2]] and "def fraction" in tail[2]
    assert tail[3] == '{"gpu_memory_gib":40.0}'
    assert tail[4:] == [
        "vllm", "serve", "example-org/Mod-Args", "--port", "8000",
        "--chat-template", "/edgevllm/files/fixed_template.jinja",
        "--reasoning-parser-plugin", "/workspace/mods/nano-parser/nano_parser.py",
        "--reasoning-parser", "nano"]
    carried.write_text("tampered")
    with pytest.raises(RecipeError, match=r"files\[0\].*sha256"):
        render(load_recipe(str(result.path)))


def test_single_mod_warning_names_that_mod():
    result = convert_file(RECIPES / "one-mod.yaml")
    assert result.warnings == [(
        "argument 'unsloth.jinja' names a file provided by mod 'mods/unsloth-template', which "
        "was dropped: add the file under files: or the argument will fail")]


def test_typo_placeholder_is_an_error_at_serve_with_a_hint(tmp_path):
    _, loaded = imported("typo-placeholder.yaml", tmp_path)
    assert loaded.recipe.required == ["pipeline_parallel"]
    with pytest.raises(RecipeError) as info:
        render(loaded)
    message = str(info.value)
    assert "placeholder 'pipeline_parallel' has no value" in message
    assert "'pipeline_parellel'" in message and "\n" not in message
    rendered = render(loaded, {"pipeline_parallel": 3})
    assert rendered.command[-4:] == ["-tp", "1", "-pp", "3"]


def test_launch_script_is_refused_with_a_clear_line():
    with pytest.raises(RecipeError, match="launch scripts are not recipes"):
        convert_file(EUGR / "examples" / "launch-script.sh")


NAMES = ["4x-spark-cluster-big-moe", "4x-spark-cluster-dense-a17b", "cluster-moe",
         "download-mod", "dual-dense", "mod-args", "one-mod", "picked-prs", "solo-tp2",
         "template-gb", "thor-small", "trailing-backslash", "typo-placeholder", "v2-quickstart"]


def test_folder_import_summary_and_dry_run_writes_nothing(tmp_path, cli):
    out = tmp_path / "out"
    code, stdout, stderr = cli("recipe-import", str(EUGR), "--out", str(out), "--dry-run")
    assert code == 0, stderr
    assert not out.exists()
    lines = stdout.splitlines()
    assert lines[0].split()[:4] == ["recipe", "status", "notes", "warnings"]
    assert lines[-1].startswith("14 imported, 0 failed,") and lines[-1].endswith(" 2 warnings")
    # Offline (this machine reaches no web): a mod's download is recorded, the build fetches it.
    code, stdout, stderr = cli("recipe-import", str(EUGR), "--out", str(out))
    assert code == 0, stderr
    # Each recipe is named by its file, subfolder in front: what eugr's users type.
    assert sorted(p.stem for p in out.glob("*.yaml")) == NAMES
    assert (out / "mod-args.files" / "fixed_template.jinja").is_file()
    for path in out.glob("*.yaml"):
        parse_recipe(yaml.safe_load(path.read_text()), str(path))


def test_folder_import_goes_to_the_users_recipe_folder_and_lists_both_forms(tmp_path, cli):
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config")}
    code, _, stderr = cli("recipe-import", str(EUGR), env=env)
    assert code == 0, stderr
    folder = tmp_path / "config" / "edgevllm" / "recipes"
    assert sorted(p.stem for p in folder.glob("*.yaml")) == NAMES
    code, stdout, stderr = cli("recipes", "--as-json", env=env)
    assert code == 0, stderr
    forms: dict[str, list[str]] = {}
    for row in json.loads(stdout):
        forms.setdefault(row["name"], []).append(row["topology"])
    assert forms["4x-spark-cluster-big-moe"] == ["torchx4"]
    assert forms["4x-spark-cluster-dense-a17b"] == ["solox1", "torchx4"]  # dual: both forms
    assert forms["dual-dense"] == ["solox1", "torchx2"]
    assert forms["solo-tp2"] == ["solox1"]
    # eugr's users type the path under recipes/, case and all.
    code, stdout, stderr = cli("serve", "4x-spark-cluster/dense-A17B", "--dry-run", env=env)
    assert code == 0, stderr
    assert stdout.split()[-5:] == ["example-org/Dense-A17B", "--port", "8000", "-tp", "1"]


def test_any_failure_or_an_empty_folder_exits_non_zero(tmp_path, cli):
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, stderr = cli("recipe-import", str(empty), "--dry-run")
    assert code == 11 and f"error: {empty}: imported 0 of 0 recipes: no *.yaml recipe" in stderr
    clash = tmp_path / "clash"
    (clash / "a").mkdir(parents=True)
    for path in (clash / "a" / "b.yaml", clash / "a-b.yaml", clash / "broken.yaml"):
        path.write_text((RECIPES / "v2-quickstart.yaml").read_text())
    (clash / "broken.yaml").write_text("name: x\n")
    code, stdout, stderr = cli("recipe-import", str(clash), "--out", str(tmp_path / "out"))
    assert code == 11, stderr
    assert "imported 1 of 3 recipes: 2 failed (a-b.yaml, broken.yaml)" in stderr
    row = next(line for line in stdout.splitlines() if line.startswith("a-b.yaml"))
    assert "recipe name 'a-b' is also the name of a/b.yaml: rename one of the files" in row
    assert "Traceback" not in stderr


def test_template_gib_value_becomes_gpu_memory_gb(tmp_path):
    result, loaded = imported("template-gb.yaml", tmp_path)
    assert loaded.recipe.gpu_memory_gb == 96 and not result.warnings
    assert any("--gpu-memory-utilization-gb {gpu_memory_utilization} (default 96) (mod "
               "gpu-mem-util-gb): converted to gpu_memory_gb 96" in n for n in result.notes)
    tail = solo_argv(loaded)
    assert tail[3] == '{"gpu_memory_gib":96.0}'
    assert tail[4:] == ["vllm", "serve", "example-org/Template-GiB", "--port", "8000",
                        "--max-num-seqs", "2"]


def test_mods_run_at_build_time_downloads_are_recorded_and_a_loop_stays_on_the_host(tmp_path):
    result, loaded = imported("download-mod.yaml", tmp_path)
    assert not result.warnings
    # The downloaded plugin is baked into the image's workspace by the build.
    assert loaded.recipe.serve.args[3:5] == ["--reasoning-parser-plugin",
                                            "/workspace/plugin_parser.py"]
    assert any(n.startswith("plugin_parser.py: mod 'mods/plugin-download' downloads it from "
                            f"{PLUGIN_URL}; the build fetches it once") for n in result.notes)
    loop = next(n for n in result.notes if n.startswith("mod 'mods/cache-loop'"))
    assert loop.startswith("mod 'mods/cache-loop' starts a background loop at every start, "
                           "which an image cannot hold: run it on the host before inv serve "
                           "(sudo bash ")
    assert loop.endswith("mods/cache-loop/run.sh)")
    # The recipe names its image's build: the eugr mod (imported into the user's mods, its
    # download recorded for the build to fetch and lock) and InstantTensor for --load-format
    # instanttensor.
    spec = yaml.safe_load(Path(loaded.recipe.build.spec).read_text())
    assert spec == {"target": "spark", "add_mods": ["eugr-plugin-download"],
                    "packages": {"instanttensor": "0.2.2"}, "tags": ["vllm-node"]}
    manifest = yaml.safe_load((user_data_dir("mods") / "eugr-plugin-download" /
                               "manifest.yaml").read_text())
    assert manifest["steps"] == [{
        "kind": "script", "title": "plugin-download/run.sh", "run": "run.sh",
        "downloads": [{"url": PLUGIN_URL, "file": "downloads/plugin_parser.py"}]}]


def test_import_file_defaults_to_the_users_recipe_folder(user_config_home):
    result = import_file(RECIPES / "4x-spark-cluster" / "big-moe.yaml", force=True)
    assert result.path == user_config_home / "edgevllm/recipes/4x-spark-cluster-big-moe.yaml"
    assert load_recipe("4x-spark-cluster/big-moe").recipe.topology.nodes == 4
    assert result.path is not None
    result.path.unlink()


def test_import_dir_reports_each_file():
    rows = import_dir(EUGR, dry_run=True)
    by = {r.source: r for r in rows}
    assert by["4x-spark-cluster/big-moe.yaml"].status == "would import"
    assert len(by) == 14 and not any(s.startswith(("mods/", "examples/")) for s in by)


def test_single_file_dry_run_shows_warnings_and_writes_nothing(tmp_path, cli):
    out = tmp_path / "one.yaml"
    code, _, err = cli("recipe-import", str(RECIPES / "one-mod.yaml"), "--out", str(out),
                       "--dry-run")
    assert code == 0, err
    assert not out.exists()
    assert "warning: argument 'unsloth.jinja' names a file provided by mod " \
           "'mods/unsloth-template'" in err
    assert "note: mod 'mods/unsloth-template' dropped" in err


def test_a_megabyte_token_in_a_command_is_one_line_not_minutes(tmp_path):
    """shlex grows a token a character at a time (quadratic: 1 MB took minutes): the command's
    length is bounded before it is split."""
    import time

    text = (RECIPES / "trailing-backslash.yaml").read_text()
    hostile = tmp_path / "long.yaml"
    hostile.write_text(text.replace("--enforce-eager", "--enforce-eager " + "a" * (1 << 20)))
    started = time.monotonic()
    with pytest.raises(RecipeError, match="field 'command': 1048[0-9]* characters, over the"):
        import_file(hostile, tmp_path / "out.yaml")
    assert time.monotonic() - started < 30  # not a timing assertion: a bound on a hang
