"""The field grammars (edgevllm/common/grammar.py) and where they bite: a spec, a target file, a
lock and a flag each refuse a value that would add a line or a word to a Dockerfile, a shell line
or a label, with one line naming the field. Pure data; no Docker."""

from __future__ import annotations

import json
import math
import re

import pytest

from edgevllm.common import grammar
from edgevllm.common.errors import ConfigError, LockError, SpecError
from edgevllm.specs.buildspec import lock_overrides, spec_from_dict
from edgevllm.specs.lock import Lock, parse_lock

GOOD_BAD = {
    grammar.EnvName: (["A", "_X1", "TORCH_CUDA_ARCH_LIST"],
                      ["1A", "A-B", "A\nRUN touch owned", "A B", "", "A=B", "É"]),
    grammar.AptPackage: (["python3.12-venv", "g++", "libc6=2.39-0ubuntu8"],
                         ["g++ && touch owned", "Git", "-y", "a", "curl\nRUN id", "x;y"]),
    grammar.PackageName: (["flashinfer-python", "torch", "a", "nvidia_cutlass.dsl"],
                          ["-e", "x y", "torch==2", "a\n", ".a", "a-"]),
    grammar.PythonCommand: (["python3", "python3.12", "/usr/bin/python3"],
                            ["python3 -c 'import os'", "py;id", "$(id)", "py\n"]),
    grammar.ImageRef: ([
        "ubuntu", "docker.io/library/ubuntu:24.04",
        "nvcr.io/nvidia/cuda:13.0.2-devel-ubuntu24.04", "localhost:5000/a/b@sha256:" + "0" * 64,
        "reg.example.com/x/y:tag@sha256:" + "a" * 64],
        ["Ubuntu", "ubuntu:24.04 AS x", "ubuntu\nRUN id", "a:b:c", ":tag", "a@sha256:12",
         "a/-b", "ubuntu:" + "t" * 129]),
    grammar.Version: (["2.14.0", "0.7.2.post1", "2.14.0+cu130", "1.0rc1"],
                      ["latest", "2.14.0 --index-url x", "2.14.0\n", " 2.1", "1..2"]),
    grammar.PackagePin: (["1.2.3", "==1.2.3"], [">=1.0", "1.0; rm", "=="]),
    grammar.IndexUrl: (["https://download.pytorch.org/whl/cu130", "file:///wheels"],
                       ["https://x y", "https://x;id", "ftp://x", "https://x/$(id)", "x"]),
    grammar.Platform: (["linux/arm64", "linux/amd64", "linux/arm/v7"],
                       ["linux", "linux/arm64 --x", "Linux/ARM64", "linux/arm64\n", "a/b/c/d"]),
    grammar.CudaArch: (["11.0a", "12.1a", "12.0f", "8.9"], ["sm_110a", "11", "11.0a;12.1a"]),
    grammar.ArchList: (["12.1a", "11.0a;12.1a", "8.9 9.0+PTX"],
                       ["12.1a;", "12.1a\"; id", "all", "12.1a\n", ""]),
    grammar.LabelText: (["NVIDIA Jetson AGX Thor (JetPack 7), sm_110a", ""],
                        ['x" LABEL y="z', "a\nb", "$HOME", "a\\", "a`id`", "a\x00"]),
    grammar.ContainerPath: (["/root/.cache/vllm"], ["relative", "/a:/b", "/a b", "/a,b", "/a\n"]),
    grammar.Requirement: (["certifi>=2026.10.18", "torch==2.14.0"], ["not a req!", "x>=1\n"]),
    grammar.ImageTagOrRef: (["latest", "reg/name:tag"], ["a b", "x;y", "-x", "a\n"]),
    grammar.PortMapping: (["8000:8000", "127.0.0.1:8000:8000/tcp", "8000", "7000-7002:7000-7002"],
                          ["99999999:1", "0:80", "80 -v /:/h", "a:b", "8000:8000\n"]),
}


@pytest.mark.parametrize("kind", list(GOOD_BAD), ids=lambda k: str(k)[:40])
def test_each_grammar_takes_its_good_values_and_refuses_the_rest(kind):
    good, bad = GOOD_BAD[kind]
    for value in good:
        assert grammar.check(kind, value, "f") == value
    for value in bad:
        with pytest.raises(ConfigError, match=r"^f: ") as caught:
            grammar.check(kind, value, "f")
        assert "\n" not in str(caught.value)


def test_a_number_is_not_text():
    """YAML reads 13.0 as a float: a grammar string must be written as text."""
    with pytest.raises(ConfigError, match="must be text"):
        grammar.check(grammar.CudaVersion, 13.0, "cuda_version")


@pytest.mark.parametrize("raw", ["abc", "1.5", "", "99999999", "0", "-1", "1e3", "٣"])
def test_ports_are_whole_numbers_from_1_to_65535(raw):
    with pytest.raises(ConfigError, match="--port"):
        grammar.flag_port(raw, "--port")


def test_good_ports_and_ints():
    assert grammar.flag_port("8000", "--port") == 8000
    assert grammar.flag_port(65535, "--port") == 65535
    assert grammar.flag_int("-1", "--threads", low=-1) == -1


@pytest.mark.parametrize("raw", ["nan", "inf", "-inf", "0", "-3", "x", "", "1e999"])
def test_positive_floats_are_finite(raw):
    with pytest.raises(ConfigError, match="--gpu-memory-gb"):
        grammar.flag_float(raw, "--gpu-memory-gb")


def test_good_floats():
    assert grammar.flag_float("40", "--gpu-memory-gb") == 40.0
    assert grammar.flag_float("0", "--wait", positive=False) == 0.0
    assert math.isfinite(grammar.flag_float("1e3", "--x"))


@pytest.mark.parametrize(("field", "value", "needle"), [
    ("env", {"A\nRUN touch /owned": "1"}, "env"),
    ("env", {"A": "x\nRUN id"}, "env.A"),
    ("build_args", {"A B": "1"}, "build_args"),
    ("apt_packages", ["git && curl evil"], "apt_packages.0"),
    ("python", "python3 -c x", "python"),
    ("platform", "linux/arm64\nRUN id", "platform"),
    ("base_image", "ubuntu AS x", "base_image"),
    ("packages", {"torch; id": "1"}, "packages"),
    ("packages", {"torch": "2.0 --pre"}, "packages.torch"),
    ("tags", ["a b"], "tags.0"),
    ("overrides", ["not a requirement!"], "overrides.0"),
    ("torch", {"version": "2.14.0 --index-url http://evil"}, "torch.version"),
    ("torch", {"index_url": "http://x/$(id)"}, "torch.index_url"),
    ("images", {"build": "ubuntu\nRUN id", "runtime": "ubuntu"}, "images.build"),
    ("target", "thor\nx", "target"),
    ("max_jobs", 10**9, "max_jobs"),
])
def test_a_spec_refuses_fields_outside_their_grammar(field, value, needle):
    with pytest.raises(SpecError) as caught:
        spec_from_dict({"target": "thor", field: value})
    assert f"field '{needle}" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_target_file_refuses_a_newline_in_an_env_name(tmp_path, monkeypatch):
    from edgevllm.common.errors import UnknownTargetError
    from edgevllm.specs.targets import load_target, target_files

    text = target_files()["thor"].read_text()
    text = text.replace("  VLLM_TARGET_DEVICE: cuda", '  "X\\nRUN touch /owned": "1"')
    (tmp_path / "thor.yaml").write_text(text)
    monkeypatch.setenv("EDGEVLLM_TARGETS_PATH", str(tmp_path))
    with pytest.raises(UnknownTargetError, match=r"field 'runtime_env"):
        load_target("thor")


def _lock_json(**fields) -> str:
    return json.dumps({"target": "spark", **fields})


@pytest.mark.parametrize(("fields", "needle"), [
    ({"schema_version": "1"}, "schema_version"),
    ({"schema_version": 0}, "schema_version"),
    ({"build_args": {"A\nB": "1"}}, "build_args"),
    ({"packages": {"torch": "2.0\nRUN id"}}, "packages.torch"),
    ({"base_images": {"build": {"ref": "x\ny"}}}, "base_images.build.ref"),
    ({"base_images": {"build": {"ref": "ubuntu", "digest": "sha256:12"}}}, "digest"),
    ({"target": "spark; id"}, "target"),
    ({"mods": [{"name": "a b", "version": "1"}]}, "mods.0.name"),
])
def test_a_lock_refuses_fields_outside_their_grammar(fields, needle):
    with pytest.raises(LockError) as caught:
        parse_lock(_lock_json(**fields), "x.lock")
    assert needle in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_lock_made_for_spark_is_refused_for_thor():
    lock = Lock(target="spark")
    with pytest.raises(ConfigError, match=r"--target thor differs from the target .*\(spark\)"):
        lock_overrides(lock, "thor")


@pytest.mark.parametrize("url", [
    "redis://cache.lan:6379", "redis://:s3cret@10.0.0.2:6379/1", "rediss://user:pw@cache.lan",
    "http://cache.lan:8080/ccache", "https://u:p@cache.example/ccache|connect-timeout=500",
    "redis://[::1]:6379",
])
def test_compile_cache_urls_ccache_speaks(url):
    assert grammar.check(grammar.CompileCacheUrl, url, "compile_cache") == url


@pytest.mark.parametrize("url", [
    "ccache-spark", "file:///srv/ccache", "ftp://h/x", "redis://h:6379 ; rm -rf /",
    "redis://h\n", "http://h/$(id)", "redis://u:pa ss@h", "s3://bucket",
])
def test_compile_cache_refuses_other_urls_without_quoting_them(url):
    with pytest.raises(ConfigError) as err:
        grammar.check(grammar.CompileCacheUrl, url, "compile_cache")
    text = str(err.value)
    assert text.startswith("compile_cache: is not a compile cache URL") and "redis://" in text
    assert "pa ss" not in text and "$(id)" not in text


# Python's ``$`` also matches before a final newline, so ``^…$`` with ``match`` lets "value\n"
# through to a Dockerfile, a shell line or a tag; every grammar ends with ``\Z`` (or fullmatch).
_DOLLAR_GRAMMAR = re.compile(r"re\.compile\(r\"\^[^\n]*\$\"(?![^\n]*re\.M)")


def test_no_grammar_in_the_package_ends_with_a_dollar():
    from pathlib import Path

    package = Path(__file__).resolve().parent.parent / "edgevllm"
    offenders = [f"{path.relative_to(package.parent)}:{number}"
                 for path in sorted(package.rglob("*.py"))
                 for number, line in enumerate(path.read_text().splitlines(), 1)
                 if _DOLLAR_GRAMMAR.search(line)]
    assert offenders == [], f"end these patterns with \\Z, not $: {offenders}"


def test_a_trailing_newline_is_not_part_of_any_grammar():
    from edgevllm.containers.enginespec import check_engine_spec
    from edgevllm.inspect.attach import attachment_tag
    from edgevllm.specs.refs import is_full_sha

    sha = "0123456789abcdef" * 2 + "01234567"
    assert is_full_sha(sha) and not is_full_sha(sha + "\n")
    assert attachment_tag("reg/repo", "sha256:" + "a" * 64).endswith(".att")
    with pytest.raises(ConfigError):
        attachment_tag("reg/repo", "sha256:" + "a" * 64 + "\n")
    check_engine_spec("ssh://user@node1")
    with pytest.raises(ConfigError):
        check_engine_spec("ssh://user@node1\n")


@pytest.mark.parametrize("spec", ["ssh://-oProxyCommand=x", "ssh://-l@node", "ssh://root@node:0",
                                  "ssh://root@node:65536", "ssh://root@node:99999999999"])
def test_an_ssh_engine_is_no_ssh_option_and_no_impossible_port(spec):
    from edgevllm.containers.enginespec import check_engine_spec

    with pytest.raises(ConfigError):
        check_engine_spec(spec)
    check_engine_spec("ssh://root@node-1:2222")
