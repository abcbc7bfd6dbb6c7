"""Property-based tests (Hypothesis) of the requirement-line parser (common/requirements.py) and
the tree reader that feeds it (sources/buildreqs.read_requirement_tree). Seeds are real lines of
vLLM's CUDA requirement files (0.33.0) and hostile lines. Each mutated line is data or one line
of the entry's error; whatever is accepted holds no URL, no option and nothing uv would read as a
path: a name, extras, a version and a marker."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from packaging.requirements import Requirement

from edgevllm.common.errors import SourceError
from edgevllm.common.requirements import ARCHIVE_SUFFIXES, requirement
from edgevllm.sources.buildreqs import read_requirement_tree
from support.properties import PROPERTY, bounded, mutated

SEEDS = [
    "-r common.txt", "numba == 0.61.2", "ray[cgraph]>=2.48.0",
    "torch==2.14.0", "protobuf >= 5.29.6, !=6.30.*, !=6.31.*, !=6.33.0.*",
    "xformers==0.0.31; platform_system == 'Linux' and platform_machine == 'x86_64'",
    "evil @ file:///srv/evil", "evil @ git+https://example.org/e.git#egg=evil",
    "-e ./evil", "--extra-index-url https://example.org/simple", "evil.tar.gz",
]


def accepted_is_data(found: object) -> None:
    if isinstance(found, Requirement):
        assert found.url is None
        assert not found.name.lower().endswith(ARCHIVE_SUFFIXES)


@PROPERTY
@given(st.sampled_from(SEEDS).flatmap(lambda seed: mutated(seed.encode())))
def test_a_requirement_line_with_its_bytes_mutated(data):
    line = data.decode("utf-8", errors="replace")
    found = bounded(requirement, line, "fuzz.txt:1", SourceError)
    accepted_is_data(found)
    if isinstance(found, Requirement):
        text = line.strip()
        assert not text.startswith("-") and " -" not in text and "\n" not in text


@PROPERTY
@given(st.lists(st.sampled_from(SEEDS), min_size=1, max_size=6)
       .flatmap(lambda lines: mutated("\n".join(lines).encode())))
def test_a_tree_requirement_file_with_its_bytes_mutated(tmp_path_factory, data):
    tree = tmp_path_factory.mktemp("tree")
    (tree / "requirements").mkdir()
    (tree / "requirements" / "common.txt").write_text("requests >= 2.26.0\n")
    (tree / "requirements" / "cuda.txt").write_bytes(data)
    found = bounded(read_requirement_tree, Path(tree), "requirements/cuda.txt")
    if isinstance(found, list):
        for line, _ in found:
            accepted_is_data(Requirement(line))
