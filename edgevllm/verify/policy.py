"""Which libraries gate ``inv verify``, and how: a data file (``policy.yaml``), not code.

A rule names libraries by glob patterns anchored on the package folder: ``torch/lib/x.so``
matches that path at the top of the scanned tree (an unzipped wheel, a site-packages folder, a
``.whl``) and right below any ``site-packages/`` or ``dist-packages/`` folder (an image, a
tarball, a venv). ``*`` stays inside one folder; ``**/`` spans any number of folders.

Modes:
- ``every-unit``: what edgevllm compiles for the target; every unit (fatbin container or cubin)
  must reach ``require``; one short unit fails.
- ``coverage``: stock and vendor libraries; units that cannot run are reported; the library fails
  when fewer than ``min_coverage`` (fraction, default: any one) of its units reach ``require``.
- ``report``: never fails.
A gated library (``every-unit`` / ``coverage``) with no device code at all fails. The default
policy is ``policy.yaml`` beside this module; ``--policy FILE`` replaces it.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from edgevllm.common.dataload import YAML_MAX_BYTES, load_yaml
from edgevllm.common.errors import PolicyError
from edgevllm.common.schema import parse_model
from edgevllm.specs.moderecord import mode_records

Requirement = Literal["native", "compatible", "ptx-jit", "report"]
Mode = Literal["every-unit", "coverage", "report"]
DEFAULT_POLICY = Path(__file__).with_name("policy.yaml")
# A release's own kernels (prebuilt / precompiled builds): core extensions must run, not be native.
STOCK_POLICY = Path(__file__).with_name("policy-stock.yaml")
_PACKAGE_ROOTS = ("site-packages/", "dist-packages/")


def mode_policy(mode: str | None) -> Path | None:
    """The gate an image of build mode ``mode`` is verified with, at build time and in
    ``inv verify`` alike (the mode record's ``gate``): the stock-kernel policy where its kernels
    are a release's, else None (the default). A mode with no record here: None."""
    record = mode_records().get(mode or "")
    return STOCK_POLICY if record is not None and record.gate == "stock" else None


@functools.lru_cache(maxsize=256)
def _pattern(glob: str) -> re.Pattern:
    """A glob as a regex: ``**/`` any folders (or none), ``*`` / ``?`` within one folder."""
    out, index = [], 0
    while index < len(glob):
        if glob.startswith("**/", index):
            out.append("(?:[^/]+/)*")
            index += 3
        elif glob.startswith("**", index):
            out.append(".*")
            index += 2
        else:
            char = glob[index]
            out.append("[^/]*" if char == "*" else "[^/]" if char == "?" else re.escape(char))
            index += 1
    return re.compile("".join(out) + r"\Z")


def anchors(path: str) -> list[str]:
    """The path from the top, then from below each site-packages / dist-packages folder (in
    order, outermost first)."""
    cuts = []
    for root in _PACKAGE_ROOTS:
        start = path.find(root)
        while start >= 0:
            if start == 0 or path[start - 1] == "/":
                cuts.append(start + len(root))
            start = path.find(root, start + 1)
    return [path] + [path[cut:] for cut in sorted(cuts)]


class Rule(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    match: list[str]
    require: Requirement = "report"
    mode: Mode = "report"  # when not given: every-unit if require names a level (see below)
    min_coverage: float = Field(default=0.0, ge=0.0, le=1.0)

    @model_validator(mode="before")
    @classmethod
    def _default_mode(cls, data: object) -> object:
        if isinstance(data, dict) and data.get("mode") is None:
            return {**data, "mode": "report" if data.get("require", "report") == "report"
                    else "every-unit"}
        return data

    @model_validator(mode="after")
    def _check_mode(self) -> "Rule":
        if self.mode != "report" and self.require == "report":
            raise ValueError(f"rule {self.name!r}: mode {self.mode} needs require: native, "
                             "compatible or ptx-jit")
        return self

    def matches(self, anchored: str) -> bool:
        """Does the rule match a path already cut at a package root (see ``anchors``)?"""
        return any(_pattern(glob).match(anchored) for glob in self.match)


class Policy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rules: list[Rule] = []
    default: Requirement = "report"

    def rule_of(self, path: str) -> Rule:
        """The first rule matching ``path``; the default (named ``-``) when none does."""
        path = path.lstrip("./")
        for anchored in reversed(anchors(path)):  # innermost site-packages first: its package
            for rule in self.rules:
                if rule.matches(anchored):
                    return rule
        return Rule(name="-", match=[], require=self.default)

    def rule_for(self, path: str) -> tuple[str, str]:
        """``(rule name, requirement)`` for a library path; ``("-", default)`` when none matches."""
        rule = self.rule_of(path)
        return rule.name, rule.require

    @property
    def expects_libraries(self) -> bool:
        """Does any rule gate something (so that a scan finding nothing is suspicious)?"""
        return any(rule.mode != "report" for rule in self.rules) or self.default != "report"


def load_policy(path: Path | str | None = None) -> Policy:
    path = Path(path) if path else DEFAULT_POLICY
    try:
        with open(path, "rb") as handle:  # bounded: /dev/zero is one line, not all memory
            data = load_yaml(handle.read(YAML_MAX_BYTES + 1), str(path), PolicyError)
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read the policy file ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise PolicyError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    except (UnicodeDecodeError, RecursionError):
        raise PolicyError(f"{path}: not a policy (not UTF-8, or nested too deeply)") from None
    policy = parse_model(Policy, data or {}, str(path), PolicyError)
    if not policy.expects_libraries:  # a gate that gates nothing would pass anything
        raise PolicyError(f"{path}: no rule gates anything (every rule and the default are "
                          "'report'); give a rule a mode every-unit or coverage")
    return policy
