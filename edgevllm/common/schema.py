"""Loading YAML data files into pydantic models, with one-line errors that name file and field.

The one formatter of validation errors: every problem in a file is reported at once, on one line,
and a misspelt field gets a did-you-mean from the fields the model really has.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Iterable, Literal, TypeVar, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationError

from edgevllm.common.dataload import JSON_MAX_BYTES, MAX_VALUES, load_json, load_yaml
from edgevllm.common.errors import ConfigError, EdgeVllmError, MissingInputError

Model = TypeVar("Model", bound=BaseModel)


class Strict(BaseModel):
    """Base of every data-file model: an unknown (misspelt) field is an error, never ignored."""

    model_config = ConfigDict(extra="forbid")


def check_regex(value: str) -> str:
    """A pydantic validator body: the value must compile as a regular expression."""
    import re

    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"not a regular expression: {exc}") from None
    return value


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`` (did you mean 'model'?)`` for a close match among ``known``, else ``""``."""
    close = difflib.get_close_matches(str(name), list(known), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _submodels(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models inside ``X``, ``X | Y``, ``list[X]`` or ``dict[str, X]``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in get_args(annotation) for model in _submodels(arg)]


def _tags(model: type[BaseModel]) -> set[str]:
    """Literal values of a model's fields: how a discriminated union names its members."""
    return {str(value) for field in model.model_fields.values()
            if get_origin(field.annotation) is Literal for value in get_args(field.annotation)}


def _fields_at(model: type[BaseModel] | None, loc: tuple) -> dict[str, Any]:
    """The fields of the model that ``loc`` (a pydantic error location) points into."""
    candidates = [model] if model is not None else []
    for part in loc:
        if not isinstance(part, str):
            continue  # a list index or dict position stays on the same model
        owner = next((m for m in candidates if part in m.model_fields), None)
        if owner is not None:
            candidates = _submodels(owner.model_fields[part].annotation)
        else:  # a union member's tag (``env`` in ``steps.0.env.bogus``) or a dict key
            candidates = [m for m in candidates if part in _tags(m)] or candidates
    return dict(candidates[0].model_fields) if len(candidates) == 1 else {}


def describe_validation_error(exc: ValidationError, model: type[BaseModel] | None = None) -> str:
    """Every problem, on one line: ``field 'a.b': message; unknown field 'modle' (did you mean
    'model'?)``. A required field that a misspelt one explains is not reported twice."""
    errors = exc.errors()
    unknown = [e for e in errors if e.get("type") == "extra_forbidden"]
    explained: set[tuple] = set()
    parts = []
    for error in unknown:
        loc = tuple(error.get("loc", ()))
        known = _fields_at(model, loc[:-1])
        hint = did_you_mean(str(loc[-1]), known)
        if hint:
            explained.add(loc[:-1] + (hint.split("'")[1],))
        parts.append(f"unknown field '{_dotted(loc)}'{hint or _known_list(known)}")
    for error in errors:
        loc = tuple(error.get("loc", ()))
        if error in unknown or (error.get("type") == "missing" and loc in explained):
            continue
        parts.append(f"field '{_dotted(loc) or '(top level)'}': {error.get('msg', 'invalid')}")
    return "; ".join(parts)


def _dotted(loc: tuple) -> str:
    # A key is data too: a newline in it must not break the one-line message.
    return ".".join(str(part) if str(part).isprintable() else repr(str(part)) for part in loc)


def _known_list(known: dict[str, Any]) -> str:
    return f" (known: {', '.join(sorted(known))})" if 0 < len(known) <= 12 else ""


def read_text(path: Path | str, error: type[EdgeVllmError] = ConfigError) -> str:
    """A data file's text: one line for a missing or unreadable file, a folder, or bytes that
    are not UTF-8."""
    try:
        with open(path, "rb") as handle:  # bounded: /dev/zero or a huge file is one line
            data = handle.read(JSON_MAX_BYTES + 1)
    except FileNotFoundError:
        raise MissingInputError(f"{path}: no such file; check the path") from None
    except OSError as exc:
        raise error(f"{path}: cannot read ({exc.strerror}); check the path") from None
    if len(data) > JSON_MAX_BYTES:
        raise error(f"{path}: more than {JSON_MAX_BYTES} bytes, more than a data file may hold;"
                    " check the path")
    return decode_text(data, str(path), error)


def decode_text(data: bytes, origin: str, error: type[EdgeVllmError] = ConfigError) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{origin}: not UTF-8 text (byte {exc.start}); save it as UTF-8") from None


def parse_yaml(text: str, origin: str, error: type[EdgeVllmError] = ConfigError) -> object:
    """A YAML data file from others, bounded (common/dataload.py)."""
    return load_yaml(text, origin, error)


def parse_json(text: str | bytes, origin: str, error: type[EdgeVllmError] = ConfigError
               ) -> object:
    """A JSON document from others, bounded (common/dataload.py)."""
    return load_json(text, origin, error)


def json_object(data: str | bytes, what: str, error: type[EdgeVllmError],
                max_values: int = MAX_VALUES) -> dict:
    """Outside data that must be one JSON object (a registry's answer, a file header): the object,
    or one line, ``{what} is not JSON`` (nesting too deep counts) or ``{what} is not a JSON
    object``."""
    try:
        found = load_json(data, what, ConfigError, max_values=max_values)
    except ConfigError:  # whatever was wrong with it, the caller's one line says "not JSON"
        raise error(f"{what} is not JSON") from None
    if not isinstance(found, dict):
        raise error(f"{what} is not a JSON object")
    return found


def read_yaml(path: Path | str, error: type[EdgeVllmError] = ConfigError) -> object:
    return parse_yaml(read_text(path, error), str(path), error)


def parse_model(model: type[Model], data: object, source: str,
                error: type[EdgeVllmError] = ConfigError) -> Model:
    if not isinstance(data, dict):
        raise error(f"{source}: expected a mapping of fields, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise error(f"{source}: {describe_validation_error(exc, model)}") from None


def load_model(model: type[Model], path: Path, error: type[EdgeVllmError] = ConfigError) -> Model:
    return parse_model(model, read_yaml(path, error), str(path), error)
