"""Loading YAML data files into pydantic models, with one-line errors that name file and field."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from edgevllm.kernel.errors import ConfigError

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


def describe_validation_error(exc: ValidationError) -> str:
    """The first problem as ``field 'a.b': message`` (one line)."""
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first.get("loc", ())) or "(top level)"
    message = first.get("msg", "invalid value")
    if first.get("type") == "extra_forbidden":
        message = "unknown field; check the spelling against the documented fields"
    more = len(exc.errors()) - 1
    suffix = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
    return f"field '{where}': {message}{suffix}"


def read_yaml(path: Path, error: type[ConfigError] = ConfigError) -> object:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise error(f"{path}: cannot read ({exc.strerror}); check the path") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise error(f"{path}:{where}: {problem}; fix the YAML syntax") from None


def parse_model(model: type[Model], data: object, source: str,
                error: type[ConfigError] = ConfigError) -> Model:
    if not isinstance(data, dict):
        raise error(f"{source}: expected a mapping of fields, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise error(f"{source}: {describe_validation_error(exc)}") from None


def load_model(model: type[Model], path: Path, error: type[ConfigError] = ConfigError) -> Model:
    return parse_model(model, read_yaml(path, error), str(path), error)
