"""The preflight of ``inv build --vllm-pr N`` on a hostile PR, through the real CLI and engine:
the kernel plan evaluates the PR's CMake (in the sandbox, after the scanner) before any image is
built. A PR that defines ``_execute_process`` after calling it is refused by the scanner; a PR
whose CMake is the memory bomb is stopped at the sandbox's memory limit. Each is one ``error:``
line with exit 5, no canary appears on the host, and no image is tagged.
"""

from __future__ import annotations

import pytest

from e2e.conftest import FIXTURE_TREE, hermetic_spec, write_spec
from support.gitfixtures import add_pr
from support.platforms import native_platform

pytestmark = pytest.mark.e2e

CMAKELISTS = (FIXTURE_TREE / "CMakeLists.txt").read_text()
BOMB = ('string(REPEAT "x" 100000000 A)\nstring(APPEND A "${A}")\nstring(APPEND A "${A}")\n'
        'string(APPEND A "${A}")\n')


@pytest.mark.parametrize("number, hostile, words", [
    (331, "_execute_process(COMMAND touch {canary})\nfunction(_execute_process)\nendfunction()\n",
     "the tree redefines '_execute_process'"),
    (332, BOMB, "stopped at the memory limit (512 MiB of address space)"),
])
def test_a_hostile_pr_is_one_line_in_the_preflight(number, hostile, words, fake_upstream,
                                                   cuda_image_native, engine, tmp_path, cli):
    canary = tmp_path / "canary"
    text = hostile.format(canary=canary) if "{canary}" in hostile else hostile
    add_pr(fake_upstream, number, {"CMakeLists.txt": CMAKELISTS + text}, base="v0.1.0")
    repo = f"edgevllm-test/e2e-hostile-{number}"
    spec = hermetic_spec("spark", cuda_image_native, fake_upstream, platform=native_platform(),
                         mods=[], image_repo=repo)
    spec_file = write_spec(tmp_path / "spec.yaml", **spec)
    code, _, stderr = cli("build", "--spec", str(spec_file), "--vllm-pr", str(number),
                          "--out", str(tmp_path / "out"), timeout=900)
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert code == 5, stderr[-3000:]
    assert len(errors) == 1 and words in errors[0], stderr[-3000:]
    assert not canary.exists()
    assert not engine.images(repo)
