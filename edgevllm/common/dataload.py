"""The one reader of YAML and JSON from others: bounded before a value is built.

Specs, targets, locks, recipes, eugr recipes, mod manifests, published-set manifests, envelopes,
records and model configs arrive from people edgevllm does not know. Each is read here and only
here: the text is bounded in size, YAML may hold no anchor or alias (an alias bomb of a few
hundred bytes expands to gigabytes), and the values are bounded in number and nesting before
anything is built. Whatever is wrong is one line of the caller's error class, naming ``origin``.

``tests/test_common_dataload.py::test_no_other_module_parses_outside_yaml_or_json`` holds that no
other module calls ``yaml.safe_load`` or ``json.loads`` on data it did not write in the same run.

``load_text`` reads others' text files (a tree's build files) the same way: bounded, UTF-8.

``shell_words`` splits others' shell text (an eugr command, a recipe's build args, a ``run.sh``
line) as a shell would, after bounding its length: ``shlex`` grows each token a character at a
time, so a megabyte token took minutes.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import yaml

from edgevllm.common.errors import ConfigError, EdgeVllmError

MAX_DEPTH = 64  # nesting levels: no data file of ours goes past 8
MAX_VALUES = 200_000  # scalars, lists and mappings together (JSON)
YAML_MAX_VALUES = 20_000  # a lock in YAML holds a few thousand
YAML_MAX_BYTES = 2 << 20
JSON_MAX_BYTES = 16 << 20
WORDS_MAX_CHARS = 64 << 10  # a command line or a build-args item: real ones are under 4 KiB

_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present


class _Refused(Exception):
    pass


def _text(data: str | bytes, origin: str, error: type[EdgeVllmError], limit: int) -> str:
    if len(data) > limit:
        raise error(f"{origin}: {len(data)} bytes, more than a data file may hold ({limit});"
                    " check that this is the file meant")
    if isinstance(data, bytes):
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise error(f"{origin}: not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
    return data


def _scan_yaml(text: str, max_values: int) -> None:
    """Walk the events (libyaml, streamed): no alias, no anchor, bounded count and depth."""
    depth = values = 0
    for event in yaml.parse(text, Loader=_LOADER):
        if isinstance(event, yaml.AliasEvent):
            raise _Refused(f"an alias (*{event.anchor}) at line {_line(event)}; write the value"
                           " out, edgevllm reads no anchors or aliases")
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            raise _Refused(f"an anchor (&{anchor}) at line {_line(event)}; write the"
                           " value out, edgevllm reads no anchors or aliases")
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise _Refused(f"nested too deeply (more than {MAX_DEPTH} levels) at line"
                               f" {_line(event)}")
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            depth -= 1
        if isinstance(event, yaml.NodeEvent):
            values += 1
            if values > max_values:
                raise _Refused(f"more than {max_values} values")


def _line(event: yaml.Event) -> int:
    mark = getattr(event, "start_mark", None)
    return mark.line + 1 if mark is not None else 0


def load_text(path: Path, error: type[EdgeVllmError], max_bytes: int) -> str:
    """A text file from others (a tree's requirement file, pyproject.toml, CMake file): its size
    checked before a byte is read, UTF-8, or one line of ``error`` naming it."""
    size = path.stat().st_size
    if size > max_bytes:
        raise error(f"{path}: {size} bytes, more than such a file may hold ({max_bytes}); check "
                    "that it is the file meant")
    return _text(path.read_bytes(), str(path), error, max_bytes)


def load_yaml(data: str | bytes, origin: str, error: type[EdgeVllmError] = ConfigError, *,
              max_bytes: int = YAML_MAX_BYTES, max_values: int = YAML_MAX_VALUES) -> Any:
    """The value of a YAML document from others, or one line of ``error``."""
    text = _text(data, origin, error, max_bytes)
    try:
        _scan_yaml(text, max_values)
        return yaml.load(text, Loader=_LOADER)  # noqa: S506 - a safe loader, scanned above
    except _Refused as exc:
        raise error(f"{origin}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = " ".join(str(getattr(exc, "problem", None) or "invalid YAML").split())
        if "nesting depth" in problem:  # libyaml's own limit, met before the events
            raise error(f"{origin}: nested too deeply (more than {MAX_DEPTH} levels) to be a"
                        " data file") from None
        raise error(f"{origin}:{where}: not valid YAML ({problem}); fix the YAML syntax") \
            from None
    except (RecursionError, MemoryError, ValueError, OverflowError):
        raise error(f"{origin}: nested too deeply or sized beyond reason to be a data"
                    " file") from None


def load_json(data: str | bytes, origin: str, error: type[EdgeVllmError] = ConfigError, *,
              max_bytes: int = JSON_MAX_BYTES, max_values: int = MAX_VALUES) -> Any:
    """The value of a JSON document from others, or one line of ``error``."""
    text = _text(data, origin, error, max_bytes)
    # An upper bound on the values, counted before any is built (commas inside strings count too).
    if text.count(",") + text.count("[") + text.count("{") > max_values:
        raise error(f"{origin}: more than {max_values} values; not a data file edgevllm reads")
    try:
        found = json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{origin}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except (RecursionError, ValueError):  # ValueError: an integer of more than 4300 digits
        raise error(f"{origin}: nested too deeply or sized beyond reason to be a data"
                    " file") from None
    if _depth(found) > MAX_DEPTH:
        raise error(f"{origin}: nested too deeply (more than {MAX_DEPTH} levels) to be a data file")
    return found


def _depth(value: object) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        if level > MAX_DEPTH:
            return level
        children = item.values() if isinstance(item, dict) else item \
            if isinstance(item, list) else ()
        stack.extend((child, level + 1) for child in children)
    return deepest


def shell_words(text: str, origin: str, error: type[EdgeVllmError] = ConfigError, *,
                comments: bool = False, limit: int = WORDS_MAX_CHARS) -> list[str]:
    """``text`` split as a shell would, or one line of ``error`` naming ``origin`` (too long to
    split, or quoting that does not close)."""
    if len(text) > limit:
        raise error(f"{origin}: {len(text)} characters, over the {limit} a command line may "
                    "have; shorten it")
    try:
        return shlex.split(text, comments=comments)
    except ValueError as exc:
        raise error(f"{origin}: cannot split it ({exc}); fix the quoting") from None
