"""Others' text made safe to print (common/escape.py): no character that acts on a terminal
reaches it, a markdown value stays on its line and out of the markup, and every message of the
console passes through it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from edgevllm.common import console, escape
from support.properties import PROPERTY

ACTING = {chr(c) for c in (*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0))} | {
    "\u061c", "\u200e", "\u200f", "\u2028", "\u2029", *map(chr, range(0x202A, 0x202F)),
    *map(chr, range(0x2066, 0x206A))}
controls = st.text(alphabet=st.sampled_from(sorted(ACTING | {"\n", "\t", "a", "`", "*", "[",
                                                              "\\", "é", "→"})), max_size=40)


@PROPERTY
@given(controls)
def test_nothing_that_acts_on_a_terminal_survives(text):
    for out in (escape.terminal(text), escape.one_line(text), escape.markdown(text),
                escape.code(text)):
        assert not ACTING & set(out)
    assert "\n" not in escape.one_line(text) + escape.markdown(text) + escape.code(text)
    assert escape.terminal(text).count("\n") == text.count("\n")  # a message keeps its lines


@PROPERTY
@given(st.text(max_size=30))
def test_a_code_span_holds_any_backticks(text):
    span = escape.code(text)
    fence = len(span) - len(span.lstrip("`"))
    assert span.endswith("`" * fence) and "`" * fence not in span[fence:-fence]


def test_plain_text_is_unchanged():
    assert escape.terminal("vllm 0.33.0 → ok\n") == "vllm 0.33.0 → ok\n"


def test_the_console_escapes_every_message(capsys):
    console.warn("label \x1b]0;pwned\x07 \x1b[2K\rNo differences")
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\r" not in err and "\\x1b]0;pwned\\x07" in err
