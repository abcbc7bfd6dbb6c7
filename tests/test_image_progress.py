"""image/progress.py and image/records.py's label reader, with no engine: sizes said in binary
units, the progress of bytes off a terminal (a line at most every ``line_every`` seconds, so CI
logs stay short) and the records an image's labels hold, where a label that is not JSON is read
as no record with a warning, never a crash."""

from __future__ import annotations

import json

import pytest

from edgevllm.common import labels
from edgevllm.image.progress import ByteProgress, human
from edgevllm.image.records import RECORDS, label_records


@pytest.mark.parametrize(("size", "said"), [
    (0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"),
    (5 * 1024 ** 3, "5.0 GiB"), (3 * 1024 ** 5, "3072.0 TiB"),
])
def test_sizes_are_said_in_binary_units(size, said):
    assert human(size) == said


def test_off_a_terminal_progress_is_a_line_when_due_and_counts_every_byte(capsys, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    with ByteProgress("publish img", 3 << 20, line_every=0.0) as progress:
        for _ in range(3):
            progress(1 << 20)
    assert progress.done == 3 << 20 and progress.rate > 0
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3 and all(line.startswith("publish img: ") for line in lines)
    assert lines[-1].startswith("publish img: 3.0 MiB at ") and lines[-1].endswith("/s")


def test_off_a_terminal_no_line_comes_before_it_is_due(capsys):
    with ByteProgress("load img", None, line_every=3600.0) as progress:
        progress(10)
        progress(20)
    assert progress.done == 30 and capsys.readouterr().err == ""


def test_the_records_an_images_labels_hold_and_those_they_do_not(capsys):
    lock = {"target": "spark", "schema_version": 1}
    found = label_records("img:1", {labels.LOCK: json.dumps(lock), labels.MODS: "[]",
                                    "other.label": "x"})
    assert found == {"lock": lock, "mods": []}
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("text", ["{not json", "\udcff", "[" * 10000],
                         ids=["broken", "surrogate", "deep"])
def test_a_label_that_is_not_json_is_no_record_with_a_warning(capsys, text):
    found = label_records("img:1", {labels.VERIFY: text, labels.PROBE: '{"ok": true}'})
    assert found == {"verify": None, "probe": {"ok": True}}
    err = capsys.readouterr().err
    assert f"label {RECORDS['verify'][0]} of img:1 is not JSON; read as no record" in err
    assert "Traceback" not in err
