"""Rendering: the right arch list and platform per target, byte-identical output for one spec,
one template per mode, and ``inv render`` as the build's own plan for every mode."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from edgevllm.builder.dockerfile import needs, stages
from edgevllm.builder.render import render_dockerfile
from edgevllm.builder.runner import compile_key
from edgevllm.sources.buildreqs import read_build_layout
from edgevllm.specs.buildspec import load_spec, resolve

FAKE_VLLM = Path(__file__).parent / "e2e" / "fixtures" / "fake-vllm"


def test_each_target_renders_its_arch_list():
    from edgevllm.specs.targets import all_targets

    for target in all_targets():  # every target in targets/, from the data
        arch = target.torch_cuda_arch_list
        text = render_dockerfile(resolve(load_spec(target.name)))
        assert f'TORCH_CUDA_ARCH_LIST="{arch}"' in text
        assert f"FROM {target.images.build} AS base" in text
        assert "FROM scratch AS wheels" in text and "FROM vllm-files AS runtime" in text
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


def test_thor_removes_flashinfer_cubin_and_no_stage_names_an_index():
    for mode in ("compile", "prebuilt", "precompiled"):
        text = render_dockerfile(resolve(load_spec("thor", overrides={
            "mode": mode, "vllm_wheel": None if mode == "compile" else "0.33.0"})))
        assert "pip uninstall -y flashinfer-cubin" in text
        assert "from=wheelhouse" in text
        assert not re.search(r"index-url|https?://", text.split("LABEL", 1)[0]), mode


def test_a_spec_naming_a_wheelhouse_is_one_line(tmp_path):
    """--wheelhouse/--offline were offered and only refused: every build makes its own
    wheelhouse from its locked closure, so neither the flags nor the fields exist."""
    from edgevllm.common.errors import SpecError

    with pytest.raises(SpecError, match="unknown field 'wheelhouse'"):
        load_spec("thor", overrides={"wheelhouse": str(tmp_path)})


def test_render_task_writes_dockerfile_and_context(cli, tmp_path):
    code, _, stderr = cli("render", "--target", "thor", "--out", str(tmp_path / "r"))
    assert code == 0, stderr
    assert 'TORCH_CUDA_ARCH_LIST="11.0a"' in (tmp_path / "r" / "Dockerfile").read_text()
    assert (tmp_path / "r" / "build-plan.json").is_file()
    assert (tmp_path / "r" / "edgevllm-mods" / "plan.json").is_file()


# inv render runs the build's own preparation with fetching off: per mode, the Dockerfile holds
# only the stages the plan's build targets need, and uses exactly the plan's named contexts.
RENDER_CASES = {
    "compile": ["--compile"],
    "compile-flashinfer": ["--flashinfer-repo", "https://example.invalid/fi.git",
                           "--flashinfer-ref", "v0.1.0"],
    "compile-no-mods": ["--spec", "SPEC", "--compile"],   # mods: []
    "prebuilt": ["--vllm-wheel", "0.33.0"],
    "precompiled": ["--mode", "precompiled", "--vllm-wheel", "0.33.0"],
}
_FROM_REF = re.compile(r"(?:--|[,\s])from=([A-Za-z0-9_.-]+)")


@pytest.mark.parametrize("case", sorted(RENDER_CASES))
def test_render_is_the_plan_the_build_runs(cli, tmp_path, case):
    (tmp_path / "spec.yaml").write_text("target: spark\nmods: []\n")
    args = [a.replace("WH", str(tmp_path)).replace("SPEC", str(tmp_path / "spec.yaml"))
            for a in RENDER_CASES[case]]
    out = tmp_path / "r"
    code, _, stderr = cli("render", "--target", "spark", "--out", str(out), *args)
    assert code == 0, stderr
    text = (out / "Dockerfile").read_text()
    plan = json.loads((out / "build-plan.json").read_text())
    assert plan["mode"] == case.split("-")[0], plan["mode_reason"]
    names = set(stages(text))
    external = set(_FROM_REF.findall(text)) - names
    exported = {"wheels"} if "wheels" in plan["stages"] else set()
    assert set(plan["contexts"]) == external | exported
    built = {stage for target in plan["stages"] for stage in needs(text, target)}
    assert names == built, f"stages never built in {case}: {sorted(names - built)}"


def test_render_modes_differ_where_they_should(cli, tmp_path):
    plans = {}
    for case in ("compile", "prebuilt", "precompiled"):
        code, _, stderr = cli("render", "--target", "thor", "--out", str(tmp_path / case),
                              *RENDER_CASES[case])
        assert code == 0, stderr
        plans[case] = json.loads((tmp_path / case / "build-plan.json").read_text())
    assert plans["prebuilt"]["stages"] == ["runtime"]
    assert {"vllm-src", "cmake-deps"} <= set(plans["compile"]["contexts"])
    assert {"wheelhouse", "build-tools", "vllm-src"} <= set(plans["precompiled"]["contexts"])
    assert "cmake-deps" not in plans["precompiled"]["contexts"]
    assert plans["compile"]["contexts"]["edgevllm-mods"] == "edgevllm-mods/"
    assert "FROM scratch AS wheels" not in (tmp_path / "prebuilt" / "Dockerfile").read_text()


def test_render_names_the_supplied_cmake_deps_and_warns_they_are_unproven(cli, tmp_path):
    """``--cmake-dep``: the folder passes its gate in the render too, the plan's cmake-deps
    context names it, and preflight says that nothing proves it is the tree's pin."""
    (tmp_path / "cutlass" / "include").mkdir(parents=True)
    (tmp_path / "cutlass" / "include" / "cutlass.h").write_text("// a mirror\n")
    code, _, stderr = cli("render", "--target", "thor", "--compile", "--out", str(tmp_path / "r"),
                          "--cmake-dep", f"cutlass={tmp_path / 'cutlass'}")
    assert code == 0, stderr
    plan = json.loads((tmp_path / "r" / "build-plan.json").read_text())
    assert plan["contexts"]["cmake-deps"].endswith("; cutlass from --cmake-dep>")
    said = " ".join(stderr.split())
    assert f"warning: cmake dep cutlass: {tmp_path / 'cutlass'} (1 files" in said
    assert "stands in for the tree's pin, unproven (no --lock)" in said


def test_compile_key_of_an_unchanged_input_stays_the_same():
    """The stages the wheels target needs feed the compile key (builder/runner.compile_key): a
    change of the templates that leaves those stages alone keeps every cached compile valid.
    These keys were computed before the templates were split per mode; a deliberate change to
    the compile stages (or to the targets' data they render) updates them here."""
    layout = read_build_layout(FAKE_VLLM)
    keys = {}
    for name in ("spark", "thor"):
        text = render_dockerfile(resolve(load_spec(name)), {"A": "1"}, layout)
        keys[name] = compile_key(text, {"vllm": "tree"}, {"VLLM_VERSION": "0.1.0"})
    eff = resolve(load_spec("spark", overrides={"mode": "precompiled", "vllm_wheel": "0.33.0"}))
    text = render_dockerfile(eff, {}, layout, {"release": "0.33.0", "wheel": "vllm-0.33.0-x.whl"})
    keys["precompiled"] = compile_key(text, {"vllm": "tree"}, {"VLLM_VERSION": "0.1.0"})
    # spark (and its precompiled key) changed deliberately: its apt packages gained the verbs
    # libraries (libibverbs1, ibverbs-providers, rdma-core) that clusters need for RDMA. spark
    # and thor changed deliberately again: the compile step gained the shared compile cache's
    # secret mount and ccache's counters (the same text with and without --compile-cache).
    # precompiled changed deliberately: its closure became the shared closure stages (no target
    # name, the byte-code compiled on the build platform).
    # All three changed deliberately once more: a cache mount's id is no longer hashed (builders
    # that name their compiler caches differently share a key and the wheel cache's artifacts).
    # spark and thor changed deliberately again: the compile's build stages take the locked
    # closure and the tree's build requirements by hash (no index; the base stage lost torch).
    # All three changed deliberately once more: the closure stages install no vLLM (it comes in
    # its own stage after them) and write the constraints no more (vllm-files does, once).
    # All three changed deliberately once more: closure-files makes the venv in its install
    # step (ensurepip's setuptools no longer sits in a layer below the closure's).
    # spark and thor changed deliberately again: their compile leaves FlashAttention 3 out (the
    # targets' leave_out, builder/subset/plan.py), so the compile step runs the cmake wrapper.
    # spark and thor changed deliberately again: with a shared compile cache, a local hit is
    # written to it too (CCACHE_RESHARE in the compile step).
    # spark and thor changed deliberately again: the compile step's comments name the cmake
    # wrapper where it now stands (builder/subset/inimage_cmake.py: in-image scripts are named
    # inimage_*); a rendered comment is part of the stages' text the key hashes.
    assert keys == {"spark": "f2e4ad1147471123", "thor": "3c513a899f99fe28",
                    "precompiled": "7e6c6f441d1b19ae"}


def test_templates_render_in_the_sandbox():
    from jinja2.sandbox import SandboxedEnvironment

    from edgevllm.builder.render import _environment

    assert isinstance(_environment(), SandboxedEnvironment)


def test_render_from_a_lock_names_the_locked_commit(cli, tmp_path):
    """inv render --lock: the sources are the lock's, by SHA, as inv build --lock fetches them."""
    from edgevllm.specs.lock import Lock, SourceLock, write_lock

    base, tree = "a" * 40, "b" * 40
    lock = Lock(target="spark", vllm=SourceLock(name="vllm", repo="https://example.invalid/v.git",
                                                base_sha=base, commit=base, tree=tree,
                                                version="0.33.0"))
    path = write_lock(lock, tmp_path / "x.lock.json")
    code, _, stderr = cli("render", "--lock", str(path), "--out", str(tmp_path / "r"))
    assert code == 0, stderr
    plan = json.loads((tmp_path / "r" / "build-plan.json").read_text())
    assert f"commit {base} (from the lock)" in plan["contexts"]["vllm-src"]
    code, _, stderr = cli("render", "--lock", str(path), "--target", "thor",
                          "--out", str(tmp_path / "t"))
    assert code == 2 and "differs from the target of the lock (spark)" in stderr


def test_shared_compile_cache_is_a_secret_mount_and_keeps_the_compile_key():
    """--compile-cache reaches the compile step only as a BuildKit secret: the Dockerfile (and so
    the compile key) is the same text with and without it, and holds no URL."""
    layout = read_build_layout(FAKE_VLLM)
    url = "redis://:s3cretpw@cache.lan:6379/0"
    plain = render_dockerfile(resolve(load_spec("spark")), {}, layout)
    shared = render_dockerfile(resolve(load_spec("spark", overrides={"compile_cache": url})), {},
                               layout)
    assert shared == plain
    assert "s3cretpw" not in shared and "cache.lan" not in shared
    build = stage_text_of(shared, "build")
    assert "--mount=type=secret,id=ccache-remote,target=/run/secrets/ccache-remote" in build
    assert "CCACHE_REMOTE_STORAGE=\"$(cat /run/secrets/ccache-remote)\"" in build
    # a local hit is written to the shared cache too: a warm builder fills a new shared cache
    assert "CCACHE_RESHARE=true" in build
    assert "ccache --print-stats" in build and "ccache -z" in build
    key = compile_key(shared, {"vllm": "tree"}, {"VLLM_VERSION": "0.1.0"})
    assert key == compile_key(plain, {"vllm": "tree"}, {"VLLM_VERSION": "0.1.0"})
    own = render_dockerfile(resolve(load_spec("spark", overrides={"compile_cache_id": "mine"})),
                            {}, layout)
    assert "--mount=type=cache,target=/root/.cache/ccache,id=mine" in own
    # A builder's own cache name is no input of the compile: the key (and the wheel cache's
    # artifact) is shared by builders that name their caches differently.
    assert compile_key(own, {"vllm": "tree"}, {"VLLM_VERSION": "0.1.0"}) == key
    assert compile_key(own.replace("ccache -z", "ccache -z -v"), {"vllm": "tree"},
                       {"VLLM_VERSION": "0.1.0"}) != key


def stage_text_of(dockerfile: str, name: str) -> str:
    return dockerfile.split(f"AS {name}\n", 1)[1].split("\nFROM ", 1)[0]


CLOSURE_STAGES = ("closure-files", "closure-bytecode", "closure")
VLLM_STAGES = ("vllm-files", "vllm-bytecode")


def _steps(stage: str) -> str:
    """A stage's instructions (what BuildKit keys its steps by), without its comments."""
    return "".join(line for line in stage.splitlines(keepends=True)
                   if line.strip() and not line.lstrip().startswith("#"))


def _folder_digest(folder: Path) -> str:
    """What a build context holds: every file's relative name and bytes."""
    import hashlib

    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(f"{path.relative_to(folder)}\0".encode() + path.read_bytes() + b"\0")
    return digest.hexdigest()


def test_targets_and_modes_with_one_closure_share_its_install(tmp_path):
    """spark and thor (and spark's precompiled mode) with the same closure: the install stages
    are byte-identical and name no target, and the wheelhouse context they bind holds the same
    bytes (thor's extra resolver override is in the lock, not in requirements.txt); the stages
    of the mode's vLLM name no target either (spark and thor prebuilt share them; precompiled
    takes the exported wheels instead of the release wheel); what differs per target comes
    after them, in the stage ``runtime``."""
    import hashlib

    from edgevllm.builder.modes.closure import OVER_CLOSURE, closure_overrides
    from edgevllm.sources.wheelhouse import Wheelhouse
    from edgevllm.sources.wheels import Closure, WheelPin

    effs = {"spark": resolve(load_spec("spark", overrides={"vllm_wheel": "0.33.0"})),
            "thor": resolve(load_spec("thor", overrides={"vllm_wheel": "0.33.0"})),
            "spark-precompiled": resolve(load_spec("spark", overrides={
                "mode": "precompiled", "vllm_wheel": "0.33.0"}))}
    texts = {name: render_dockerfile(eff, layout=read_build_layout(FAKE_VLLM))
             for name, eff in effs.items()}
    install = {name: [_steps(stages(text)[s]) for s in CLOSURE_STAGES]
               for name, text in texts.items()}
    assert install["spark"] == install["thor"] == install["spark-precompiled"]
    assert not re.search(r"spark|thor|12\.1a|11\.0a", "".join(install["spark"]))
    assert "FROM --platform=$BUILDPLATFORM" in install["spark"][1]
    vllm = {name: [_steps(stages(text)[s]) for s in VLLM_STAGES] for name, text in texts.items()}
    assert vllm["spark"] == vllm["thor"] != vllm["spark-precompiled"]
    assert vllm["spark"][1] == vllm["spark-precompiled"][1]   # the byte-code step is one text
    assert vllm["spark"][0].startswith("FROM closure AS vllm-files")
    assert "FROM --platform=$BUILDPLATFORM" in vllm["spark"][1]
    assert not re.search(r"spark|thor|12\.1a|11\.0a", "".join(vllm["spark"] + vllm[
        "spark-precompiled"]))
    assert "-r /wheelhouse/requirements-mode.txt" in vllm["spark"][0]
    assert "from=wheels" in vllm["spark-precompiled"][0]
    assert stages(texts["spark"])["runtime"] != stages(texts["thor"])["runtime"]
    assert stages(texts["thor"])["runtime"].startswith(
        "FROM vllm-files AS runtime\nCOPY --from=vllm-bytecode /bytecode/ /\n")
    # The runtime replaces no file of the closure: nothing reinstalls the mode's vLLM over it.
    assert not any("reinstall" in text for text in texts.values())

    from support.wheelhouse import cached_pins

    wheelhouse = Wheelhouse(tmp_path / "cache")
    pins = cached_pins(wheelhouse, ("idna", "six", "uv", "vllm"), "{name} wheel bytes")
    overrides = {name: closure_overrides(effs[name], []) for name in ("spark", "thor")}
    assert overrides["spark"] != overrides["thor"]   # thor removes flashinfer-cubin
    closures = {name: Closure("aarch64-manylinux_2_34", "3.12", ["vllm==0.33.0"],
                              overrides[name], pins=list(pins)) for name in overrides}
    assert wheelhouse.set_folder(closures["spark"], OVER_CLOSURE) == wheelhouse.set_folder(
        closures["thor"], OVER_CLOSURE)
    digests = {name: _folder_digest(wheelhouse.assemble(c, tmp_path / name, OVER_CLOSURE))
               for name, c in closures.items()}
    assert digests["spark"] == digests["thor"]
    assert "vllm==" not in (tmp_path / "spark" / "requirements.txt").read_text()
    fewer = Closure("aarch64-manylinux_2_34", "3.12", ["vllm==0.33.0"], pins=pins[:2])
    assert _folder_digest(wheelhouse.assemble(fewer, tmp_path / "fewer", OVER_CLOSURE)) \
        != digests["spark"]


def test_the_plan_names_what_goes_on_top_of_the_closure(tmp_path, capsys):
    """``inv render`` of a build that asks for a package (a recipe's InstantTensor) says so, with
    the mods and their versions: the closure placeholder alone named none of it."""
    from edgevllm.builder.renderout import render_to
    from edgevllm.mods.catalog import get_mod

    spec = load_spec("spark", overrides={"vllm_wheel": "0.33.0",
                                         "packages": {"instanttensor": "0.2.2"}})
    render_to(spec, tmp_path / "r")
    plan = json.loads((tmp_path / "r" / "build-plan.json").read_text())
    assert plan["on_top"]["packages"]["instanttensor"] == "0.2.2"
    mods = resolve(spec).mods
    assert mods and plan["on_top"]["mods"] == {m: get_mod(m).lock_version() for m in mods}
    line = capsys.readouterr().err
    assert "on top of the closure: packages " in line and "instanttensor==0.2.2" in line
    assert f"{mods[0]} {get_mod(mods[0]).lock_version()}" in line
