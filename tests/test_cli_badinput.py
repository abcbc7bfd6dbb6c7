"""Every task, given bad input: one ``error:`` line on stderr, the exit code of its error class,
no traceback, and nothing written (each case runs in an empty folder whose tree is compared
before and after; HOME and the XDG folders point inside it).

No Docker is needed: the inputs fail before the engine is asked, and the tasks that need the
engine run against a socket nobody listens on (``DOCKER_HOST``), where the answer is exit 3. Most
cases run in-process through the CLI's own entry (``program().run``) to stay fast; a handful run
the real ``edgevllm`` console script and ``inv`` (tasks.py) in a subprocess.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from edgevllm.cli import namespace, program
from support.inprocess import run_cli

REPO = Path(__file__).resolve().parents[1]
RECIPE = "nemotron-3-nano-nvfp4-spark"
DEAD = 3  # the engine cannot be reached

# (argv, exit code, a piece of the error line: the field, flag or file it names). A file or
# folder the user named that is not there is an input error (2), whichever stage reads it.
CASES: list[tuple[list[str], int, str]] = [
    # Invoke's own parse errors
    (["no-such-task"], 2, "unknown task or flag 'no-such-task'"),
    (["bench"], 2, "'what' required"),
    (["render", "--out"], 2, "--out needs a value"),
    (["load"], 2, "'path' required"),
    (["targets", "extra"], 2, "unknown task or flag 'extra'"),
    # bench
    (["bench", "http://127.0.0.1:99999999"], 2, "not a server URL"),
    (["bench", "http://127.0.0.1:9", "--repeats", "many"], 2, "--repeats 'many'"),
    (["bench", "http://127.0.0.1:9", "--concurrency", "0"], 2, "--concurrency"),
    (["bench", "http://127.0.0.1:9", "--lengths", "1024"], 2, "--lengths '1024'"),
    (["bench", "http://127.0.0.1:9", "--seed", "-1"], 2, "--seed"),
    (["bench", "http://127.0.0.1:9", "--point-timeout", "soon"], 2, "--point-timeout 'soon'"),
    (["bench", "http://127.0.0.1:9", "--run-timeout", "-5"], 2, "--run-timeout"),
    (["bench", "--report", "nonutf8.json"], 12, "nonutf8.json"),
    (["bench", "--report", "adir"], 12, "adir"),
    (["bench", "--report", "nothere.json"], 2, "nothere.json: no such benchmark record"),
    (["bench", "--report", "good.bench.json", "--compare", "bad.bench.json"], 12,
     "bad.bench.json: field 'points.0.concurrency'"),
    # build and render: every field by its grammar, before any work
    (["build"], 2, "no target given"),
    (["build", "--target", "nosuch"], 2, "unknown target 'nosuch'"),
    (["build", "--target", "thor", "--env", "A\nRUN touch owned=1"], 2, "field 'env"),
    (["build", "--target", "thor", "--max-jobs", "many"], 2, "--max-jobs 'many'"),
    (["build", "--target", "thor", "--max-jobs", "99999999"], 2, "max_jobs"),
    (["build", "--spec", "nonutf8.yaml"], 2, "nonutf8.yaml: not UTF-8"),
    (["build", "--spec", "deep.yaml"], 2, "nested too deeply"),
    (["build", "--spec", "adir"], 2, "adir"),
    (["build", "--target", "spark,thor,spark"], 2, "names a target twice"),
    (["build", "--target", "spark,thor", "--check-reproducible"], 2,
     "--check-reproducible builds one target twice"),
    (["build", "--target", "spark", "--wheel-cache", "{{7*7}}/x"], 2, "--wheel-cache '{{7*7}}/x'"),
    (["build", "--target", "spark", "--aot", "nonutf8.json"], 2, "nonutf8.json: not UTF-8"),
    (["build", "--target", "spark", "--warm", "a.json", "--aot", "b.json"], 2,
     "--warm is the old name of --aot; give --aot alone"),
    (["build", "--spec", "nothere.yaml"], 2, "nothere.yaml: no such file"),
    (["build", "--target", "thor", "--wheelhouse", "adir"], 2, "'--wheelhouse'"),
    (["build", "--recipe", RECIPE, "--lock", "spark.lock.json"], 2, "--recipe and --lock"),
    (["build", "--recipe", RECIPE, "--spec", "nonutf8.yaml"], 2, "nonutf8.yaml: not UTF-8"),
    (["build", "--recipe", RECIPE, "--spec", "nothere.yaml"], 2, "nothere.yaml: no such file"),
    (["render", "--target", "thor", "--offline"], 2, "'--offline'"),
    # a flag the mode's record cannot honour (specs/moderule.py), prebuilt's FlashInfer included
    (["render", "--target", "thor", "--mode", "prebuilt", "--flashinfer-repo",
      "flashinfer-ai/flashinfer", "--flashinfer-ref", "v0.7.2"], 2,
     "compiles FlashInfer: it needs mode compile, not prebuilt"),
    (["render", "--target", "thor", "--compile", "--vllm-wheel", "0.33.0"], 2,
     "field 'vllm_wheel' (--vllm-wheel) installs a released wheel"),
    (["render", "--target", "thor", "--mode", "precompiled", "--extensions", "spinloop"], 2,
     "field 'extensions' (--extensions) picks extensions to compile"),
    (["build", "--lock", "nothere.lock.json"], 2, "nothere.lock.json: no such lock file"),
    (["build", "--lock", "string.lock.json"], 5, "schema_version"),
    (["build", "--lock", "spark.lock.json", "--target", "thor"], 2, "--target thor differs"),
    (["render", "--target", "thor", "--platform", "linux/arm64\nRUN id"], 2, "platform"),
    (["render", "--target", "thor", "--base-image", "Ubuntu AS x"], 2, "base_image"),
    (["render", "--target", "thor", "--package", "torch=2.0 --pre"], 2, "packages.torch"),
    (["render", "--target", "thor", "--build-arg", "A B=1"], 2, "build_args"),
    (["render", "--target", "thor", "--tag", "a b"], 2, "tags.0"),
    (["render", "--target", "thor", "--vllm-pr", "abc"], 2, "--vllm-pr 'abc'"),
    (["render", "--lock", "spark.lock.json", "--target", "thor"], 2, "--target thor differs"),
    (["render", "--target", "thor", "--compile", "--toolchain", "qemu"], 2, "field 'toolchain'"),
    (["render", "--target", "spark", "--extensions", "cumem allocator"], 2,
     "field 'extensions.0'"),
    (["render", "--target", "spark", "--mode", "prebuilt", "--extensions", "spinloop"], 2,
     "field 'extensions' (--extensions) picks extensions to compile"),
    (["render", "--target", "thor", "--compile", "--toolchain", "cross", "--platform",
      "linux/amd64"], 2, "toolchain cross: "),   # natively (x86_64) / no road (arm64)
    (["render", "--lock", "spark.lock.json", "--mode", "prebuilt"], 2,
     "--lock: the lock is a compile build's and this build is prebuilt"),
    # --cmake-dep NAME=FOLDER: the folder through its gate, its name against the lock's tree
    (["render", "--target", "thor", "--compile", "--cmake-dep", "cutlass=nothere"], 2,
     "--cmake-dep cutlass=nothere: no such folder"),
    (["render", "--target", "thor", "--compile", "--cmake-dep", "cutlass"], 2,
     "--cmake-dep 'cutlass': expected NAME=FOLDER"),
    (["build", "--target", "spark", "--cmake-dep", "cutlass"], 2, "expected NAME=FOLDER"),
    (["render", "--target", "thor", "--compile", "--cmake-dep", "../x=adir"], 2,
     "'../x' is not a plain name"),
    (["render", "--target", "thor", "--compile", "--cmake-dep", "cutlass=spark.lock.json"], 2,
     "--cmake-dep cutlass=spark.lock.json: not a folder"),
    (["render", "--target", "thor", "--compile", "--cmake-dep", "cutlass=linkout"], 2,
     "leads out of its folder through a link"),
    (["render", "--lock", "compile.lock.json", "--cmake-dep", "nosuch=adir"], 2,
     "--cmake-dep nosuch: the tree's CMake declares no dependency 'nosuch'"),
    (["render", "--lock", "supplied.lock.json"], 5, "give --cmake-dep cutlass=FOLDER"),
    # ... in every mode (issue 42): a FOLDER that is none, and an --extensions naming nothing
    (["render", "--target", "spark", "--cmake-dep", "x=/dev/null"], 2,
     "--cmake-dep x=/dev/null: not a folder"),
    (["render", "--target", "spark", "--cmake-dep", "cutlass=spark.lock.json"], 2,
     "--cmake-dep cutlass=spark.lock.json: not a folder"),
    (["render", "--target", "spark", "--cmake-dep", "cutlass=nothere"], 2,
     "--cmake-dep cutlass=nothere: no such folder"),
    (["build", "--target", "spark", "--cmake-dep", "x=/dev/zero"], 2, "x=/dev/zero: not a folder"),
    (["render", "--target", "spark", "--extensions", ""], 2, "--extensions '': names nothing"),
    (["build", "--target", "spark", "--extensions", " , "], 2, "--extensions ' , ': names nothing"),
    # any task: a path too long for the system, a NUL byte, a newline in a name (issue 42)
    (["verify", "--target", "thor", "--path", "x" * 5000], 2, "(5000 characters): file name too"),
    (["load", "a/" * 2500 + "b"], 2, "file name too long"),
    (["render", "--target", "thor", "--out", "a\x00b"], 2, "render --out: holds a NUL byte"),
    (["serve", "two\nlines"], 11, "unknown recipe 'two\\nlines'"),
    (["recipe-import", "/dev/zero"], 11, "/dev/zero: more than"),
    (["verify", "--target", "thor", "--policy", "/dev/zero", "--path", "adir"], 2,
     "/dev/zero: 2097153 bytes, more than a data file may hold"),
    (["logs", "--name", "x", "--engine", "nosuchctx"], 4,
     "docker logs x failed on engine nosuchctx"),
    (["sbom", "--image", "x", "--out", "nothere/x"], DEAD, "cannot reach the Docker daemon"),
    (["doctor", "--target", "spark", "--out", "nothere"], 3, "not ready to build for spark"),
    (["render", "--target", "thor", "--cherry-pick", "zzz", "--out", "new/render"], 5,
     "--cherry-pick 'zzz'"),
    # plan and sources
    (["plan", "--target", "nosuch"], 2, "unknown target"),
    (["plan", "--target", "thor", "--vllm-pr", "abc"], 2, "--vllm-pr 'abc'"),
    (["sources", "--vllm-pr", "x", "--dry-run"], 2, "--vllm-pr 'x'"),
    (["sources", "--lock", "spark.lock.json", "--target", "thor"], 2, "--target thor differs"),
    (["sources", "--lock", "nonutf8.lock.json", "--dry-run"], 5, "not UTF-8"),
    (["sources", "--lock", "nothere.lock.json", "--dry-run"], 2, "nothere.lock.json: no such"),
    # mods
    (["mods", "--target", "nosuch"], 2, "unknown target 'nosuch'"),
    (["mods-apply"], 2, "--target"),
    (["mods-apply", "--target", "thor", "--mod", "nosuch", "--python", "/nonexistent/python"],
     2, "unknown mod 'nosuch'"),
    (["tune-moe", "--image", "x", "--target", "thor", "--model", "m", "--tp-size", "x"], 2,
     "--tp-size 'x'"),
    # verify and probe
    (["verify"], 2, "--target"),
    (["verify", "--target", "thor", "--path", "nonutf8.yaml"], 8, "nonutf8.yaml"),
    (["verify", "--target", "thor", "--policy", "nonutf8.yaml", "--path", "adir"], 2,
     "nonutf8.yaml"),
    (["verify", "--target", "thor", "--image", "x"], DEAD, "cannot reach the Docker daemon"),
    (["verify", "--supply-chain"], 2, "verify --supply-chain: --key required"),
    (["verify", "--supply-chain", "--key", "k"], 2, "--image and --tarball"),
    (["verify", "--supply-chain", "--key", "k", "--image", "x", "--tarball", "y"], 2,
     "--image and --tarball"),
    (["verify", "--supply-chain", "--key", "k", "--image", "x", "--target", "thor"], DEAD,
     "cannot reach"),
    (["verify", "--supply-chain", "--key", "k", "--image", "x", "--target", "thor", "--diff",
      "a,b"], 2, "takes no --diff"),
    (["verify", "--supply-chain", "--key", "k", "--image", "x", "--cuobjdump"], 2,
     "takes no --cuobjdump (add --target"),
    (["verify", "--supply-chain", "--key", "k", "--path", "adir", "--json", "v.json"], 2,
     "takes no --path, --json"),
    (["verify", "--target", "thor", "--path", "adir", "--key", "k"], 2,
     "--key: only with --supply-chain"),
    (["verify", "--target", "thor", "--path", "adir", "--lock", "spark.lock.json"], 2,
     "--lock needs --key"),
    (["verify", "--supply-chain", "--key", "k", "--tarball", "nothere.manifest.json"], 2,
     "nothere.manifest.json: no such file"),
    (["verify", "--target", "thor", "--tarball", "nothere.tar"], 2, "nothere.tar: no such file"),
    (["verify", "--supply-chain", "--key", "k", "--tarball", "spark.lock.json"], 10,
     "spark.lock.json: neither a tar"),
    (["verify", "--supply-chain", "--key", "k", "--image", "x"], DEAD, "cannot reach"),
    (["probe", "--image", "x", "--target", "thor", "--port", "99999999"], 2, "--port"),
    (["probe", "--image", "x", "--target", "thor", "--level", "abc"], 2, "--level 'abc'"),
    (["probe", "--image", "x", "--target", "thor", "--timeout", "nan"], 2, "--timeout"),
    (["probe", "--image", "x", "--target", "thor"], DEAD, "cannot reach the Docker daemon"),
    # publish, load, push
    (["publish", "--image", "x", "--out", "o", "--level", "99"], 2, "--level 99"),
    (["publish", "--image", "x", "--out", "o", "--threads", "abc"], 2, "--threads 'abc'"),
    (["publish", "--image", "x", "--out", "o"], DEAD, "cannot reach the Docker daemon"),
    (["load", "nothere.manifest.json"], 2, "nothere.manifest.json: no such file"),
    (["load", "nothere.tar.zst"], 2, "nothere.tar.zst: no such file"),
    (["push"], 2, "--image"),
    (["push", "--image", "x", "--registry", "localhost:5000"], DEAD, "cannot reach"),
    # recipes and serving
    (["serve", RECIPE, "--gpu-memory-gb", "nan"], 2, "--gpu-memory-gb 'nan'"),
    (["serve", RECIPE, "--wait", "soon"], 2, "--wait 'soon'"),
    (["serve", RECIPE, "--dry-run", "--set", "port=99999999"], 11, "health.port"),
    (["serve", "nosuch"], 11, "unknown recipe 'nosuch'"),
    (["serve", RECIPE, "--caches", "nonutf8.json"], 11, "cache bundle nonutf8.json"),
    (["serve", RECIPE, "--caches", "adir"], 11, "cache bundle adir: not a file"),
    (["warm", RECIPE, "--prompts", "0"], 2, "--prompts"),
    (["warm", RECIPE, "--lengths", "32"], 2, "--lengths '32'"),
    (["warm", "nosuch"], 11, "unknown recipe 'nosuch'"),
    (["warm", RECIPE, "--image", "Bad Image;rm"], 2, "--image"),
    # bundle and deploy (docs/offline.md): before the engine, the caches or the bundle are read
    (["bundle"], 2, "--image required"),
    (["bundle", "--image", "x:1", "--recipe", RECIPE, "--out", "o"], 2, "--key required"),
    (["bundle", "--image", "Bad Image;rm", "--recipe", RECIPE, "--out", "o", "--key", "k"], 2,
     "--image"),
    (["bundle", "--image", "x:1", "--recipe", RECIPE, "--out", "o", "--key", "nothere.pem"], 2,
     "nothere.pem"),
    (["deploy"], 2, "--from BUNDLE and --key PUBLIC_KEY required"),
    (["deploy", "--from", "nothere", "--key", "k"], 2, "--from nothere: no such bundle folder"),
    (["deploy", "--from", "adir", "--key", "nothere.pem"], 2, "nothere.pem"),
    (["deploy", "--from", "adir", "--key", "nonutf8.json"], 2, "not a PEM key"),
    (["copy", "--image", "x", "--to", "local", "--with-caches", "adir"], 11, "adir: not a file"),
    (["publish", "--image", "x", "--out", "o", "--with-caches", "nonutf8.json"], 11,
     "cache bundle nonutf8.json"),
    (["warm", RECIPE], DEAD, "cannot reach the Docker daemon"),
    (["serve", RECIPE], DEAD, "cannot reach the Docker daemon"),
    (["compose", "--recipe", RECIPE, "--set", "port=0", "--out", "c.yaml"], 11, "health.port"),
    (["compose", "--recipe", RECIPE], 2, "--out"),
    (["recipes", "--as-json", "extra"], 2, "unknown task or flag 'extra'"),
    (["recipe-import", "nosuch"], 2, "nosuch: no such file"),
    # a recipe that asks for the host (serve/recipe/hostaccess.py) is refused by every task that
    # launches it, unless --allow-host-access
    (["serve", "hostile.yaml", "--dry-run"], 11, "'--privileged' (not a flag a recipe may pass)"),
    (["compose", "--recipe", "hostile.yaml", "--out", "c.yaml"], 11, "--allow-host-access"),
    (["warm", "hostile.yaml"], 11, "container.extra"),
    (["bench", "hostile.yaml"], 11, "container.extra"),
    (["serve", "hostile.yaml", "--allow-host-access", "--dry-run", "--set", "port=99999999"], 11,
     "health.port"),
    (["compose", "--recipe", "hostile.yaml", "--allow-host-access", "--set", "port=0", "--out",
      "c.yaml"], 11, "health.port"),
    (["serve", RECIPE, "--allow-host-access", "yes"], 2, "yes"),
    (["compose", "--recipe", "nothere.yaml", "--out", "c.yaml"], 2, "nothere.yaml not found"),
    (["status"], DEAD, "cannot reach the Docker daemon"),
    (["stop", "--timeout", "x"], 2, "--timeout 'x'"),
    (["stop", "--name", "x"], DEAD, "cannot reach the Docker daemon"),
    (["logs"], 11, "--recipe NAME or --name"),
    (["logs", "--name", "x", "--tail", "x"], 2, "--tail 'x'"),
    (["logs", "--name", "x"], DEAD, "cannot reach the Docker daemon"),
    (["copy"], 2, "copy: --image required"),
    (["copy", "--image", "x", "--to", "local"], DEAD, "cannot reach the Docker daemon"),
    (["model-fetch", "not a valid id!!"], 11, "not a valid id"),
    (["doctor", "--target", "nosuch"], 2, "unknown target 'nosuch'"),
    (["roofline", "nosuch-folder"], 2, "nosuch-folder is neither a folder nor a model id"),
    (["roofline", "adir", "--target", "nosuch"], 2, "unknown target"),
    (["targets", "--as-json", "--bogus"], 2, "unknown task or flag '--bogus'"),
    (["diff", "spark.lock.json"], 2, "'new' required"),
    (["diff", "spark.lock.json", "nonutf8.json"], 5, "not UTF-8"),
    (["diff", "image-a", "image-b"], DEAD, "cannot reach the Docker daemon"),
    (["diff", "nothere.lock.json", "spark.lock.json"], 2, "nothere.lock.json: no such file"),
    (["keygen", "--out", "adir"], 2, "adir already exists"),
    (["keygen", "--out", "spark.lock.json/key"], 2, "parent of this path is a file"),
    (["sbom"], 2, "--image and --tarball"),
    (["sbom", "--image", "x"], DEAD, "cannot reach the Docker daemon"),
    (["sbom", "--tarball", "nothere.manifest.json"], 2, "nothere.manifest.json: no such file"),
    (["sign", "--image", "x"], 2, "--key required"),
    (["verify-supply-chain"], 2, "--key required"),
    # track (docs/track.md): before PyPI is asked; an unknown or yanked release and no network
    # are tests/test_track_report.py's (a local index)
    (["track"], 2, "no --from LOCK|SPEC and no --target"),
    (["track", "--target", "spark", "--min-age-days", "soon"], 2, "--min-age-days 'soon'"),
    (["track", "--target", "spark", "--min-age-days", "-1"], 2, "--min-age-days"),
    (["track", "--target", "spark", "--json", "--markdown"], 2, "--json and --markdown"),
    (["track", "--from", "nothere.yaml"], 2, "nothere.yaml"),
    (["track", "--target", "spark", "--write-spec", "nodir/new.yaml"], 2, "no folder nodir"),
    # --to REF (track/gitref.py): an unknown branch of the spec's repository (an empty local
    # one), a ref git cannot read as one; no mirror is made
    (["track", "--from", "localrepo.yaml", "--to", "nosuch"], 5, "has no branch or tag 'nosuch'"),
    (["track", "--target", "spark", "--to", "a..b"], 2, "--to a..b"),
    # dist-pool (builder/distpool): flags before any download or process; no pool, no token
    (["dist-pool", "sideways"], 2, "dist-pool 'sideways'"),
    (["dist-pool", "up", "--workers", "0"], 2, "--workers"),
    (["dist-pool", "up", "--workers", "256"], 2, "--workers 256"),  # more than the cores
    (["dist-pool", "up", "--bind", "0.0.0.0"], 2, "--bind 0.0.0.0"),
    (["dist-pool", "up", "--port", "70000"], 2, "--port"),
    (["dist-pool", "check", "--scheduler", "sccache://tok3n@h:1"], 2, "carries no token"),
    (["dist-pool", "check", "--token-file", "nothere.token"], 2, "nothere.token"),
    (["dist-pool", "status"], 3, "no pool is up"),
    # a token file without a pool is a --dist left out, never silently unused
    (["build", "--target", "spark", "--compile", "--dist-token-file", "client.token"], 2,
     "--dist-token-file is given without --dist"),
]

# A handful through the real entry points, in a process of their own.
SUBPROCESS_CASES: list[tuple[str, list[str], int, str]] = [
    ("edgevllm", ["build", "--no-such-flag"], 2, "unknown task or flag '--no-such-flag'"),
    ("edgevllm", ["bench", "http://127.0.0.1:9", "--seed", "abc"], 2, "--seed 'abc'"),
    ("edgevllm", ["serve", RECIPE, "--gpu-memory-gb", "nan"], 2, "--gpu-memory-gb"),
    ("edgevllm", ["status"], DEAD, "cannot reach the Docker daemon"),
    ("edgevllm", ["render", "--lock", "string.lock.json"], 5, "schema_version"),
    ("inv", ["build", "--no-such-flag"], 2, "unknown task or flag '--no-such-flag'"),
    ("inv", ["bench"], 2, "'what' required"),
    ("inv", ["probe", "--image", "x", "--target", "thor", "--port", "0"], 2, "--port"),
]


def _inputs(folder: Path) -> None:
    """The bad files the cases name."""
    (folder / "nonutf8.yaml").write_bytes(b"target: thor\n\xff\xfe\n")
    (folder / "nonutf8.json").write_bytes(b"\xff{")
    (folder / "nonutf8.lock.json").write_bytes(b"{\"target\": \"\xff\"}")
    (folder / "deep.yaml").write_text("[" * 30000)
    (folder / "spark.lock.json").write_text(json.dumps({"target": "spark", "schema_version": 1}))
    (folder / "string.lock.json").write_text(json.dumps({"target": "spark",
                                                         "schema_version": "1"}))
    (folder / "adir").mkdir()
    (folder / "linkout").mkdir()
    (folder / "linkout" / "evil").symlink_to("../spark.lock.json")
    (folder / "twofiles").mkdir()
    for name in ("a", "b"):
        (folder / "twofiles" / name).write_text(name)
    dep: dict[str, object] = {"repo": "https://github.com/NVIDIA/cutlass", "ref": "v4.7.1",
                              "tree": "b" * 40, "env_var": "VLLM_CUTLASS_SRC_DIR"}
    records = {"compile": {**dep, "commit": "a" * 40}, "supplied": {**dep, "supplied": True}}
    for name, record in records.items():
        (folder / f"{name}.lock.json").write_text(json.dumps({
            "target": "spark", "schema_version": 1, "mode": "compile",
            "kernel_plan": {"cuda_archs": ["12.1a"]}, "cmake_deps": {"cutlass": record}}))
    import yaml

    hostile = yaml.safe_load((REPO / "recipes" / f"{RECIPE}.yaml").read_text())
    hostile["name"] = "hostile"
    hostile.setdefault("container", {})["extra"] = ["--privileged", "--pid=host"]
    (folder / "hostile.yaml").write_text(yaml.safe_dump(hostile))
    record = {"schema": "edgevllm-bench/1", "name": "run", "points": []}
    (folder / "good.bench.json").write_text(json.dumps(record))
    (folder / "bad.bench.json").write_text(json.dumps(
        {**record, "points": [{"concurrency": "many", "input_len": 1, "output_len": 1,
                               "summary": {}}]}))
    subprocess.run(["git", "init", "-q", "--bare", str(folder / "emptyrepo.git")], check=True)
    (folder / "localrepo.yaml").write_text(
        f"target: spark\nvllm:\n  repo: {folder / 'emptyrepo.git'}\n  ref: v0.33.0\n")


def _tree(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*"))}


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """An empty folder to run in, holding the bad inputs, HOME, the XDG folders and the dead
    engine's socket path."""
    work = tmp_path / "work"
    work.mkdir()
    _inputs(work)
    monkeypatch.chdir(work)
    env = {"HOME": str(work / "home"), "XDG_CONFIG_HOME": str(work / "home" / ".config"),
           "XDG_CACHE_HOME": str(work / "home" / ".cache"), "NO_COLOR": "1",
           "DOCKER_HOST": f"unix://{tmp_path / 'nobody-listens.sock'}"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    for key in ("DOCKER_CONTEXT", "HF_HOME", "EDGEVLLM_LAYER_CACHE", "EDGEVLLM_CACHE"):
        monkeypatch.delenv(key, raising=False)
    return work


def _check(code: int, stderr: str, expected: int, needle: str, before: dict, work: Path) -> None:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert "Traceback" not in stderr, stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), f"not one error line: {stderr!r}"
    assert needle in lines[0], f"the line does not name {needle!r}: {lines[0]}"
    assert code == expected, f"exit {code}, expected {expected}: {lines[0]}"
    assert _tree(work) == before, f"files written: {set(_tree(work)) ^ set(before)}"


@pytest.mark.parametrize(("argv", "expected", "needle"), CASES,
                         ids=[" ".join(a)[:60] for a, _, _ in CASES])
def test_bad_input_in_process(argv, expected, needle, workdir, capsys, monkeypatch):
    before = _tree(workdir)
    code, err = run_cli(capsys, monkeypatch, *argv)
    _check(code, err, expected, needle, before, workdir)


def test_a_cmake_dep_folder_over_its_cap_is_one_line(workdir, capsys, monkeypatch):
    """The caps of a supplied folder are the builder's to set (EDGEVLLM_CMAKE_DEP_MAX_FILES);
    one past them is one line naming the cap."""
    monkeypatch.setenv("EDGEVLLM_CMAKE_DEP_MAX_FILES", "1")
    before = _tree(workdir)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        program().run(["edgevllm", "render", "--target", "thor", "--compile", "--cmake-dep",
                       "cutlass=twofiles"])
    assert isinstance(exc.value.code, int)
    _check(exc.value.code, capsys.readouterr().err, 2,
           "more than 1 files, the cap of a dependency folder (EDGEVLLM_CMAKE_DEP_MAX_FILES)",
           before, workdir)


@pytest.mark.parametrize("argv", [
    ["compose", "--recipe", RECIPE, "--out", "pipe"],
    ["verify", "--target", "thor", "--path", "adir", "--json", "pipe"],
], ids=["compose", "verify"])
def test_an_output_onto_a_device_pipe_or_socket_is_refused(argv, workdir, capsys):
    """``inv compose --out /dev/null`` run as root renamed a file onto /dev/null (issue 42):
    an output whose name holds a device, a pipe or a socket is refused in one line and the
    thing is left as it was (a pipe here: anyone may make one)."""
    os.mkfifo(workdir / "pipe")
    before = _tree(workdir)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        program().run(["edgevllm", *argv])
    assert isinstance(exc.value.code, int)
    _check(exc.value.code, capsys.readouterr().err, 2,
           "pipe: is a device, pipe or socket, not a file", before, workdir)
    assert stat.S_ISFIFO((workdir / "pipe").lstat().st_mode)


@pytest.mark.parametrize(("binary", "argv", "expected", "needle"), SUBPROCESS_CASES,
                         ids=[f"{b} {' '.join(a)}"[:60] for b, a, _, _ in SUBPROCESS_CASES])
def test_bad_input_in_a_process(binary, argv, expected, needle, workdir):
    found = shutil.which(binary, path=str(Path(sys.executable).parent))
    assert found, f"no '{binary}' beside {sys.executable}: pip install -e . in this venv"
    command = [found, "--search-root", str(REPO), *argv] if binary == "inv" else [found, *argv]
    before = _tree(workdir)
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ), cwd=workdir)
    _check(proc.returncode, proc.stderr, expected, needle, before, workdir)


def test_every_task_has_bad_inputs():
    """A new task gets its rows here: the table names every task the CLI has."""
    tasks = set(namespace().task_names)
    covered = {argv[0] for argv, _, _ in CASES}
    assert tasks - covered == set(), f"tasks without a bad-input case: {tasks - covered}"


@pytest.mark.parametrize("task", sorted(namespace().task_names))
def test_every_task_refuses_an_unknown_flag(task, workdir, capsys):
    before = _tree(workdir)
    with pytest.raises(SystemExit) as exc:
        program().run(["edgevllm", task, "--no-such-flag"])
    assert isinstance(exc.value.code, int), exc.value.code
    _check(exc.value.code, capsys.readouterr().err, 2, "'--no-such-flag'", before, workdir)


# A reader that leaves (``| head``): help, the task list and a task's own output end quietly.
CLOSED_PIPE_CASES = [("inv", ["--help", "build"]), ("edgevllm", ["--help", "build"]),
                     ("inv", ["build", "--help"]), ("inv", ["--list"]), ("edgevllm", ["--list"]),
                     ("inv", ["mods"]), ("edgevllm", ["targets"])]


@pytest.mark.parametrize(("binary", "argv"), CLOSED_PIPE_CASES,
                         ids=[f"{b} {' '.join(a)}" for b, a in CLOSED_PIPE_CASES])
def test_a_closed_pipe_ends_quietly(binary, argv, workdir):
    found = shutil.which(binary, path=str(Path(sys.executable).parent))
    assert found, f"no '{binary}' beside {sys.executable}: pip install -e . in this venv"
    command = [found, "--search-root", str(REPO), *argv] if binary == "inv" else [found, *argv]
    read, write = os.pipe()
    os.close(read)  # the reader has gone before the first byte: every write meets a closed pipe
    try:
        proc = subprocess.run(command, stdout=write, stderr=subprocess.PIPE, text=True,
                              timeout=120, env=dict(os.environ), cwd=workdir)
    finally:
        os.close(write)
    assert proc.stderr == "", proc.stderr
    assert proc.returncode == 1
