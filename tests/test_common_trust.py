"""Whose caches edgevllm believes (edgevllm/common/trust.py), with real files and folders: a
record, or a folder from the cache's root down to it, that another user owns or that group or
others can write, or a symlinked record, is ignored with one warning line, and the work is done
again: the verify cache (the verdict differs from the planted one), the probe's fact cache, the
publish layer cache and a build's compiled wheels. Folders edgevllm makes are 0700 and its
records lose their group and other write bits whatever the umask; a shared cache is opt-in.

The suite runs as root: "another owner" is ``os.chown`` to 65534 (nobody)."""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from pathlib import Path

import pytest

from edgevllm.common import trust
from edgevllm.common.trust import private_dir, seal, trusted_path, untrusted_because
from support.cuda_libs import nvcc_libs

NOBODY = 65534


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(trust, "_warned", set())
    monkeypatch.delenv(trust.SHARED_SETTING, raising=False)


def _needs_root() -> None:
    if os.geteuid() != 0:
        raise AssertionError("these tests chown files to another user: run them as root (the "
                             "suite's container does)")


def _own_tree(tmp_path: Path) -> tuple[Path, Path]:
    root = private_dir(tmp_path / "cache")
    record = private_dir(root / "key") / "a.rec"
    record.write_bytes(b"x")
    seal(record)
    return root, record


# --- the rule --------------------------------------------------------------------------------
def test_the_rule_is_ssh_s_owner_write_bits_and_no_links(tmp_path, capsys):
    _needs_root()
    root, record = _own_tree(tmp_path)
    assert untrusted_because(record, root) is None
    assert untrusted_because(root / "key" / "not-yet.rec", root) is None  # a miss, not a threat
    for where, bits in ((root, 0o020), (root, 0o002), (root / "key", 0o002), (record, 0o020)):
        mode = where.stat().st_mode
        where.chmod(mode | bits)
        assert "writable by" in str(untrusted_because(record, root)), (where, bits)
        where.chmod(mode)
    for where in (root, root / "key", record):
        os.chown(where, NOBODY, -1)
        assert f"owned by uid {NOBODY}" in str(untrusted_because(record, root)), where
        os.chown(where, os.geteuid(), -1)
    link = root / "key" / "b.rec"
    link.symlink_to(record)
    assert "symbolic link" in str(untrusted_because(link, root))
    assert "outside the cache" in str(untrusted_because(tmp_path / "x", root))
    root.chmod(0o777)
    capsys.readouterr()
    assert not trusted_path(record, root, "verify cache")
    assert not trusted_path(link, root, "verify cache")
    warned = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(warned) == 1 and "writable by others" in warned[0], warned  # once per root


def test_a_record_that_is_no_file_is_not_believed_and_never_opened(tmp_path, capsys):
    """A FIFO (or a device) where a cache record goes: opening it would hang the build on
    whoever never writes to it; every cache asks this rule before it opens a record."""
    root, record = _own_tree(tmp_path)
    fifo = record.with_name("b.rec")
    os.mkfifo(fifo, 0o600)
    assert untrusted_because(fifo, root) == f"{fifo} is neither a file nor a folder"
    assert not trusted_path(fifo, root, "verify cache")
    assert "neither a file nor a folder" in capsys.readouterr().err
    assert untrusted_because(record, root) is None  # a file and a folder are as they were


@pytest.mark.timeout(30)  # without the rule, the read hangs on the FIFO
def test_a_clamp_cache_entry_that_is_a_fifo_is_a_miss_not_a_hang(tmp_path):
    from edgevllm.image.clamp import Moment
    from edgevllm.image.clampmemo import ClampMemo, memo_key

    memo = ClampMemo(private_dir(tmp_path / "clamp"), memo_key(Moment(1, 1)),
                     memo_key(Moment(1, 1), Moment(2, 1)))
    digest = "sha256:" + "b" * 64
    memo.put("layer", "sha256:" + "a" * 64, digest)
    os.mkfifo(memo._path("layer", digest), 0o600)
    os.mkfifo(memo._path("layer", digest).with_name(f"config-{'b' * 64}"), 0o600)
    assert memo.get("layer", digest) is None and memo.get_config(digest) is None
    assert memo.get("layer", "sha256:" + "a" * 64) == digest


def test_folders_edgevllm_makes_are_0700_and_records_sealed_whatever_the_umask(tmp_path,
                                                                              monkeypatch):
    before = os.umask(0o002)
    try:
        made = private_dir(tmp_path / "a" / "b" / "c")
        record = made / "r"
        record.write_bytes(b"x")  # 0664 under umask 002
        assert record.stat().st_mode & 0o020
        seal(record)
        monkeypatch.setenv("EDGEVLLM_CACHE", str(tmp_path / "home-cache"))
        from edgevllm.common.paths import cache_dir

        cached = cache_dir("verify")
    finally:
        os.umask(before)
    for folder in (tmp_path / "a", tmp_path / "a" / "b", made, tmp_path / "home-cache", cached):
        assert folder.stat().st_mode & 0o777 == 0o700, folder
    assert record.stat().st_mode & 0o777 == 0o644
    assert untrusted_because(record, tmp_path / "a") is None


def test_a_shared_cache_is_opt_in_and_names_its_group(tmp_path, monkeypatch):
    import grp

    _needs_root()
    root, record = _own_tree(tmp_path)
    group = grp.getgrgid(0).gr_name
    os.chown(record, -1, 0)
    record.chmod(0o664)
    assert "writable by its group" in str(untrusted_because(record, root))
    monkeypatch.setenv(trust.SHARED_SETTING, group)
    assert untrusted_because(record, root) is None
    record.chmod(0o666)  # others: never
    assert "writable by others" in str(untrusted_because(record, root))
    monkeypatch.setenv(trust.SHARED_SETTING, "no-such-group-here")
    record.chmod(0o664)
    assert "writable by its group" in str(untrusted_because(record, root))


# --- each cache ------------------------------------------------------------------------------
def _wheel(path: Path, library: Path) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.write(library, "vllm/_C.abi3.so")
    return path


def test_a_planted_verdict_record_in_a_folder_others_write_is_ignored(tmp_path, monkeypatch,
                                                                      capsys):
    """The library a planted record hides is judged: sm_110 code fails Spark, whatever the
    record (made from an sm_121a library, under the sm_110 wheel's sha256) says."""
    _needs_root()
    from edgevllm.specs.targets import resolve_cuda_target
    from edgevllm.verify import api
    from edgevllm.verify.api import TargetInspect
    from edgevllm.verify.archive import Layer
    from edgevllm.verify.verdictcache import VerdictCache

    libs = nvcc_libs()
    hostile = _wheel(tmp_path / "vllm-1.0-cp38-abi3-linux_aarch64.whl", libs["sm_110"])
    good = _wheel(tmp_path / "good.whl", libs["sm_121a"])
    root = tmp_path / "verify-cache"
    monkeypatch.setenv("EDGEVLLM_VERIFY_CACHE", str(root))
    arch = resolve_cuda_target("spark")[1]
    cache = VerdictCache.for_target(str(arch))
    assert cache is not None
    reports = api.scan_wheel(good, TargetInspect(arch))
    name = "sha256:" + hashlib.sha256(hostile.read_bytes()).hexdigest()
    assert cache.put(name, Layer(kept={r.path: r for r in reports}))
    record = cache._path(name)
    assert api.verify("spark", path=hostile).passed  # the planted record, believed: the attack
    for plant, undo in ((lambda: root.chmod(0o777), lambda: root.chmod(0o700)),
                        (lambda: cache.folder.chmod(0o770), lambda: cache.folder.chmod(0o700)),
                        (lambda: os.chown(record, NOBODY, -1),
                         lambda: os.chown(record, 0, -1))):
        plant()
        monkeypatch.setattr(trust, "_warned", set())
        capsys.readouterr()
        assert not api.verify("spark", path=hostile).passed  # the library itself is judged
        assert "not used" in capsys.readouterr().err
        undo()
    moved = record.with_name("elsewhere")
    record.rename(moved)
    record.symlink_to(moved)
    assert not api.verify("spark", path=hostile).passed


def test_a_planted_probe_record_in_a_folder_others_write_is_ignored(tmp_path):
    _needs_root()
    from edgevllm.probe.factcache import FactCache

    root = tmp_path / "probe"
    cache = FactCache(root, 1 << 20)
    key = "ab" * 32
    facts = {"imports": {"vllm": {"ok": True}}}
    assert cache.put(key, facts) and cache.get(key) == facts
    assert root.stat().st_mode & 0o777 == 0o700
    root.chmod(0o777)
    assert cache.get(key) is None
    assert not cache.put("cd" * 32, facts) and not (root / f"{'cd' * 32}.facts").exists()
    root.chmod(0o700)
    os.chown(root / f"{key}.facts", NOBODY, -1)
    assert cache.get(key) is None


def test_a_planted_layer_cache_entry_in_a_folder_others_write_is_ignored(tmp_path):
    """A consistent entry (record and blob agree) is still others' when they wrote it: it
    would publish their bytes under the layer's diff id."""
    _needs_root()
    from edgevllm.image.layercache import LayerCache, ZstdSettings

    cache = LayerCache(tmp_path / "layers", ZstdSettings(level=1, window_log=0, threads=0))
    data = b"a layer" * 100
    diff_id = "sha256:" + hashlib.sha256(data).hexdigest()
    with cache.entry_writer(diff_id, len(data)) as entry:
        entry.write(ZstdSettings(level=1, window_log=0).compressor().compress(data))
        entry.finish(hashlib.sha256(data).hexdigest())
    assert cache.get(diff_id) is not None
    record = cache.layers_dir / f"{diff_id[7:]}.json"
    assert record.stat().st_mode & 0o022 == 0
    cache.layers_dir.chmod(0o777)
    assert cache.get(diff_id) is None
    other = b"another layer"
    other_id = "sha256:" + hashlib.sha256(other).hexdigest()
    with cache.entry_writer(other_id, len(other)) as entry:  # nothing written into it
        entry.write(b"frames")
        entry.finish(hashlib.sha256(other).hexdigest())
    assert sorted(p.name for p in cache.layers_dir.iterdir()) == \
        sorted([record.name, record.with_suffix(".zst").name])
    cache.layers_dir.chmod(0o700)
    os.chown(record.with_suffix(".zst"), NOBODY, -1)
    assert cache.get(diff_id) is None
    os.chown(record.with_suffix(".zst"), 0, -1)
    assert cache.get(diff_id) is not None
    config = json.dumps({"rootfs": {}}).encode()
    image_id = "sha256:" + hashlib.sha256(config).hexdigest()
    cache.put_config(image_id, config)
    assert cache.config(image_id) == config
    (tmp_path / "layers").chmod(0o757)
    assert cache.config(image_id) is None and cache.get(diff_id) is None


def test_compiled_wheels_in_a_folder_others_write_do_not_stand_for_a_compile(tmp_path):
    _needs_root()
    from edgevllm.builder.runner import own_wheels

    root = private_dir(tmp_path / "out" / "spark")
    folder = private_dir(root / "wheels" / "0123456789abcdef")
    wheel = folder / "vllm-1.0-cp38-abi3-linux_aarch64.whl"
    wheel.write_bytes(b"PK")
    seal(wheel)
    assert own_wheels(folder, root)
    (root / "wheels").chmod(0o777)
    assert not own_wheels(folder, root)
    (root / "wheels").chmod(0o700)
    os.chown(wheel, NOBODY, -1)
    assert not own_wheels(folder, root)
    os.chown(wheel, 0, -1)
    (folder / "other-1.0-py3-none-any.whl").symlink_to(wheel)
    assert not own_wheels(folder, root)


# --- one owner -------------------------------------------------------------------------------
PACKAGE = Path(__file__).resolve().parents[1] / "edgevllm"
# Each cache whose records can change a verdict or skip a check, and what it reads by.
CACHES = {"verify/verdictcache.py": "VerdictCache", "probe/factcache.py": "FactCache",
          "image/layercache.py": "LayerCache", "builder/runner.py": "own_wheels"}


def test_every_cache_that_decides_asks_the_one_rule():
    """The caches that stand for a check ask ``trusted_path``; no other module reads owners or
    write bits itself (a second copy of the rule would drift from this one)."""
    import ast

    for rel, reader in CACHES.items():
        tree = ast.parse((PACKAGE / rel).read_text())
        assert reader in {n.name for n in ast.walk(tree)
                          if isinstance(n, (ast.ClassDef, ast.FunctionDef))}, rel
        assert any(isinstance(n, ast.Name) and n.id == "trusted_path" for n in ast.walk(tree)), \
            f"{rel} reads its records without common/trust.trusted_path"
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "common" / "trust.py":
            continue
        names = {n.attr for n in ast.walk(ast.parse(path.read_text()))
                 if isinstance(n, ast.Attribute)}
        assert not names & {"st_uid", "S_IWOTH", "S_IWGRP"}, \
            f"{path}: whose files to believe is common/trust.py's rule"
