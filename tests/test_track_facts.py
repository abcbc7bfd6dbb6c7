"""track/facts.py's reading of an upstream tree's pins, with trees written here as upstream lays
them out (requirements/, CMakeLists.txt, cmake/external_projects/): every pin the report names,
read or said to be unpinned, the pins a refused tree cannot give, the exact versions the mods'
ranges are judged against; and upstream's files as others' data: a file too large, not UTF-8 or
a line that is no requirement is one of edgevllm's errors in one line, never a traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import pytest

from edgevllm.common.errors import EdgeVllmError
from edgevllm.track import facts


def tree(root: Path, files: Mapping[str, str | bytes]) -> Path:
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)
    return root


UPSTREAM = {
    "requirements/cuda.txt": "-r common.txt\ntorch==2.10.0\nflashinfer-python==0.6.11\n"
                             "# torch from https://download.pytorch.org/whl/cu130\n",
    "requirements/common.txt": "triton>=3.5\nnvidia-cutlass-dsl==4.4.2\nsix\n",
    "requirements/build/cuda.txt": "cmake>=3.26\ntorch==2.10.0\n",
    "CMakeLists.txt": 'set(CUTLASS_REVISION "v4.2.1" CACHE STRING "CUTLASS revision")\n',
    "cmake/external_projects/flashmla.cmake": 'set(FLASHMLA_TAG "0eee43b1")\n'
                                              "FetchContent_Declare(flashmla\n"
                                              "  GIT_TAG ${FLASHMLA_TAG})\n",
    "cmake/external_projects/deepgemm.cmake": "  GIT_TAG abc123\n",
}


def test_every_pin_the_report_names_is_read_or_said_unpinned(tmp_path):
    root = tree(tmp_path, UPSTREAM)
    found = facts.pins(root, facts.requirement_lines(root))
    assert set(found) == {label for label, _ in facts.PINS}
    assert found["torch"] == "2.10.0" and found["FlashInfer"] == "0.6.11"
    assert found["Triton"] == ">=3.5" and found["CuTe DSL"] == "4.4.2"
    assert found["CUTLASS"] == "v4.2.1" and found["FlashMLA"] == "0eee43b1"
    assert found["DeepGEMM"] == "abc123" and found["CUDA"] == "cu130"
    assert found["Triton kernels"] == found["flash-attention"] == facts.NOT_PINNED


def test_a_tree_whose_requirements_were_refused_says_so_for_their_pins(tmp_path):
    found = facts.pins(tree(tmp_path, UPSTREAM), None)
    assert found["torch"] == found["CuTe DSL"] == facts.REFUSED
    assert found["CUTLASS"] == "v4.2.1"  # CMake pins do not come from the refused files


def test_exact_versions_are_the_first_exact_pin_of_each_package():
    lines = ["torch==2.10.0", "Torch==2.9.0", "triton>=3.5", "six==1.*", "idna==3.10",
             "numpy==2.1,<3"]
    assert facts.exact_versions(lines) == {"torch": "2.10.0", "idna": "3.10"}
    assert facts.package_pin(lines, "six") == "1.*"
    assert facts.package_pin(lines, "absent") == facts.NOT_PINNED
    assert facts.package_pin(["nospec"], "nospec") == "any"


def _cmake(root: Path) -> str:
    return facts.cmake_pin(root, "CMakeLists.txt:CUTLASS_REVISION")


@pytest.mark.parametrize(("files", "read"), [
    ({"CMakeLists.txt": "# " + "x" * (facts.CMAKE_MAX_BYTES + 10)}, _cmake),
    ({"CMakeLists.txt": b'set(CUTLASS_REVISION "caf\xe9")\n'}, _cmake),
    ({"requirements/cuda.txt": b"\xff\xfe"}, facts.cuda_pin),
], ids=["cmake-too-large", "cmake-not-utf8", "requirements-not-utf8"])
def test_upstream_files_that_cannot_be_read_are_one_line(tmp_path, files, read):
    root = tree(tmp_path, files)
    with pytest.raises(EdgeVllmError) as info:
        read(root)
    assert "\n" not in str(info.value) and str(root) in str(info.value), str(info.value)


def test_a_line_that_is_no_requirement_is_one_line():
    with pytest.raises(EdgeVllmError) as info:
        facts.exact_versions(["torch==2.10.0", "this is ; not == a requirement"])
    assert "\n" not in str(info.value) and "requirement" in str(info.value)
