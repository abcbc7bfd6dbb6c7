"""An eugr recipe's ``build_args`` as build spec fields (``serve/recipe/buildargs.py``): the flags
that name what is built carried (refs, forks, PRs, FlashInfer from source), the script's own flags
as notes, and bad input as one line naming the field: a ref or PR that is none, quoting that does
not close, and a fork that is not a network git URL (a local path, an option such as ``-o...``,
git's ``ext::`` transport: a recipe is someone else's data, and the spec took any line)."""

from __future__ import annotations

import pytest

from edgevllm.common.errors import RecipeError
from edgevllm.serve.recipe.buildargs import build_fields
from edgevllm.specs.buildspec import load_spec
from edgevllm.specs.refs import UPSTREAM_REPOS


def fields(*args: object) -> tuple[dict, list[str]]:
    notes: list[str] = []
    return build_fields(list(args), "r.yaml", notes), notes


def refused(*args: object) -> str:
    with pytest.raises(RecipeError) as caught:
        build_fields(list(args), "r.yaml", [])
    text = str(caught.value)
    assert text.startswith("r.yaml: field 'build_args': ") and "\n" not in text
    return text


# -- carried ---------------------------------------------------------------------------------------
def test_a_base_ref_and_picks_in_either_spelling():
    found, notes = fields("--vllm-ref v0.11.0 --apply-vllm-pr 123", "--apply-vllm-pr=#456", 789)
    assert found == {"vllm": {"ref": "v0.11.0", "cherry_picks": ["123", "456"]}}
    assert any(n.startswith("build_args 789: a build-and-copy.sh flag") for n in notes)


def test_an_unquoted_pr_number_is_a_pick_after_its_flag():
    # YAML reads `- --apply-vllm-pr` / `- 40082` as a string and an int: eugr's shell sees text
    found, _ = fields("--apply-vllm-pr", 40082, "--vllm-ref", "main")
    assert found["vllm"] == {"cherry_picks": ["40082"], "ref": "main"}


def test_a_fork_without_a_ref_builds_its_main():
    found, notes = fields("--vllm-repo https://github.com/me/vllm.git")
    assert found == {"vllm": {"repo": "https://github.com/me/vllm.git", "ref": "main"}}
    assert notes == ["build_args: vLLM at main of https://github.com/me/vllm.git (inv build "
                     "--recipe applies the picks and pins them in the lock)"]


@pytest.mark.parametrize("repo", ["https://github.com/me/vllm", "http://gitlab.lan/me/vllm.git",
                                  "ssh://git@git.lan:2222/me/vllm", "git@github.com:me/vllm.git",
                                  "git://git.lan/vllm"])
def test_network_git_urls_are_forks(repo):
    assert fields("--vllm-repo", repo)[0]["vllm"]["repo"] == repo


def test_picks_without_a_ref_go_onto_the_pinned_release_and_say_so():
    found, notes = fields("--apply-vllm-pr https://github.com/vllm-project/vllm/pull/40082")
    assert found == {"vllm": {"cherry_picks": ["https://github.com/vllm-project/vllm/pull/40082"]}}
    assert "applied onto edgevllm's pinned vLLM release" in notes[0]
    assert "at the pinned release + PR(s)" in notes[1]


def test_flashinfer_flags_build_flashinfer_from_source_upstream_by_default():
    found, notes = fields("--apply-flashinfer-pr 77")
    assert found == {"flashinfer": {"source": {"cherry_picks": ["77"], "ref": "main",
                                               "repo": UPSTREAM_REPOS["flashinfer"]}}}
    assert notes[-1].startswith("build_args: FlashInfer built from source, at main")


def test_the_carried_fields_are_a_spec_the_build_takes():
    found, _ = fields("--vllm-ref v0.11.0 --apply-vllm-pr 123 --flashinfer-ref v0.5.2",
                      "--vllm-repo https://github.com/me/vllm")
    spec = load_spec("spark", overrides={"mode": "compile", **found})
    assert (spec.vllm.repo, spec.vllm.ref, spec.vllm.cherry_picks) == (
        "https://github.com/me/vllm", "v0.11.0", ["123"])
    assert spec.flashinfer.source is not None and spec.flashinfer.source.ref == "v0.5.2"


# -- notes -----------------------------------------------------------------------------------------
def test_script_flags_are_notes_and_eat_their_value():
    found, notes = fields("-t mytag -j 8 --gpu-arch 12.1a --exp-mxfp4 --rebuild-deps")
    assert found == {}
    assert notes[0] == ("build_args -t mytag: a build-and-copy.sh setting; edgevllm takes it "
                        "from the target (inv build --help)")
    assert notes[1].startswith("build_args -j 8:") and notes[2].startswith("build_args --gpu-arch")
    assert "eugr's own Dockerfile" in notes[3]
    assert notes[4].startswith("build_args --rebuild-deps: a build-and-copy.sh flag with no")
    assert len(notes) == 5  # 'mytag', '8' and '12.1a' were values, not flags


def test_no_build_args_is_nothing_to_carry():
    assert build_fields(None, "r.yaml", []) == {}
    assert fields() == ({}, [])


# -- refused ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("repo", [
    "ext::sh -c touch% /tmp/pwned",  # git's command transport
    "ext::sh%20-c%20id",
    "-oProxyCommand=touch /tmp/x",   # an option where git takes a URL
    "--upload-pack=touch",
    "/srv/vllm", "../vllm", "file:///etc",  # a path on the builder
    "https://github.com/me/vllm dropped",
])
def test_a_fork_that_is_no_network_git_url_is_one_line(repo):
    text = refused(f"--vllm-repo '{repo}'")  # one item, quoted as eugr's shell would take it
    assert "--vllm-repo" in text and "is not a git repository" in text


@pytest.mark.parametrize("args, said", [
    (["--vllm-ref"], "--vllm-ref '' is not a git ref"),
    (['--vllm-ref "a b"'], "--vllm-ref 'a b' is not a git ref"),
    (["--vllm-ref", "-x"], "--vllm-ref '-x' is not a git ref"),
    (["--vllm-ref --apply-vllm-pr 5"], "--vllm-ref '--apply-vllm-pr' is not a git ref"),
    (["--apply-vllm-pr abc"], "--apply-vllm-pr 'abc' is not a PR number or PR URL"),
    (["--apply-flashinfer-pr"], "--apply-flashinfer-pr '' is not a PR number or PR URL"),
    (['--vllm-ref "unterminated'], "cannot split it (No closing quotation); fix the quoting"),
])
def test_a_flag_without_a_usable_value_is_one_line(args, said):
    assert said in refused(*args)


@pytest.mark.parametrize("value", ["--vllm-ref main", {"a": 1}, [True], [1.5], [["x"]]])
def test_build_args_that_are_no_list_of_flags_are_one_line(value):
    with pytest.raises(RecipeError, match=r"r\.yaml: field 'build_args': expected a list of flags"):
        build_fields(value, "r.yaml", [])
