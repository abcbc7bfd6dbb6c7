"""Others' text made safe to print: the one escaping of labels, env values, records, names.

A label, an env value or a file name comes from whoever built the image or wrote the file. Raw,
an ESC sequence in it moves the cursor, erases lines or retitles the terminal, a carriage return
or a bidi override makes a line read as something else, and a newline or a markdown mark in a
diff forges a line of the report ("No differences"). ``terminal`` writes every such character
as a visible escape (``\\x1b``); ``markdown`` also keeps a value on its line and out of the
markup; ``code`` makes a markdown code span of any text. The console (common/console.py) and
every task's stdout (cli/_common.py) pass through ``terminal``.
"""

from __future__ import annotations

import re

# C0 controls (but tab and newline), DEL, C1 controls, and the characters that reorder or split
# what a terminal shows (bidi embeddings, overrides and isolates; line and paragraph separators);
# and lone surrogates: a file name's bytes that are not UTF-8 (os.fsdecode), which no UTF-8
# stream can write (printing one raised UnicodeEncodeError instead of the error line).
_UNSAFE = ("\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
           "\ud800-\udfff")
_TERMINAL = re.compile(f"[{_UNSAFE}]")
_ONE_LINE = re.compile(f"[{_UNSAFE}\t\n]")
_MARKUP = re.compile(r"([\\`*_\[\]<>|~])")


def _visible(match: re.Match) -> str:
    code = ord(match.group())
    return {9: "\\t", 10: "\\n", 13: "\\r"}.get(code) or \
        (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def terminal(text: object) -> str:
    """``text`` with every character that could act on a terminal written as an escape; tabs
    and newlines stay (a message may have several lines)."""
    return _TERMINAL.sub(_visible, str(text))


def one_line(text: object) -> str:
    """``terminal``, and newlines and tabs escaped too: a value that stays on its line."""
    return _ONE_LINE.sub(_visible, str(text))


def markdown(text: object) -> str:
    """A value for a markdown line: on one line, every markup character backslash-escaped."""
    return _MARKUP.sub(r"\\\1", one_line(text))


def code(text: object) -> str:
    """A markdown code span holding ``text`` (one line), whatever backticks it holds."""
    value = one_line(text)
    longest = max((len(run) for run in re.findall(r"`+", value)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if value.startswith("`") or value.endswith("`") or not value.strip() else ""
    return f"{fence}{pad}{value}{pad}{fence}"
