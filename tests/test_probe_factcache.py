"""The probe cache (edgevllm/probe/factcache.py): probe level 1's facts remembered by what the
check script exercised. The key moves with every layer (and their order), with what ``docker
run`` gives the container, the engine, its emulator, the script and its arguments; the same
inputs give the same key; an image without diff ids has none. Facts read back exactly; facts
where a check timed out or was killed are not kept; a damaged record is a miss; the cache keeps
to its ceiling, least recently used first, and removes only what it wrote."""

from __future__ import annotations

import copy
import os

import pytest

from edgevllm.common.errors import ConfigError
from edgevllm.probe import factcache
from edgevllm.probe.factcache import FactCache, decode, fact_key

LAYERS = ["sha256:" + c * 64 for c in "abc"]
INSPECTED: dict = {"RootFS": {"Layers": LAYERS}, "Os": "linux", "Architecture": "arm64",
             "Variant": "v8", "Config": {"Env": ["PATH=/usr/bin", "A=1"], "User": "",
                                         "WorkingDir": "/"}}
FACTS = {"imports": {"vllm": {"ok": True, "version": "0.33.0"}}, "env": {"A": "1"}}


def key(inspected=INSPECTED, engine="default", script=b"script", arguments=("-",), emulator=""):
    return fact_key(inspected, engine, script, list(arguments), emulator)


def changed(path: str, value):
    inspected = copy.deepcopy(INSPECTED)
    *parents, last = path.split(".")
    node: dict = inspected
    for part in parents:
        node = node[part]
    node[last] = value
    return inspected


def test_the_key_moves_with_every_layer_the_config_the_engine_and_the_script():
    base = key()
    assert base == key(copy.deepcopy(INSPECTED)) and len(base) == 64
    others = [
        key(changed("RootFS.Layers", [*LAYERS[:2], "sha256:" + "d" * 64])),  # a mod changed
        key(changed("RootFS.Layers", list(reversed(LAYERS)))),
        key(changed("RootFS.Layers", LAYERS[:2])),
        key(changed("Config.Env", ["PATH=/usr/bin", "A=2"])),
        key(changed("Config.User", "nobody")),
        key(changed("Config.WorkingDir", "/opt")),
        key(changed("Architecture", "amd64")),
        key(changed("Variant", "")),
        key(engine="ssh://builder"),
        key(emulator="(10, 0)"),
        key(script=b"another script"),
        key(arguments=("-", "--component", "torch")),
    ]
    assert base not in others and len(set(others)) == len(others)
    # Labels and the image id are not what the script exercises: a re-label keeps the key.
    relabelled = changed("Config.Labels", {"io.edgevllm.verify": "{}"})
    relabelled["Id"] = "sha256:" + "e" * 64
    assert key(relabelled) == base
    assert key(changed("RootFS.Layers", None)) is None and key(changed("RootFS", {})) is None
    assert key(changed("RootFS.Layers", ["not a diff id"])) is None


def test_facts_read_back_and_a_lost_check_is_not_kept(tmp_path):
    cache = FactCache(tmp_path, 1 << 20)
    assert cache.get(key()) is None
    assert cache.put(key(), FACTS) and cache.get(key()) == FACTS
    for lost in ("timed out after 600s", "killed by SIGKILL"):
        facts = {"imports": {"vllm": {"ok": False, "error": f"import vllm: {lost}"}}}
        assert not cache.put(key(arguments=(lost,)), facts)
        assert cache.get(key(arguments=(lost,))) is None


@pytest.mark.parametrize("damage", ["flip", "other key", "not an object", "no header", "huge"])
def test_a_damaged_record_is_a_miss(tmp_path, damage, monkeypatch):
    cache = FactCache(tmp_path, 1 << 20)
    assert cache.put(key(), FACTS)
    path = tmp_path / f"{key()}.facts"
    data = path.read_bytes()
    if damage == "flip":
        data = data[:-3] + bytes([data[-3] ^ 1]) + data[-2:]
    elif damage == "other key":
        data = data.replace(key().encode(), key(script=b"x").encode())
    elif damage == "not an object":
        import hashlib
        import json

        body = b"[1, 2]"
        data = json.dumps({"format": factcache.FORMAT, "key": key(),
                           "sha256": hashlib.sha256(body).hexdigest()}).encode() + b"\n" + body
    elif damage == "no header":
        data = data.partition(b"\n")[2]
    else:
        monkeypatch.setattr(factcache, "ENTRY_LIMIT", len(data) - 1)
    path.write_bytes(data)
    assert cache.get(key()) is None
    with pytest.raises(ValueError):
        decode(data, key())


def test_the_cache_keeps_to_its_ceiling_least_recently_used_first(tmp_path):
    keys = [key(arguments=(str(i),)) for i in range(4)]
    cache = FactCache(tmp_path / "probe", 1 << 20)
    assert cache.put(keys[0], FACTS)
    size = (tmp_path / "probe" / f"{keys[0]}.facts").stat().st_size
    cache.limit = size * 3 + size // 2
    for name in keys[1:3]:
        assert cache.put(name, FACTS)
    for age, name in enumerate(keys[:3]):
        os.utime(tmp_path / "probe" / f"{name}.facts", (1000 + age, 1000 + age))
    assert cache.get(keys[0]) is not None  # used now: the newest
    assert cache.put(keys[3], FACTS)
    assert {k for k in keys if cache.get(k) is not None} == {keys[0], keys[2], keys[3]}
    stranger = tmp_path / "probe" / "notes.txt"  # what the cache did not write stays
    stranger.write_text("mine")
    FactCache(tmp_path / "probe", 1).prune()
    assert stranger.exists() and not list((tmp_path / "probe").glob("*.facts"))


def test_the_ceiling_setting(monkeypatch, tmp_path):
    monkeypatch.setenv("EDGEVLLM_PROBE_CACHE", str(tmp_path))
    monkeypatch.setenv("EDGEVLLM_PROBE_CACHE_MAX", "0")
    assert FactCache.configured() is None
    monkeypatch.setenv("EDGEVLLM_PROBE_CACHE_MAX", "2M")
    found = FactCache.configured()
    assert found is not None and found.limit == 2 << 20 and found.root == tmp_path
    monkeypatch.setenv("EDGEVLLM_PROBE_CACHE_MAX", "lots")
    with pytest.raises(ConfigError, match="EDGEVLLM_PROBE_CACHE_MAX='lots'"):
        FactCache.configured()
