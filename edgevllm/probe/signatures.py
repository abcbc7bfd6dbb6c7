"""The catalogue of known-bad log lines (signatures.yaml) and matching a log against it."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from typing import Iterable, Literal

from pydantic import BaseModel, ConfigDict, field_validator

from edgevllm.common.dataload import load_yaml
from edgevllm.common.errors import ManifestError
from edgevllm.common.schema import check_regex, parse_model

CATALOGUE = "signatures.yaml"


class Signature(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    regex: str
    severity: Literal["fail", "warn"]
    explanation: str
    remedy: str
    stop: bool = False
    targets: list[str] | None = None

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: str) -> str:
        return check_regex(value)

    @functools.cached_property
    def pattern(self) -> re.Pattern:
        return re.compile(self.regex)

    def applies_to(self, target: str | None) -> bool:
        return self.targets is None or target is None or target in self.targets


class Catalogue(BaseModel):
    model_config = ConfigDict(extra="forbid")

    signatures: list[Signature]


@dataclass
class Match:
    signature: Signature
    line: str
    line_no: int  # 1-based, first occurrence
    count: int


def parse_catalogue(text: str, source: str = CATALOGUE) -> list[Signature]:
    data = load_yaml(text, source, ManifestError)
    signatures = parse_model(Catalogue, data, source, ManifestError).signatures
    seen: set[str] = set()
    for sig in signatures:
        if sig.id in seen:
            raise ManifestError(f"{source}: signature id '{sig.id}' appears twice; ids are unique")
        seen.add(sig.id)
    return signatures


@functools.lru_cache(maxsize=1)
def load_catalogue() -> tuple[Signature, ...]:
    """The shipped catalogue (edgevllm/probe/signatures.yaml)."""
    text = resources.files(__package__).joinpath(CATALOGUE).read_text()
    return tuple(parse_catalogue(text, f"edgevllm/probe/{CATALOGUE}"))


def match_log(lines: Iterable[str], signatures: Iterable[Signature] | None = None,
              target: str | None = None) -> list[Match]:
    """Every signature that occurs in ``lines``, with its first line and count, catalogue order."""
    sigs = [s for s in (signatures if signatures is not None else load_catalogue())
            if s.applies_to(target)]
    found: dict[str, Match] = {}
    for number, line in enumerate(lines, start=1):
        for sig in sigs:
            if sig.pattern.search(line):
                if sig.id in found:
                    found[sig.id].count += 1
                else:
                    found[sig.id] = Match(sig, line.strip(), number, 1)
    return [found[s.id] for s in sigs if s.id in found]
