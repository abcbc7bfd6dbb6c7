"""tests/support/platforms.py: which platform a test takes, on an x86_64 host and on an arm64 one.

There is no arm64 host here: the host's architecture is faked by monkeypatching its one owner,
``edgevllm.containers.host.host_arch`` (a stand-in for the device, as the CI script tests fake
``uname``), and an empty or stand-in binfmt_misc folder stands in for the kernel's. What can be
read for real (this machine's `uname -m`, the engine's architecture) is checked against it too.
Then a scan of tests/ keeps the rule: a platform that means "this host's" comes from the helper,
never a hard-coded ``linux/amd64``.
"""

from __future__ import annotations

import ast
import platform
from pathlib import Path

import pytest

from edgevllm.common.errors import BinfmtMissingError
from edgevllm.containers import host
from support import platforms

TESTS = Path(__file__).resolve().parent

HOSTS = {
    # host arch: (native platform, foreign platform, machine, qemu handler for the foreign one)
    "amd64": ("linux/amd64", "linux/arm64", "x86_64", "qemu-aarch64"),
    "arm64": ("linux/arm64", "linux/amd64", "aarch64", "qemu-x86_64"),
}


def fake_host(monkeypatch, arch: str, binfmt: Path) -> None:
    monkeypatch.setattr(host, "host_arch", lambda: arch)
    monkeypatch.setattr(host, "BINFMT_DIR", binfmt)


@pytest.mark.parametrize("arch", sorted(HOSTS))
def test_native_and_foreign_for_both_hosts(arch, monkeypatch, tmp_path):
    native, foreign, machine, _ = HOSTS[arch]
    fake_host(monkeypatch, arch, tmp_path)
    assert platforms.native_arch() == arch and platforms.native_platform() == native
    assert platforms.foreign_platform() == foreign
    assert platforms.foreign_arch() == foreign.split("/")[1] != arch
    assert platforms.machine(arch) == machine
    assert platforms.python_platform(arch) == f"{machine}-manylinux_2_34"
    assert platforms.multiarch_libdir(arch) == f"/usr/lib/{machine}-linux-gnu"
    assert platforms.native_wheel_tags("2014", "2_28") == [f"manylinux2014_{machine}",
                                                           f"manylinux_2_28_{machine}"]
    assert platforms.how_built(native) == "native"
    assert platforms.how_built(foreign) == "emulated"


@pytest.mark.parametrize("arch", sorted(HOSTS))
def test_the_foreign_platform_needs_its_qemu_and_the_native_one_nothing(arch, monkeypatch,
                                                                         tmp_path):
    """An arm64 host runs linux/amd64 under qemu-x86_64 (which .ci/install-engine.sh registers
    there), an x86_64 host linux/arm64 under qemu-aarch64; the test fails naming the handler."""
    _, _, _, handler = HOSTS[arch]
    fake_host(monkeypatch, arch, tmp_path)
    platforms.require_runnable(platforms.native_arch())   # no binfmt folder needed natively
    with pytest.raises(pytest.fail.Exception, match=f"update-binfmts --enable {handler}"):
        platforms.require_runnable(platforms.foreign_arch())
    (tmp_path / handler).write_text(f"enabled\ninterpreter /usr/libexec/{handler}\n")
    platforms.require_runnable(platforms.foreign_arch())
    (tmp_path / handler).write_text("disabled\n")   # the handler the product itself checks
    with pytest.raises(BinfmtMissingError):
        host.check_emulation(platforms.foreign_platform())


def test_a_host_the_suite_has_no_images_for_is_one_message(monkeypatch):
    monkeypatch.setattr(host, "host_arch", lambda: "riscv64")
    with pytest.raises(platforms.UnsupportedHost, match="this host is 'riscv64'.*x86_64 or arm64"):
        platforms.foreign_platform()


def test_native_is_this_machine():
    """Unfaked: the helper's native machine is what this machine's kernel says it is."""
    assert platforms.machine(platforms.native_arch()) == platform.machine()


def test_native_is_the_engines_architecture(engine):
    """The native base images really run without emulation: the engine's own architecture."""
    assert engine.server_arch() == platforms.native_arch()


# -- the rule: "this host's platform" comes from support/platforms.py ------------------------------
# Files whose linux/amd64 is data (a platform named as an input, whatever the host), never "this
# host's platform"; anything else takes its platform from support/platforms.py.
ALLOWED = {
    "support/platforms.py": "the owner of the mapping",
    "test_support_platforms.py": "the faked hosts above",
    "test_common_grammar.py": "the Platform grammar's examples",
    "test_sources_wheels.py": "the platform → wheel tag mapping",
    "test_containers_docker.py": "emulation checks under a faked host",
    "test_ci_scripts.py": "test-needs.sh under a faked uname",
    "test_builder_compile.py": "a closure resolved with uv for a named platform (any host)",
    "test_builder_precompiled.py": "a build spec's platform as input, nothing built",
    "test_specs_cross.py": "the cross roads' platforms are data (amd64 -> arm64 on any host)",
    "test_builder_cross.py": "the amd64 -> arm64 road by name, rendered and staged on any host",
    "e2e/test_cross_toolchain_e2e.py": "the amd64 -> arm64 road's toolchain, by name",
    "test_specs_buildspec.py": "a named builder (Builder(arch=...)) and platform as inputs",
    "test_cli_badinput.py": "a platform flag as input, refused before anything is built",
    "support/cross_units.py": "the cross road's builder (linux/amd64 builds for linux/arm64)",
}
# The base image helpers: an arch passed to them as a literal is "amd64 whatever the host".
IMAGE_HELPERS = {"python_image", "cuda_image", "ccache_image", "trixie_python_image"}


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def hard_coded(source: str) -> list[tuple[int, str]]:
    """(line, what) for each ``linux/amd64`` in code (not a comment or docstring) and each base
    image helper called with a literal ``"amd64"``."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and "linux/amd64" in node.value and id(node) not in docstrings):
            found.append((node.lineno, "'linux/amd64'"))
        if isinstance(node, ast.Call):
            name = getattr(node.func, "id", getattr(node.func, "attr", ""))
            if name in IMAGE_HELPERS and any(isinstance(a, ast.Constant) and a.value == "amd64"
                                             for a in node.args):
                found.append((node.lineno, f"{name}(..., 'amd64')"))
    return found


def test_the_scan_finds_what_it_looks_for():
    sample = ('"""linux/amd64 in a docstring is prose."""\n'
              "# linux/amd64 in a comment too\n"
              'spec = {"platform": "linux/amd64"}\n'
              'base = python_image(engine, "amd64")\n'
              'other = python_image(engine, native_arch())\n'
              'line = f"{tag} linux/amd64 native"\n')
    assert sorted(hard_coded(sample)) == [(3, "'linux/amd64'"), (4, "python_image(..., 'amd64')"),
                                          (6, "'linux/amd64'")]


def test_no_test_hard_codes_the_host_platform():
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        relative = path.relative_to(TESTS).as_posix()
        if relative in ALLOWED or "/fixtures/" in f"/{relative}":
            continue
        found += [f"tests/{relative}:{line}: {what}"
                  for line, what in hard_coded(path.read_text())]
    assert not found, (
        "these hard-code linux/amd64 where the suite runs on arm64 hosts too: take the platform "
        "from tests/support/platforms.py (native_platform(), foreign_platform(), native_arch()) "
        "or, where linux/amd64 is data whatever the host, add the file to ALLOWED with why:\n"
        + "\n".join(found))
    assert all((TESTS / name).is_file() for name in ALLOWED), "ALLOWED names a file that is gone"
