"""Which libraries must run natively (or compatibly) on the target: a data file, not code.

The default policy is ``policy.yaml`` beside this module; ``--policy FILE`` replaces it.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict

from edgevllm.kernel.errors import PolicyError
from edgevllm.kernel.schema import parse_model

Requirement = Literal["native", "compatible", "ptx-jit", "report"]
DEFAULT_POLICY = Path(__file__).with_name("policy.yaml")


class Rule(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    match: list[str]
    require: Requirement


class Policy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rules: list[Rule] = []
    default: Requirement = "report"

    def rule_for(self, path: str) -> tuple[str, str]:
        """``(rule name, requirement)`` for a library path; ``("-", default)`` when none matches."""
        path = path.lstrip("./")
        for rule in self.rules:
            if any(fnmatch.fnmatchcase(path, pattern) for pattern in rule.match):
                return rule.name, rule.require
        return "-", self.default


def load_policy(path: Path | str | None = None) -> Policy:
    path = Path(path) if path else DEFAULT_POLICY
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read the policy file ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise PolicyError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    return parse_model(Policy, data or {}, str(path), PolicyError)
