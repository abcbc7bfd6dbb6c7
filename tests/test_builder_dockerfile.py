"""The compile key hashes the stages the wheels target needs, read from the Dockerfile's FROM and
--from= references (no comment banner decides where the compile ends)."""

from __future__ import annotations

import pytest

from edgevllm.builder.dockerfile import needs, stage_text, stages
from edgevllm.builder.runner import compile_key

TEXT = """# syntax=docker/dockerfile:1
FROM debian AS base
RUN echo base
FROM base AS build
RUN --mount=type=bind,from=vllm-src,target=/src echo build
FROM base AS fi-build
RUN echo fi
FROM scratch AS wheels
COPY --from=build /wheels/ /
COPY --from=fi-build /wheels/ /
FROM base AS runtime
RUN --mount=type=bind,from=wheels,target=/w echo runtime
"""


def test_stages_and_what_wheels_needs():
    assert list(stages(TEXT)) == ["base", "build", "fi-build", "wheels", "runtime"]
    assert needs(TEXT, "wheels") == ["base", "build", "fi-build", "wheels"]
    assert needs(TEXT, "runtime") == ["base", "build", "fi-build", "wheels", "runtime"]
    with pytest.raises(KeyError):
        needs(TEXT, "nope")


def test_a_runtime_change_keeps_the_compile_key_and_a_build_change_moves_it():
    key = compile_key(TEXT, {"vllm": "t1"}, {"A": "1"})
    assert (
        compile_key(TEXT.replace("echo runtime", "echo other"), {"vllm": "t1"}, {"A": "1"}) == key
    )
    assert compile_key(TEXT.replace("echo build", "echo b2"), {"vllm": "t1"}, {"A": "1"}) != key
    assert (
        compile_key(TEXT.replace("# syntax", "##### runtime\n# syntax"), {"vllm": "t1"}, {"A": "1"})
        == key
    )  # a banner comment is not a stage boundary
    assert "echo runtime" not in stage_text(TEXT, "wheels")
