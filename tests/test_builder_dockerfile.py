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


def test_compile_key_counts_a_base_digest_once_whether_the_text_names_it_or_not():
    """The first build renders ``FROM ref``, a lock rebuild ``FROM ref@digest``: one key, so the
    rebuild finds the wheels the first build compiled; another digest is another key."""
    from edgevllm.specs.lock import BaseImageLock

    digest, other = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    text = "FROM --platform=$BUILDPLATFORM reg.example/cuda:13.0 AS base\nRUN echo build\n" \
           "FROM base AS wheels\n"
    pinned = text.replace("cuda:13.0 AS", f"cuda:13.0@{digest} AS")
    bases = {"build": BaseImageLock(ref="reg.example/cuda:13.0", digest=digest)}
    key = compile_key(text, {"vllm": "t1"}, {}, bases)
    assert compile_key(pinned, {"vllm": "t1"}, {}, bases) == key
    moved = {"build": BaseImageLock(ref="reg.example/cuda:13.0", digest=other)}
    assert compile_key(text, {"vllm": "t1"}, {}, moved) != key
    # a local-only base (no digest) keeps the key it always had
    local = {"build": BaseImageLock(ref="reg.example/cuda:13.0", digest=None)}
    assert compile_key(text, {"vllm": "t1"}, {}, local) == compile_key(text, {"vllm": "t1"}, {})
