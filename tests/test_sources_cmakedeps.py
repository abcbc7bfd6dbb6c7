"""What vLLM 0.33.0's CMake would clone, fetched on the host by commit (no GitHub here).

The real sdist's CMake files are used with each GitHub URL replaced by a local repository served
by ``git daemon`` on 127.0.0.1 (real git transport) and each pinned SHA by the stand-in's commit;
tags (cutlass v4.7.1, triton v3.5.1) are created in the stand-ins. The proof that the build needs
no network: with the tree's own ``*_SRC_DIR`` overrides pointing at the exported folders, the
tree's CMake declares no clone at all.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from edgevllm.common.errors import LockError, RefNotFoundError, SourceError
from edgevllm.sources.cmakedeps import ENV_FILE, env_file_text, fetch_cmake_deps, preflight_supplied
from edgevllm.sources.depfolder import survey, take
from edgevllm.sources.plan import CMakeDep, evaluate_plan
from edgevllm.specs.lock import Lock
from support.gitfixtures import (  # noqa: F401
    add_submodule,
    git_cache,
    git_daemon,
    make_upstream_repo,
    vanish_unreachable,
)
from support.sdists import sdist_tree_cached

TAGGED = {"cutlass": "v4.7.1", "triton_kernels": "v3.5.1"}


def plan(tree: Path):
    return evaluate_plan(tree, "12.1a", cuda_version="13.0.2", device_arch="12.1a")


@pytest.fixture(scope="module")
def real_tree() -> Path:
    if shutil.which("cmake") is None:
        pytest.fail("cmake is missing: install cmake >= 3.25 (apt-get install cmake)")
    return sdist_tree_cached("vllm", "0.33.0", ["CMakeLists.txt", "cmake/"])


def _stand_in(root: Path, name: str, files: dict[str, str]):
    folder = root / "src" / name
    folder.mkdir(parents=True)
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    return make_upstream_repo(root / "repos", folder, name=f"{name}.git")


@pytest.fixture()
def offline_world(real_tree, tmp_path):
    """(tree, {dep: upstream}, base URL): the tree's clones point at local stand-ins."""
    tree = tmp_path / "vllm"
    shutil.copytree(real_tree, tree)
    deps = plan(tree).deps
    cutlass = _stand_in(tmp_path, "cutlass", {"include/cutlass/cutlass.h": "// stand-in\n"})
    upstreams = {"cutlass": cutlass}
    for dep in deps:
        if dep.name != "cutlass":  # triton's override names a folder inside the clone
            inside = {f"{dep.override_subdir}/__init__.py": ""} if dep.override_subdir else {}
            upstreams[dep.name] = _stand_in(tmp_path, dep.name,
                                            {"README": f"{dep.name}\n", **inside})
    # As upstream FA has (its .gitmodules names a remote: here beside it on the git daemon).
    add_submodule(upstreams["vllm-flash-attn"], "csrc/cutlass", cutlass, url="../cutlass.git")
    for name, tag in TAGGED.items():
        upstreams[name].git("update-ref", f"refs/tags/{tag}", upstreams[name].git("rev-parse",
                                                                                  "main"))
    with git_daemon(tmp_path / "repos") as base:
        _point_tree_at(tree, deps, upstreams, base)
        yield tree, upstreams, base


def _point_tree_at(tree: Path, deps: list[CMakeDep], upstreams: dict, base: str) -> None:
    files = [tree / "CMakeLists.txt", *sorted((tree / "cmake").rglob("*.cmake"))]
    for path in files:
        text = path.read_text()
        for dep in deps:
            text = text.replace(dep.repo, f"{base}/{dep.name}.git")
            if re.fullmatch(r"[0-9a-f]{40}", dep.tag):
                text = text.replace(dep.tag, upstreams[dep.name].git("rev-parse", "main"))
        path.write_text(text)


def test_every_clone_fetched_exported_recorded_then_cloned_no_more(  # noqa: F811
        offline_world, git_cache, tmp_path, monkeypatch):
    tree, upstreams, base = offline_world
    deps = plan(tree).deps
    assert len(deps) == 10 and all(d.repo.startswith(base) for d in deps)
    records = fetch_cmake_deps(deps, tmp_path / "deps")
    assert set(records) == set(upstreams)
    for name, record in records.items():
        assert record.commit == upstreams[name].git("rev-parse", "main")
        assert record.tree == upstreams[name].git("rev-parse", "main^{tree}")
        assert (tmp_path / "deps" / name).is_dir()
    assert records["cutlass"].ref == "v4.7.1"
    assert records["cutlass"].env_var == "VLLM_CUTLASS_SRC_DIR"
    assert records["vllm-flash-attn"].submodules == {"csrc/cutlass": records["cutlass"].commit}
    fa = tmp_path / "deps" / "vllm-flash-attn"
    assert (fa / "csrc" / "cutlass" / "include" / "cutlass" / "cutlass.h").is_file()
    env = (tmp_path / "deps" / ENV_FILE).read_text()
    assert "export VLLM_CUTLASS_SRC_DIR=/src/deps/cutlass\n" in env
    assert "export FLASH_MLA_SRC_DIR=/src/deps/flashmla\n" in env
    # vLLM's triton_kernels.cmake: its override is triton's python package folder, not the clone
    assert ("export TRITON_KERNELS_SRC_DIR=/src/deps/triton_kernels/python/triton_kernels/"
            "triton_kernels\n") in env
    assert env == env_file_text(records, {"triton_kernels": "python/triton_kernels/triton_kernels"})
    # What the build does with them: the tree's own CMake takes every *_SRC_DIR branch.
    for name, record in records.items():
        monkeypatch.setenv(record.env_var, str(tmp_path / "deps" / name))
    assert plan(tree).deps == []  # the tree's own CMake takes every *_SRC_DIR branch


def test_lock_rebuilds_by_commit_even_when_the_tag_moved(offline_world, git_cache, tmp_path):  # noqa: F811
    tree, upstreams, _ = offline_world
    deps = plan(tree).deps
    first = fetch_cmake_deps(deps, tmp_path / "first")
    cutlass = upstreams["cutlass"]
    from support.gitfixtures import commit_to_branch
    moved = commit_to_branch(cutlass, "main", {"include/cutlass/new.h": "// moved\n"}, "move tag")
    cutlass.git("update-ref", "refs/tags/v4.7.1", moved)
    again = fetch_cmake_deps(deps, tmp_path / "again", locked=first)
    assert again == first
    fresh = fetch_cmake_deps(deps, tmp_path / "fresh", cache_root=tmp_path / "other-cache")
    assert fresh["cutlass"].commit == moved  # without the lock the tag's new commit is taken
    edited = dict(first)  # an edited lock: its tree hash is not what the commit has
    edited["qutlass"] = edited["qutlass"].model_copy(update={"tree": "0" * 40})
    with pytest.raises(LockError, match=r"CMake dependency qutlass: tree .* differs from the lock"):
        fetch_cmake_deps(deps, tmp_path / "edited", locked=edited)


def test_a_lock_commit_that_vanished_is_one_line(offline_world, git_cache, tmp_path):  # noqa: F811
    tree, upstreams, _ = offline_world
    deps = plan(tree).deps
    locked = fetch_cmake_deps(deps, tmp_path / "first", cache_root=tmp_path / "cache-a")
    flashmla = upstreams["flashmla"]
    from support.gitfixtures import commit
    rewritten = commit(flashmla, [], {"README": "rewritten\n"}, "force-push")
    flashmla.git("update-ref", "refs/heads/main", rewritten)
    flashmla.git("update-ref", "-d", "refs/tags/v0.1.0")
    vanish_unreachable(flashmla)
    with pytest.raises(LockError) as info:
        fetch_cmake_deps(deps, tmp_path / "second", locked=locked,
                         cache_root=tmp_path / "cache-b")
    message = str(info.value)
    assert message.startswith("CMake dependency flashmla (cmake/external_projects/flashmla.cmake:")
    assert "no longer exists in" in message and "flashmla.git" in message and "\n" not in message
    assert not (tmp_path / "second").exists()  # nothing under the final name


def test_a_pinned_ref_that_cannot_be_fetched_names_the_repository(offline_world, git_cache,  # noqa: F811
                                                                  tmp_path):
    tree, _, base = offline_world
    path = tree / "cmake" / "external_projects" / "deepselect.cmake"
    text = path.read_text()
    path.write_text(re.sub(r"GIT_TAG [0-9a-f]{40}", "GIT_TAG " + "ab" * 20, text))
    with pytest.raises(RefNotFoundError) as info:
        fetch_cmake_deps(plan(tree).deps, tmp_path / "deps")
    message = str(info.value)
    assert message.startswith("CMake dependency deepselect (cmake/external_projects/deepselect")
    assert "deepselect.git" in message and "\n" not in message
    # An unreachable host is one line too, naming the repository.
    unreachable = CMakeDep(name="x", repo="git://127.0.0.1:9/x.git", tag="v1", file="f",
                           line=1, env_var="X_SRC_DIR")
    with pytest.raises(SourceError, match=r"CMake dependency x \(f:1\): .*127.0.0.1:9/x"):
        fetch_cmake_deps([unreachable], tmp_path / "deps2")


def test_a_clone_without_an_override_cannot_be_offline(tmp_path):
    dep = CMakeDep(name="newdep", repo="https://example.invalid/new.git", tag="v1",
                   file="cmake/external_projects/new.cmake", line=7, env_var=None)
    with pytest.raises(SourceError, match=r"newdep \(cmake/external_projects/new.cmake:7\) has no "
                                          r"\*_SRC_DIR override"):
        fetch_cmake_deps([dep], tmp_path / "deps")


# --- names and repositories from the tree (common/foreign.py) ------------------------------------
HOSTILE_DEPS = [
    ("../../x", "https://example.invalid/x.git", "v1", "is not a plain name"),
    ("/abs", "https://example.invalid/x.git", "v1", "is not a plain name"),
    ("..", "https://example.invalid/x.git", "v1", "is not a plain name"),
    ("x", "file:///root/private.git", "v1", "is not a remote URL"),
    ("x", "/home/me/private", "v1", "is not a remote URL"),
    ("x", "../sibling", "v1", "is not a remote URL"),
    ("x", "ext::sh -c touch% /tmp/owned", "v1", "is not a remote URL"),
    ("x", "https://example.invalid/x.git", "--upload-pack=touch /tmp/owned", "GIT_TAG"),
]


@pytest.mark.parametrize("name,repo,tag,words", HOSTILE_DEPS)
def test_a_hostile_dependency_is_one_line_before_anything_is_fetched_or_written(
        name, repo, tag, words, git_cache, tmp_path):  # noqa: F811
    dep = CMakeDep(name=name, repo=repo, tag=tag, file="cmake/x.cmake", line=3,
                   env_var="X_SRC_DIR")
    dest = tmp_path / "build" / "deps"
    dest.parent.mkdir()
    with pytest.raises(SourceError, match=re.escape(words)) as info:
        fetch_cmake_deps([dep], dest)
    assert "\n" not in str(info.value) and "cmake/x.cmake:3" in str(info.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["build"]
    assert list((tmp_path / "build").iterdir()) == [] and not git_cache.exists()


def test_a_tree_declaring_a_dependency_named_like_a_path_is_refused(tmp_path, git_cache):  # noqa: F811
    tree = tmp_path / "tree"
    (tree / "cmake").mkdir(parents=True)
    (tree / "CMakeLists.txt").write_text(
        'cmake_minimum_required(VERSION 3.26)\ninclude(FetchContent)\n'
        'if(DEFINED ENV{X_SRC_DIR})\nendif()\n'
        'FetchContent_Declare(../../escaped GIT_REPOSITORY https://example.invalid/x.git '
        'GIT_TAG v1)\n')
    deps = plan(tree).deps
    assert [d.name for d in deps] == ["../../escaped"]
    with pytest.raises(SourceError, match=r"\(CMakeLists.txt:5\) name: '../../escaped' is not a "
                                          "plain name"):
        fetch_cmake_deps(deps, tmp_path / "out" / "deps")
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "out").exists()


def test_a_remote_dependency_names_no_submodule_on_the_host(git_cache, tmp_path):  # noqa: F811
    private = make_upstream_repo(tmp_path / "host", name="private.git")
    served = _stand_in(tmp_path, "dep", {"README": "dep\n"})
    for url in (private.url, f"file://{private.url}"):
        add_submodule(served, "vendored", private, url=url)
        with git_daemon(tmp_path / "repos") as base:
            dep = CMakeDep(name="dep", repo=f"{base}/dep.git", tag="main", file="f", line=1,
                           env_var="DEP_SRC_DIR")
            with pytest.raises(SourceError, match="submodule vendored: repository .* is not a "
                                                  "remote URL") as info:
                fetch_cmake_deps([dep], tmp_path / "deps")
        assert "\n" not in str(info.value) and not (tmp_path / "deps").exists()


# --- folders the user supplies (--cmake-dep NAME=FOLDER, sources/depfolder.py) -------------------
def _exported(source: Path, dest: Path) -> dict[str, Path]:
    """Each dependency's folder as a user would hand it over: a plain copy of an export."""
    shutil.copytree(source, dest, symlinks=True)
    (dest / ENV_FILE).unlink()
    return {p.name: p for p in sorted(dest.iterdir())}


def test_supplied_folders_with_the_locks_trees_rebuild_the_same_lock_fetching_nothing(  # noqa: F811
        offline_world, git_cache, tmp_path):
    tree, upstreams, _ = offline_world
    deps = plan(tree).deps
    first = fetch_cmake_deps(deps, tmp_path / "first")
    fa = first["vllm-flash-attn"]
    assert fa.submodule_trees == {"csrc/cutlass": first["cutlass"].tree}  # each one's own tree
    folders = _exported(tmp_path / "first", tmp_path / "user")
    never = tmp_path / "no-git-cache"
    supplied = {name: survey(name, path) for name, path in folders.items()}
    again = fetch_cmake_deps(deps, tmp_path / "again", locked=first, cache_root=never,
                             supplied=supplied)
    assert again == first and not never.exists()  # the lock's records, nothing fetched
    env = (tmp_path / "first" / ENV_FILE).read_text()
    assert (tmp_path / "again" / ENV_FILE).read_text() == env
    assert (tmp_path / "again" / "vllm-flash-attn" / "csrc" / "cutlass" / "include" / "cutlass"
            / "cutlass.h").is_file()


def test_a_supplied_folder_that_is_not_the_locks_is_one_line_naming_both_trees(  # noqa: F811
        offline_world, git_cache, tmp_path):
    tree, _, _ = offline_world
    deps = plan(tree).deps
    first = fetch_cmake_deps(deps, tmp_path / "first")
    folders = _exported(tmp_path / "first", tmp_path / "user")
    (folders["qutlass"] / "README").write_text("changed\n")
    with pytest.raises(LockError) as info:
        fetch_cmake_deps(deps, tmp_path / "again", locked=first,
                         supplied={"qutlass": survey("qutlass", folders["qutlass"])})
    message = str(info.value)
    assert message.startswith(f"--cmake-dep qutlass={folders['qutlass']}: tree ")
    assert first["qutlass"].tree in message and "not the lock's" in message
    assert "supply exactly that commit's files" in message and "\n" not in message
    assert not (tmp_path / "again").exists()


def test_a_supplied_folders_submodule_is_proven_by_its_own_tree(  # noqa: F811
        offline_world, git_cache, tmp_path, capsys):
    tree, _, _ = offline_world
    deps = plan(tree).deps
    first = fetch_cmake_deps(deps, tmp_path / "first")
    folders = _exported(tmp_path / "first", tmp_path / "user")
    fa = folders["vllm-flash-attn"]
    header = fa / "csrc" / "cutlass" / "include" / "cutlass" / "cutlass.h"
    header.write_text("// not CUTLASS\n")
    only_fa = {"vllm-flash-attn": survey("vllm-flash-attn", fa)}
    with pytest.raises(LockError, match=r"submodule csrc/cutlass has tree [0-9a-f]{40}, not the "
                                        rf"lock's {first['cutlass'].tree}"):
        fetch_cmake_deps(deps, tmp_path / "a", locked=first, supplied=only_fa)
    # A lock from before submodule trees: the top-level tree (the submodule a gitlink) holds,
    # and preflight says the submodule's content is not proven.
    old = {**first, "vllm-flash-attn": first["vllm-flash-attn"].model_copy(
        update={"submodule_trees": {}})}
    again = fetch_cmake_deps(deps, tmp_path / "b", locked=old, supplied=only_fa)
    assert again["vllm-flash-attn"] == old["vllm-flash-attn"]
    assert ("cmake dep vllm-flash-attn: the content of submodule(s) csrc/cutlass is not proven"
            in " ".join(capsys.readouterr().err.split()))
    shutil.rmtree(fa / "csrc" / "cutlass")
    with pytest.raises(LockError, match="submodule csrc/cutlass of .* is missing"):
        fetch_cmake_deps(deps, tmp_path / "c", locked=old,
                         supplied={"vllm-flash-attn": survey("vllm-flash-attn", fa)})


def test_without_a_lock_a_supplied_folder_is_recorded_as_a_stand_in(  # noqa: F811
        offline_world, git_cache, tmp_path):
    from edgevllm.sources.gittree import tree_hash

    tree, _, _ = offline_world
    deps = plan(tree).deps
    stand_in = tmp_path / "my-cutlass"
    (stand_in / "include" / "cutlass").mkdir(parents=True)
    (stand_in / "include" / "cutlass" / "cutlass.h").write_text("// a mirror's CUTLASS\n")
    supplied = {"cutlass": survey("cutlass", stand_in)}
    records = fetch_cmake_deps(deps, tmp_path / "deps", supplied=supplied)
    cutlass = records["cutlass"]
    assert cutlass.supplied and cutlass.commit is None and cutlass.ref == "v4.7.1"
    assert cutlass.tree == tree_hash(take(supplied["cutlass"], tmp_path / "copy"))
    assert not records["qutlass"].supplied and records["qutlass"].commit  # the rest fetched
    # Its lock rebuilds only with that very folder.
    with pytest.raises(LockError, match="the lock records a supplied folder .* give --cmake-dep "
                                        "cutlass=FOLDER"):
        fetch_cmake_deps(deps, tmp_path / "a", locked=records)
    assert fetch_cmake_deps(deps, tmp_path / "b", locked=records, supplied=supplied) == records
    (stand_in / "include" / "cutlass" / "cutlass.h").write_text("// another\n")
    with pytest.raises(LockError, match="the folder supplied when the lock was made"):
        fetch_cmake_deps(deps, tmp_path / "c", locked=records,
                         supplied={"cutlass": survey("cutlass", stand_in)})


def test_a_supplied_name_the_tree_does_not_declare_is_one_line(tmp_path):
    from edgevllm.common.errors import ConfigError

    (tmp_path / "f").mkdir()
    (tmp_path / "f" / "a").write_text("a\n")
    dep = CMakeDep(name="cutlass", repo="https://example.invalid/c.git", tag="v1", file="f",
                   line=1, env_var="C_SRC_DIR")
    with pytest.raises(ConfigError, match=r"--cmake-dep cutlas: the tree's CMake declares no "
                                          r"dependency 'cutlas' \(it declares: cutlass\)"):
        fetch_cmake_deps([dep], tmp_path / "deps", supplied={"cutlas": survey("cutlas",
                                                                                tmp_path / "f")})
    assert not (tmp_path / "deps").exists()


def _lock_with(records: dict) -> Lock:
    return Lock(target="spark", mode="compile", kernel_plan={"cuda_archs": ["12.1a"]},
                cmake_deps=records)


def test_preflight_checks_names_against_a_compile_lock_and_says_what_is_proven(tmp_path, capsys):
    from edgevllm.common.errors import ConfigError
    from edgevllm.specs.lock import CMakeDepLock

    (tmp_path / "f").mkdir()
    (tmp_path / "f" / "a").write_text("a\n")
    fetched = CMakeDepLock(repo="https://example.invalid/c.git", ref="v1", commit="a" * 40,
                           tree="b" * 40, env_var="C_SRC_DIR")
    stand_in = CMakeDepLock(repo="https://example.invalid/d.git", ref="v2", tree="c" * 40,
                            env_var="D_SRC_DIR", supplied=True)
    given = {"cutlass": str(tmp_path / "f"), "deepgemm": str(tmp_path / "f")}
    found = preflight_supplied(given, _lock_with({"cutlass": fetched, "deepgemm": stand_in}))
    assert set(found) == {"cutlass", "deepgemm"}
    err = " ".join(capsys.readouterr().err.split())
    assert "cmake dep cutlass: " in err and "checked against the lock's tree bbbbbbbbbbbb" in err
    with pytest.raises(ConfigError, match="declares no dependency 'nosuch'"):
        preflight_supplied({"nosuch": str(tmp_path / "f")}, _lock_with({"cutlass": fetched}))
    with pytest.raises(LockError, match="give --cmake-dep deepgemm=FOLDER"):
        preflight_supplied({}, _lock_with({"deepgemm": stand_in}))
    preflight_supplied({"cutlass": str(tmp_path / "f")}, None)
    err = " ".join(capsys.readouterr().err.split())
    assert err.startswith("warning: cmake dep cutlass: ") and "unproven (no --lock)" in err


def test_a_source_without_the_folder_the_override_names_is_refused(  # noqa: F811
        offline_world, git_cache, tmp_path):
    """triton's override stands for python/triton_kernels/triton_kernels of the clone: a source
    without it (here a supplied folder of triton's root files alone) would ship the wrong tree as
    vLLM's triton_kernels package; one line, nothing left."""
    tree, _, _ = offline_world
    deps = plan(tree).deps
    [triton] = [d for d in deps if d.name == "triton_kernels"]
    assert triton.override_subdir == "python/triton_kernels/triton_kernels"
    folder = tmp_path / "triton-root-only"
    folder.mkdir()
    (folder / "README.md").write_text("triton\n")
    with pytest.raises(SourceError, match=r"triton_kernels .*TRITON_KERNELS_SRC_DIR names the "
                                          r"clone's python/triton_kernels/triton_kernels/"):
        fetch_cmake_deps(deps, tmp_path / "deps",
                         supplied={"triton_kernels": survey("triton_kernels", folder)})
    assert not (tmp_path / "deps").exists()
