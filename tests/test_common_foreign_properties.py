"""Hypothesis searches the one check for names from others (``common/foreign.py``): dependency
names that would become folders, relative paths with links out, repository URLs and refs built
from the pieces attacks use. Whatever is accepted stays inside its folder, is fetched from
another machine, and is read by git as a ref; everything else is one line of the caller's error.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

from hypothesis import given
from hypothesis import strategies as st

from edgevllm.common.errors import SourceError
from edgevllm.common.foreign import (
    REMOTE_SCHEMES,
    git_ref,
    path_inside,
    plain_name,
    remote_repository,
)
from support.properties import PROPERTY, bounded

NAME_PIECES = ["cutlass", "vllm-flash-attn", "a", "_", ".", "..", "/", "~", "-", "$HOME", "\\",
               "\n", "\x00", "\x1b[2J", " ", "é", "%2e%2e", ":", "x" * 200]


def names():
    """What a tree's FetchContent_Declare may name a dependency."""
    return st.lists(st.sampled_from(NAME_PIECES), min_size=1, max_size=6).map("".join) \
        | st.text(max_size=40)


def relative_paths():
    """Paths from others: pieces that climb, start at the root, or walk through a link out."""
    pieces = ["a", "b", "..", ".", "", "out", "in", "/", "//", "\\", "~", "\n", "out/..", "a/./b"]
    return st.lists(st.sampled_from(pieces), min_size=1, max_size=6).map("/".join)


SCHEMES = ["https://", "http://", "ssh://", "git://", "file://", "ftp://", "", "ext::", "fd::",
           "-", "/", "./", "../", "~/", "HTTPS://", "git+ssh://"]
USERS = ["", "git@", "u:p@", "-o@", "@"]
HOSTS = ["github.com", "127.0.0.1", "[::1]", "-oProxyCommand=touch", "", "h", "a b", "x\n"]
PORTS = ["", ":22", ":0", ":99999", ":x"]
PATHS = ["/NVIDIA/cutlass.git", ":owner/repo.git", "", "/", "/../../etc", ":-u", " --upload-pack"]


@st.composite
def repositories(draw):
    """A repository as a tree could spell it in GIT_REPOSITORY, hostile pieces included."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.text(max_size=30))
    return "".join(draw(st.sampled_from(part)) for part in (SCHEMES, USERS, HOSTS, PORTS, PATHS))


def refs():
    pieces = ["v4.7.1", "main", "-", "--upload-pack=x", "..", "/", "refs/tags/x", "@{1}", "~1",
              "^", ":", " ", "*", "a" * 40, ".lock", "\n", "."]
    return st.lists(st.sampled_from(pieces), min_size=1, max_size=4).map("".join)


@PROPERTY
@given(name=names())
def test_a_dependency_name_is_one_folder_inside_its_parent_or_one_line(tmp_path_factory, name):
    base = tmp_path_factory.mktemp("deps")
    result = bounded(_plain, name)
    if isinstance(result, SourceError):
        return
    assert result not in (".", "..") and "/" not in result and "\\" not in result
    folder = path_inside(base, result, what="dep", error=SourceError)
    assert folder.parent == base and os.path.realpath(folder).startswith(str(base.resolve()))


def _plain(name: str):
    return plain_name(name, what="dep", error=SourceError)


def _inside(base: Path, value: str):
    return path_inside(base, value, what="mod file", error=SourceError)


@PROPERTY
@given(value=relative_paths())
def test_a_relative_path_from_others_stays_inside_its_folder(tmp_path_factory, value):
    root = tmp_path_factory.mktemp("folder")
    base = root / "base"
    (base / "a" / "b").mkdir(parents=True)
    (root / "elsewhere").mkdir()
    os.symlink(root / "elsewhere", base / "out")   # a link in the folder pointing out of it
    os.symlink(base / "a", base / "in")             # a link that stays inside
    result = bounded(_inside, base, value)
    if isinstance(result, SourceError):
        return
    real = Path(os.path.realpath(result))
    assert real == base.resolve() or base.resolve() in real.parents, (value, real)


def _remote(value: str):
    return remote_repository(value, what="dep", error=SourceError)


@PROPERTY
@given(url=repositories())
def test_a_repository_from_others_is_remote_or_one_line(url):
    result = bounded(_remote, url)
    if isinstance(result, SourceError):
        return
    assert not result.startswith("-") and not any(c.isspace() for c in result)
    assert "::" not in result.split("/", 1)[0]
    if "://" in result:
        parts = urlsplit(result)
        assert parts.scheme.lower() in REMOTE_SCHEMES and parts.hostname
        assert not parts.hostname.startswith("-")
    else:  # git's scp form: a host before the first colon, no slash before it
        host = result.split(":", 1)[0].rpartition("@")[2]
        assert host and "/" not in host and not host.startswith("-")


def _ref(value: str):
    return git_ref(value, what="GIT_TAG", error=SourceError)


@PROPERTY
@given(ref=refs())
def test_a_ref_from_others_is_one_git_reads_as_a_ref(ref):
    result = bounded(_ref, ref)
    if isinstance(result, SourceError):
        return
    assert not result.startswith("-")
    name = result if result.startswith("refs/") else f"refs/tags/{result}"
    check = subprocess.run(["git", "check-ref-format", name], capture_output=True)
    assert check.returncode == 0, result


def test_the_known_cases():
    for good in ("https://github.com/NVIDIA/cutlass.git", "git://127.0.0.1:9418/x.git",
                 "ssh://git@host.example/x", "git@github.com:owner/repo.git"):
        assert _remote(good) == good
    for bad in ("file:///root/repo", "/home/me/repo", "../x", "ext::sh -c touch% x", "fd::3",
                "-oProxyCommand=x", "ssh://-oProxyCommand=x/y", "https://h:99999/x"):
        assert isinstance(bounded(_remote, bad), SourceError), bad
    for bad in ("../../x", "..", ".", "a/b", "/etc", "", "-x"):
        assert isinstance(bounded(_plain, bad), SourceError), bad
    assert _plain("vllm-flash-attn") == "vllm-flash-attn"
    for bad in ("--upload-pack=touch x", "a..b", "x.lock", "refs/../x"):
        assert isinstance(bounded(_ref, bad), SourceError), bad
