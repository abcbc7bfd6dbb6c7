"""specs/moderule.py, what a mode accepts: each field only some modes honour (``MODE_FIELDS``)
is taken or refused by the record of the mode the rule chose (asked, the lock's, or the
default's), in one line naming the field, its flags and the modes that take it; never dropped
without a word. The expectations come from the records, so a new mode is covered as it lands
(tests/test_specs_moderecord.py adds two)."""

from __future__ import annotations

import pytest

from edgevllm.cli.flags import BUILD_FLAGS, SOURCE_FLAGS
from edgevllm.common.errors import SpecError
from edgevllm.specs.buildspec import load_spec, resolve
from edgevllm.specs.moderecord import mode_records
from edgevllm.specs.moderule import MODE_FIELDS, Builder, choose_mode, wants_tree_check

X86 = Builder(arch="amd64")  # spark is linux/arm64: a release builds prebuilt here
FLASHINFER = {"source": {"repo": "flashinfer-ai/flashinfer", "ref": "v0.7.2"}}
# A value for each field of MODE_FIELDS.
GIVEN: dict[str, dict] = {"vllm_wheel": {"vllm_wheel": "0.20.2"},
                          "extensions": {"extensions": ["cumem_allocator"]},
                          "flashinfer.source": {"flashinfer": FLASHINFER},
                          "dist": {"dist": "sccache://10.0.0.5:10600"}}


def test_every_field_of_the_table_has_a_value_here_and_names_its_flags():
    """The flags an error names are the ones that set the field (cli/flags.py's table)."""
    assert {f.field for f in MODE_FIELDS} == set(GIVEN)
    for entry in MODE_FIELDS:
        setting = sorted({flag.option for flag in SOURCE_FLAGS + BUILD_FLAGS
                         if (flag.field or "").startswith(entry.field) and flag.const is None})
        assert sorted(entry.flags.split(", ")) == setting, entry.field


@pytest.mark.parametrize("name", sorted(mode_records()))
@pytest.mark.parametrize("given", sorted(GIVEN))
def test_each_mode_takes_or_refuses_each_field_as_its_record_says(name, given):
    entry = next(f for f in MODE_FIELDS if f.field == given)
    spec = load_spec("spark", overrides={"mode": name, **GIVEN[given]})
    if entry.honoured(mode_records()[name]):
        assert choose_mode(spec, builder=X86) == (name, f"mode {name} asked for")
        assert name in entry.modes()
        return
    with pytest.raises(SpecError) as refused:
        resolve(spec, builder=X86)
    text = str(refused.value)
    assert text == (f"field '{given}' ({entry.flags}) {entry.does}: it needs mode "
                    f"{' or '.join(entry.modes())}, not {name}")


def test_prebuilt_refuses_flashinfer_from_source():
    """The shipped bug: prebuilt took --flashinfer-repo/--flashinfer-ref, said nothing, and
    the target's FlashInfer pin was dropped from the plan's packages. Precompiled refused it."""
    for name in ("prebuilt", "precompiled"):
        with pytest.raises(SpecError, match=f"field 'flashinfer.source' .* compiles FlashInfer: "
                                            f"it needs mode compile, not {name}$"):
            resolve(load_spec("spark", overrides={"mode": name, "flashinfer": FLASHINFER}))


def test_a_field_the_default_rules_pick_cannot_honour_says_why_that_mode():
    """No mode asked: --vllm-wheel picks prebuilt, which cannot build FlashInfer from source;
    the line says what chose prebuilt (before, FlashInfer from source was dropped silently)."""
    spec = load_spec("spark", overrides={**GIVEN["vllm_wheel"], "flashinfer": FLASHINFER})
    with pytest.raises(SpecError, match=r"not prebuilt \(chosen: --vllm-wheel 0.20.2: the "):
        choose_mode(spec, builder=X86)
    spec = load_spec("spark", overrides={**GIVEN["vllm_wheel"], **GIVEN["extensions"]})
    with pytest.raises(SpecError, match=r"field 'vllm_wheel' .*not compile \(chosen: "
                                        r"--extensions cumem_allocator"):
        choose_mode(spec, builder=X86)


def test_a_lock_rebuild_refuses_what_its_mode_cannot_honour():
    spec = load_spec("spark", overrides={"mode": "prebuilt", "mode_from_lock": True,
                                         "flashinfer": FLASHINFER})
    with pytest.raises(SpecError, match=r"not prebuilt \(chosen: the lock's mode"):
        choose_mode(spec, builder=X86)


def test_the_tree_decides_only_where_its_mode_could_honour_the_spec():
    """A PR with --extensions or FlashInfer from source compiles: the Python-only mode could
    honour neither, so the tree is not asked (before, a Python-only PR with --extensions built
    precompiled and dropped the extensions)."""
    pr = {"vllm": {"ref": "v0.33.0", "pr": 5}}
    assert wants_tree_check(load_spec("spark", overrides=pr))
    for given in ("extensions", "flashinfer.source"):
        assert not wants_tree_check(load_spec("spark", overrides={**pr, **GIVEN[given]}))
    for name, record in mode_records().items():
        assert wants_tree_check(load_spec("spark", overrides={**pr, "mode": name})) \
            == record.checks_tree == (record.tree and record.kernels_from_release)
