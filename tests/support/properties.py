"""What the property-based tests (Hypothesis) share: the bound every parser of outside data must
keep, mutations of real seed inputs, and a hand-built ELF to carry real fatbin sections.

``bounded(call, *args)``: the call returns, or raises one of edgevllm's own errors (one line);
any other exception fails the test, and so does a Python-heap peak over ``memory`` (tracemalloc
sees every bytes/bytearray, the C extensions' included). The time bound is Hypothesis's
``deadline``. ``PROPERTY`` keeps each test to a few seconds so the whole property suite stays
well under a minute in the fast loop; ``EDGEVLLM_PROPERTY_EXAMPLES`` runs more examples.
"""

from __future__ import annotations

import os
import struct
import tracemalloc
from typing import Callable, Sequence

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from edgevllm.common.errors import EdgeVllmError

EXAMPLES = int(os.environ.get("EDGEVLLM_PROPERTY_EXAMPLES", "40"))
PROPERTY = settings(
    max_examples=EXAMPLES,
    deadline=3000,  # ms per example: a hang or a quadratic loop fails here
    database=None,  # nothing written into the work tree
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.function_scoped_fixture],
)
MEMORY = 64 << 20


def bounded(call: Callable, *args, memory: int = MEMORY):
    """``call(*args)``'s result, or the EdgeVllmError it raised (checked to be one line)."""
    tracemalloc.start()
    try:
        result = call(*args)
    except EdgeVllmError as exc:
        result = exc
        assert str(exc).strip() and "\n" not in str(exc).strip(), f"not one line: {exc!r}"
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < memory, f"{getattr(call, '__name__', call)} peaked at {peak >> 20} MiB"
    return result


_WORDS = (0, 1, 7, 0x40, 0x7F, 0x80, 0xFF, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF, 1 << 40,
          (1 << 63) - 1, (1 << 64) - 1)


@st.composite
def mutated(draw, seed: bytes, hot: Sequence[int] = ()) -> bytes:
    """``seed`` with a few mutations: bytes, little-endian words (sizes, offsets, counts) at
    ``hot`` spots or anywhere, cuts, insertions and deletions."""
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 6))):
        anywhere = st.integers(0, max(0, len(data) - 1))
        spot = draw(st.sampled_from(list(hot)) if hot and draw(st.booleans()) else anywhere)
        spot = min(spot, max(0, len(data) - 1))
        op = draw(st.sampled_from(("byte", "word", "word", "cut", "insert", "delete")))
        if op == "byte":
            data[spot:spot + 1] = bytes([draw(st.integers(0, 255))])
        elif op == "word":
            width = draw(st.sampled_from((2, 4, 8)))
            value = draw(st.sampled_from(_WORDS) | st.integers(0, (1 << 8 * width) - 1))
            data[spot:spot + width] = (value % (1 << 8 * width)).to_bytes(width, "little")
        elif op == "cut":
            del data[spot:]
        elif op == "insert":
            data[spot:spot] = draw(st.binary(min_size=1, max_size=64))
        else:
            del data[spot:spot + draw(st.integers(1, 64))]
    return bytes(data)


def json_values(max_leaves: int = 12):
    """Any JSON value (what a hostile file can hold), nested a few levels."""
    scalars = (st.none() | st.booleans() | st.integers(-(1 << 70), 1 << 70)
               | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20))
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                        | st.dictionaries(st.text(max_size=12), inner, max_size=4),
                        max_leaves=max_leaves)


@st.composite
def replaced_field(draw, document: dict) -> dict:
    """``document`` (a parsed real file) with one field at any depth replaced by any JSON value,
    or removed."""
    import copy

    doc = copy.deepcopy(document)
    node: dict | list = doc
    while True:
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        if not keys:
            return doc
        key = draw(st.sampled_from(keys))
        child = node[key]
        if isinstance(child, (dict, list)) and child and draw(st.booleans()):
            node = child
            continue
        if isinstance(node, dict) and draw(st.integers(0, 4)) == 0:
            del node[key]
        else:
            node[key] = draw(json_values())
        return doc


def tiny_elf(sections: dict[str, bytes], machine: int = 62) -> bytes:
    """A minimal ELF64 LE file holding ``sections`` (and its name table): a hand-built carrier
    for real fatbin section bytes, a few KB instead of a 1 MB nvcc library."""
    names = b"\0" + b"".join(name.encode() + b"\0" for name in [*sections, ".shstrtab"])
    body, headers, offset = bytearray(), [bytes(64)], 64
    name_at = 1
    for name, contents in [*sections.items(), (".shstrtab", names)]:
        offset = 64 + len(body)
        pad = (-offset) % 8
        body += bytes(pad)
        offset += pad
        kind = 3 if name == ".shstrtab" else 1
        headers.append(struct.pack("<IIQQQQIIQQ", name_at, kind, 0, 0, offset, len(contents),
                                   0, 0, 8, 0))
        body += contents
        name_at += len(name) + 1
    shoff = 64 + len(body) + (-(64 + len(body)) % 8)
    body += bytes(shoff - 64 - len(body))
    ident = b"\x7fELF\x02\x01\x01" + bytes(9)
    header = struct.pack("<16sHHIQQQIHHHHHH", ident, 3, machine, 1, 0, 0, shoff, 0, 64, 0, 0,
                         64, len(headers), len(headers) - 1)
    return header + bytes(body) + b"".join(headers)


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """The classic YAML alias bomb: ``levels`` anchors, each a list of ``width`` aliases of the
    last (9 x 9: about 550 bytes that expand to 9**9 strings)."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


@st.composite
def yaml_bombs(draw) -> str:
    """Small YAML texts that would cost far more than their size: alias towers (block or flow,
    under a mapping or a list, as a merge key), nesting thousands deep, wide flat lists."""
    kind = draw(st.sampled_from(("alias", "merge", "deep", "wide", "anchor-only")))
    if kind == "alias":
        text = alias_bomb(draw(st.integers(2, 12)), draw(st.integers(2, 12)))
        return draw(st.sampled_from((text, "- " + text.replace("\n", "\n  "),
                                     "mods:\n  " + text.replace("\n", "\n  "))))
    if kind == "merge":
        return "base: &b {x: 1}\nmore:\n  <<: *b\n  y: 2\n"
    if kind == "deep":
        depth = draw(st.integers(65, 20_000))
        opener = draw(st.sampled_from(("[", "{a: ")))
        closer = "]" if opener == "[" else "}"
        return opener * depth + "1" + closer * depth
    if kind == "wide":
        from edgevllm.common.dataload import YAML_MAX_VALUES

        return "[" + ",".join(["1"] * (YAML_MAX_VALUES + draw(st.integers(1, 5_000)))) + "]"
    return f"key: &{draw(st.from_regex(r'[a-z]{1,8}', fullmatch=True))} value\n"
