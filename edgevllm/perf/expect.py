"""Expected figures a recipe carries (``expect:``), and whether a benchmark record met them.

A recipe's ``expect`` entry, e.g. the Spark Nemotron-3-Nano W4A16 figure from the seeds::

    expect:
      - {target: spark, concurrency: 1, metric: tok_s_stream, at_least: 74.75,
         source: "Spark b12x blog: 74.75 tok/s single-stream"}

``metric`` is a figure of ``edgevllm.perf.metrics`` (``tok_s_stream``, ``tok_s_total``,
``ttft_ms``, ``itl_ms``, ...); ``at_least`` or ``at_most`` bounds the point's median. An entry
for another target is not judged; a point that was not measured is ``not measured``.
"""

from __future__ import annotations

from pydantic import Field, ValidationError, model_validator

from edgevllm.common.errors import BenchError
from edgevllm.common.schema import Strict, describe_validation_error
from edgevllm.perf.metrics import SUMMARISED


class Expectation(Strict):
    metric: str
    concurrency: int = Field(default=1, ge=1)
    target: str | None = None
    input_len: int | None = None
    output_len: int | None = None
    at_least: float | None = None
    at_most: float | None = None
    source: str = ""

    @model_validator(mode="after")
    def _bounded(self) -> "Expectation":
        if self.metric not in SUMMARISED:
            raise ValueError(f"metric '{self.metric}' is not one of {', '.join(SUMMARISED)}")
        if (self.at_least is None) == (self.at_most is None):
            raise ValueError("give exactly one of at_least or at_most")
        return self


def parse_expectations(items: list[dict], where: str) -> list[Expectation]:
    out = []
    for index, item in enumerate(items or []):
        try:
            out.append(Expectation.model_validate(item))
        except ValidationError as exc:
            raise BenchError(f"{where}: expect[{index}]: "
                             f"{describe_validation_error(exc)}") from None
    return out


def _matches(exp: Expectation, point: dict) -> bool:
    return (point["concurrency"] == exp.concurrency
            and exp.input_len in (None, point["input_len"])
            and exp.output_len in (None, point["output_len"]))


def judge(expectations: list[Expectation], record: dict) -> list[dict]:
    """One verdict per expectation for the record's target: met, missed or not measured."""
    verdicts = []
    for exp in expectations:
        if exp.target and record.get("target") and exp.target != record["target"]:
            continue
        points = [p for p in record.get("points", []) if _matches(exp, p)]
        stats = next((p["summary"].get(exp.metric) for p in points
                      if p["summary"].get(exp.metric)), None)
        bound = exp.at_least if exp.at_least is not None else exp.at_most
        verdict = {"metric": exp.metric, "concurrency": exp.concurrency, "bound": bound,
                   "kind": "at_least" if exp.at_least is not None else "at_most",
                   "source": exp.source, "measured": stats and stats["median"]}
        if stats is None:
            verdict["status"] = "not measured"
        elif exp.at_least is not None:
            verdict["status"] = "met" if stats["median"] >= exp.at_least else "missed"
        else:
            verdict["status"] = "met" if stats["median"] <= exp.at_most else "missed"
        verdicts.append(verdict)
    return verdicts
