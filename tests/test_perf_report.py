"""perf/report.py: a benchmark record is others' data; no value in it can change the shape of
the markdown report (a column, a row, markup), whatever text it holds."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from edgevllm.perf.report import compare_markdown, expectations_markdown, markdown, start_markdown

# A cell separator is a pipe that no backslash escapes.
SEPARATOR = re.compile(r"(?<!\\)\|")
STATS = {"median": 10.0, "min": 9.0, "max": 11.0}


def _record(name: str, label: str, note: str) -> dict:
    point = {"input_len": 32, "output_len": 16, "concurrency": 1, "labels": {"ctx": label},
             "summary": {"tok_s_stream": STATS, "tok_s_total": STATS, "ttft_ms": STATS,
                         "itl_ms": STATS, "failed": {"max": 0}}}
    return {"name": name, "started": label, "points": [point],
            "runs": [{"labels": {"ctx": label},
                      "start": {"health_s": 1.0, "first_token_s": 2.0, "error": note}}],
            "expectations": [{"kind": "at_least", "metric": name, "concurrency": 1,
                              "bound": 1.0, "measured": 2.0, "status": "met", "source": note}]}


def _tables(record: dict) -> list[str]:
    return [markdown([record]), start_markdown([record]), expectations_markdown(record),
            compare_markdown(record, record)]


def _shape(table: str) -> list[int]:
    """Per line: how many cells it has (0 for a line outside the table)."""
    return [len(SEPARATOR.findall(line)) for line in table.splitlines()]


def test_hostile_names_labels_and_errors_keep_every_table_its_shape():
    tame = _tables(_record("a", "b", "c"))
    hostile = _tables(_record("x | forged | row\n| No differences |", "`<b>`*_[x](y)_*",
                              "boom\r\n| 1 | 2 |\x1b[2J"))
    for mild, wild in zip(tame, hostile, strict=True):
        assert _shape(wild) == _shape(mild)
        assert "\x1b" not in wild and "\r" not in wild
    # the newline shows as a visible \n (its backslash escaped for markdown), the pipes as \|
    assert "| x \\| forged \\| row\\\\n\\| No differences \\| | in=32" in hostile[0]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40), st.text(max_size=40), st.text(max_size=40))
def test_no_text_in_a_record_adds_a_cell_or_a_line(name, label, note):
    tame, wild_tables = _tables(_record("a", "b", "c")), _tables(_record(name, label, note))
    for mild, wild in zip(tame, wild_tables, strict=True):
        assert _shape(wild) == _shape(mild)


def test_figures_this_module_formats_stay_as_written():
    table = markdown([_record("run", "b", "c")])
    assert "| 10.0 [9.0-11.0] |" in table
    assert "| run | in=32 out=16 ctx=b | 1 |" in table
