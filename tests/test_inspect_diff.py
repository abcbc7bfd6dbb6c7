"""inv diff on locks and published-set manifests (no engine): each section names exactly what
changed; a section one side does not record is said to be missing, not shown as all added."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgevllm.inspect.diff import compare, mapping_diff, markdown
from edgevllm.inspect.facts import Facts, Layer, read_facts
from edgevllm.specs.lock import BaseImageLock, write_lock
from support.inside_locks import BYTECODE_TWIN, lock_data, make_lock, sha
from support.properties import PROPERTY, bounded, json_values


def lock_facts(name: str, **changes) -> Facts:
    return Facts(name, "lock", lock=make_lock(**changes))


def test_mapping_diff():
    assert mapping_diff({"a": 1, "b": 2, "c": 3}, {"b": 2, "c": 4, "d": 5}) == {
        "added": {"d": 5}, "removed": {"a": 1}, "changed": {"c": {"old": 3, "new": 4}}}
    assert mapping_diff({"a": 1}, {"a": 1}) == {}


def test_same_lock_has_no_sections():
    result = compare(lock_facts("a"), lock_facts("b"))
    assert result["sections"] == {}
    assert "No differences" in markdown(result)


def test_one_wheel_one_pick_one_mod_and_nothing_else():
    result = compare(lock_facts("a"), lock_facts("b", six="1.17.0", pick_head="pick-b",
                                                 mod_version="1.1"))
    sections = result["sections"]
    assert set(sections) == {"wheels", "picks", "mods"}
    assert sections["wheels"] == {"changed": {"six": {
        "old": {"version": "1.16.0", "sha256": sha("six-1.16.0", 64)},
        "new": {"version": "1.17.0", "sha256": sha("six-1.17.0", 64)}}}}
    assert list(sections["picks"]["changed"]) == ["vllm 40082"]
    assert sections["mods"] == {"changed": {"fastsafetensors": {"old": {"version": "1.0"},
                                                                 "new": {"version": "1.1"}}}}
    text = markdown(result)
    assert "- changed `six`: 1.16.0 (sha256 " in text and "→ 1.17.0" in text


def test_a_byte_code_base_pinned_by_digest_is_a_changed_build_input():
    old, new = make_lock(), make_lock()
    digest = "sha256:" + sha("twin", 64)
    new.base_images["bytecode"] = BaseImageLock(ref=BYTECODE_TWIN, digest=digest)
    result = compare(Facts("a", "lock", lock=old), Facts("b", "lock", lock=new))
    assert result["sections"] == {"build_inputs": {"changed": {"base.bytecode": {
        "old": f"{BYTECODE_TWIN}@?", "new": f"{BYTECODE_TWIN}@{digest}"}}}}


def test_added_and_removed_wheels():
    old, new = make_lock(), make_lock()
    assert new.closure is not None
    new.closure.wheels = [w for w in new.closure.wheels if w.name != "idna"]
    result = compare(Facts("a", "lock", lock=old), Facts("b", "lock", lock=new))
    assert result["sections"]["wheels"] == {"removed": {"idna": {
        "version": "3.10", "sha256": sha("idna-3.10", 64)}}}


def test_lock_against_an_image_side_names_what_the_lock_lacks():
    image = Facts("img", "image", image_id="sha256:" + "1" * 64, lock=make_lock(),
                  labels={"org.opencontainers.image.title": "x"},
                  config={"Env": ["A=1"], "Entrypoint": None, "Cmd": ["bash"]},
                  layers=[Layer("sha256:" + "2" * 64, 10)],
                  records={"mods": [{"name": "fastsafetensors", "version": "1.0",
                                     "outcome": "applied"}]})
    result = compare(lock_facts("lock"), image)
    # The lock has no env, labels, layers: not recorded, not "everything added".
    assert {"env", "run_config", "labels"} <= set(result["not_recorded"])
    assert "layers" not in result
    # mods: the image's record (with outcomes) against the lock's list (versions only)
    assert result["sections"]["mods"]["changed"]["fastsafetensors"]["new"]["outcome"] == "applied"


def test_layers_shared_added_removed_and_bytes():
    a = Facts("a", "image", layers=[Layer("sha256:aa", 100), Layer("sha256:bb", 50)], config={})
    b = Facts("b", "image", layers=[Layer("sha256:aa", 100), Layer("sha256:cc", 70)], config={})
    layers = compare(a, b)["layers"]
    assert layers["shared"] == {"count": 1, "bytes": 100}
    assert layers["added"] == {"sha256:cc": 70} and layers["removed"] == {"sha256:bb": 50}
    assert layers["total_bytes"] == {"old": 150, "new": 170}


def _manifest(path, lock: dict, mods: list, env: list[str]) -> None:
    path.write_text(json.dumps({
        "schema_version": 1, "name": path.name.split(".")[0], "format": "zst",
        "parts": [{"file": "x.tar.zst", "size": 1, "sha256": "0" * 64}], "total_size": 1,
        "uncompressed_size": 1, "tool_version": "0", "created": "now",
        "image": {"id": "sha256:" + sha(path.name, 64), "config": {"Env": env, "Cmd": ["bash"]},
                  "layers": ["sha256:aa"]},
        "labels": {"io.edgevllm.lock": json.dumps(lock)}, "lock": lock, "mods": mods}))


def test_published_manifest_against_a_lock_file_and_another_manifest(tmp_path, cli):
    lock_file = write_lock(make_lock(), tmp_path / "a.lock.json")
    first, second = tmp_path / "a.manifest.json", tmp_path / "b.manifest.json"
    mods = [{"name": "fastsafetensors", "version": "1.0", "outcome": "applied"}]
    _manifest(first, lock_data(), mods, ["A=1"])
    _manifest(second, lock_data(six="1.17.0"), mods, ["A=2"])
    facts = read_facts(str(first))
    assert facts.kind == "tarball" and facts.lock is not None and facts.config["Env"] == ["A=1"]
    code, out, err = cli("diff", str(first), str(second), "--json")
    assert code == 0, err
    result = json.loads(out)
    assert set(result["sections"]) == {"wheels", "env"}
    assert result["sections"]["env"] == {"changed": {"A": {"old": "1", "new": "2"}}}
    code, out, err = cli("diff", str(lock_file), str(second))
    assert code == 0, err
    assert "- changed `six`" in out and "_env: not recorded by" in out


def test_bench_records_compare_medians(tmp_path, cli):
    lock_file = write_lock(make_lock(), tmp_path / "a.lock.json")
    records = []
    for name, median in (("old", 10.0), ("new", 12.5)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"points": [{
            "concurrency": 1, "input_len": 128, "output_len": 64,
            "summary": {"tok_s_stream": {"median": median, "min": 1, "max": 20}}}],
            "roofline": {"ceiling_tok_s": 40.0}}))
        records.append(str(path))
    code, out, err = cli("diff", str(lock_file), str(lock_file), "--json",
                         "--bench", ",".join(records))
    assert code == 0, err
    assert json.loads(out)["sections"] == {"bench": {"changed": {
        "c1 in128 out64 tok_s_stream": {"old": 10.0, "new": 12.5}}}}
    code, _, err = cli("diff", str(lock_file), str(lock_file), "--bench", str(lock_file))
    assert code == 2 and "error: --bench takes two records" in err


def test_missing_lock_file_is_one_line(tmp_path, cli):
    bad = tmp_path / "broken.lock.json"
    bad.write_text("{not json")
    code, _, err = cli("diff", str(bad), str(bad))
    assert code == 5 and err.strip().startswith("error:") and "broken.lock.json" in err
    assert "Traceback" not in err


# --- others' data: escaped, and any shape of record is read without a traceback -----------------
UNSAFE = "\x1b\r\x9b\u202e\x07\x00"


def _image(name: str, labels: dict, records: dict | None = None, config=None, layers=None):
    return Facts(name, "image", image_id=f"sha256:{name}", labels=labels, records=records or {},
                 config=config if config is not None else {"Env": ["A=1"]}, layers=layers)


def test_a_label_cannot_forge_no_differences_or_reach_the_terminal():
    forged = "x\n\nNo differences in what both sides record.\n\x1b[2K\x1b[1A" + UNSAFE + "`## mods"
    result = compare(_image("a", {"note": "1"}), _image("b", {"note": forged, forged: "k"}))
    text = markdown(result)
    assert "No differences" not in text.splitlines()[2:3] and len(result["sections"]) == 1
    assert not any(line.startswith(("No differences", "## mods")) for line in text.splitlines())
    assert not any(ch in text for ch in UNSAFE) and "\\x1b\\[2K" in text
    assert text.count("\n") == len(text.splitlines())  # no line is split inside a value


@pytest.mark.parametrize("records, config, layers", [
    ({"mods": "abc", "verify": "x", "probe": 7}, {"Env": "A=1"}, None),
    ({"mods": [{"name": ["a"]}, 3], "verify": {"failures": "abc"}}, {"Env": [1, None]}, None),
    ({"verify": {"failures": [1, {"path": {"p": 1}}]}}, {"Env": None},
     [Layer(5, "big")]),  # type: ignore[arg-type]  # others' data: any shape
])
def test_records_of_any_shape_compare_without_a_traceback(records, config, layers):
    old = _image("a", {}, layers=[Layer("sha256:1", 10)])
    new = _image("b", {"k": "v"}, records, config, layers or [Layer("sha256:2", -1)])
    assert "## labels" in markdown(compare(old, new))


@PROPERTY
@given(st.dictionaries(st.text(max_size=8), st.text(max_size=20), max_size=4),
       st.dictionaries(st.sampled_from(["mods", "verify", "probe"]), json_values(), max_size=3),
       json_values(), st.lists(st.tuples(json_values(max_leaves=2), json_values(max_leaves=2)),
                               max_size=3))
def test_any_labels_and_records_give_escaped_markdown(labels, records, config, layers):
    new = _image("b", labels, records, {"Env": config},
                 [Layer(d, s) for d, s in layers])  # type: ignore[arg-type]
    text = bounded(lambda: markdown(compare(_image("a", {}), new)))
    assert isinstance(text, str) and not any(ch in text for ch in UNSAFE)
    assert text.startswith("# a → b\n")


def test_a_supplied_cmake_dep_shows_in_diff_sbom_and_provenance():
    """A folder supplied without a lock (--cmake-dep) in place of a fetched dependency: inv diff
    names the change and says it is a stand-in; the SBOM and the provenance say so too."""
    from edgevllm.inspect import provenance, sbom
    from edgevllm.specs.lock import CMakeDepLock

    old, new = make_lock(), make_lock()
    fetched = old.cmake_deps["cutlass"]
    new.cmake_deps["cutlass"] = CMakeDepLock(repo=fetched.repo, ref=fetched.ref,
                                             tree=sha("my-folder"), env_var=fetched.env_var,
                                             supplied=True)
    result = compare(Facts("a", "lock", lock=old), Facts("b", "lock", lock=new))
    assert result["sections"] == {"cmake_deps": {"changed": {"cutlass": {
        "old": {"commit": sha("cutlass"), "tree": sha("cutlass-tree")},
        "new": {"commit": None, "tree": sha("my-folder"),
                "supplied": "a folder standing in, unproven"}}}}}
    doc = json.loads(sbom.build_sbom(sbom.Subject("img:1", "sha256:" + "1" * 64, []), new, [],
                                     [], []))
    component = next(c for c in doc["components"] if c.get("group") == "cmake-dep")
    assert component["version"] == f"tree-{sha('my-folder')}"
    assert {"name": "edgevllm:supplied", "value": "stands in, unproven"} in component["properties"]
    statement = provenance.statement("img:1", "sha256:" + "1" * 64, new, [], "{}")
    deps = {d["name"]: d for d in statement["predicate"]["buildDefinition"]
            ["resolvedDependencies"]}
    assert deps["cmake-dep:cutlass"]["digest"] == {"gitTree": sha("my-folder")}
    assert deps["cmake-dep:cutlass"]["annotations"] == {
        "supplied": True, "standsInFor": f"git+{fetched.repo}@{fetched.ref}", "proven": False}
