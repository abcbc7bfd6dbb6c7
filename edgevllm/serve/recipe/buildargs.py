"""An eugr recipe's ``build_args`` (flags for its ``build-and-copy.sh``) as build spec fields.

eugr pins the vLLM its image needs in these flags: ``--vllm-ref REF`` (the base), ``--vllm-repo
URL`` (a fork), ``--apply-vllm-pr N`` (a PR applied onto the base, repeatable), and the same for
FlashInfer (``--flashinfer-ref``, ``--apply-flashinfer-pr``). They become the build spec's
``vllm`` / ``flashinfer.source`` fields, so ``inv build --recipe`` applies the picks through the
same cherry-pick engine as ``--cherry-pick`` (``sources.cherrypick``) and the lock pins each by
SHA. Flags that choose one of eugr's own Dockerfiles or prebuilt images (``--exp-mxfp4``,
``--exp-b12x``) or tune its script only are notes that say what edgevllm does instead.
"""

from __future__ import annotations

import re

from edgevllm.common.dataload import shell_words
from edgevllm.common.errors import RecipeError, RefSyntaxError
from edgevllm.common.escape import one_line
from edgevllm.specs.refs import UPSTREAM_REPOS, parse_pr_arg

# flag → (source, field): the flags that name what is built
_VALUE_FLAGS = {
    "--vllm-ref": ("vllm", "ref"),
    "--vllm-repo": ("vllm", "repo"),
    "--apply-vllm-pr": ("vllm", "cherry_picks"),
    "--flashinfer-ref": ("flashinfer", "ref"),
    "--apply-flashinfer-pr": ("flashinfer", "cherry_picks"),
}
# Flags of build-and-copy.sh that take a value but change nothing edgevllm builds from.
_SCRIPT_VALUE_FLAGS = {"-t", "--tag", "--gpu-arch", "-j", "--build-jobs", "-u", "--user",
                       "--network", "--config", "--torch-version", "--torchvision-version",
                       "--torchaudio-version", "-c", "--copy-to", "--copy-to-host"}
_FORK_FLAGS = {"--exp-mxfp4", "--experimental-mxfp4", "--exp-b12x", "--experimental-b12x"}
_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/+-]{0,199}\Z")
# A fork a recipe names: a URL git fetches over the network, never a local path, an option
# ("-o...") or another transport ("ext::..."): a recipe is someone else's data.
_REPO = re.compile(r"^(?:(?:https?|ssh|git)://[A-Za-z0-9._~/@%+:-]{1,300}"
                   r"|[A-Za-z0-9][A-Za-z0-9._-]*@[A-Za-z0-9.-]+:[A-Za-z0-9][A-Za-z0-9._/~-]*)\Z")


def build_fields(build_args: object, source: str, notes: list[str]) -> dict:
    """``build_args`` → ``{"vllm": {...}, "flashinfer": {"source": {...}}}`` (empty: nothing to
    carry); every flag not carried is a note."""
    if build_args is None:
        return {}
    # YAML reads an unquoted PR number as an int; eugr's shell gets its text either way.
    if not isinstance(build_args, list) or not all(
            isinstance(a, (str, int)) and not isinstance(a, bool) for a in build_args):
        raise RecipeError(f"{source}: field 'build_args': expected a list of flags")
    tokens = [token for item in build_args for token in _split(str(item), source)]
    fields: dict[str, dict] = {}
    index = 0
    while index < len(tokens):
        flag, value, width = _flag(tokens, index)
        if flag in _VALUE_FLAGS:
            _carry(fields, flag, value, source)
        elif flag in _FORK_FLAGS:
            notes.append(f"build_args {flag}: selects eugr's own Dockerfile / prebuilt image, "
                         "which edgevllm does not build; the recipe needs that fork image "
                         "(set image: to it) or a vLLM that supports the model as released")
        elif flag in _SCRIPT_VALUE_FLAGS:
            notes.append(f"build_args {flag} {value}: a build-and-copy.sh setting; edgevllm takes "
                         "it from the target (inv build --help)")
        else:
            width = 1
            notes.append(f"build_args {flag}: a build-and-copy.sh flag with no edgevllm "
                         "equivalent; left out")
        index += width
    return _finish(fields, notes)


def _split(item: str, source: str) -> list[str]:
    return shell_words(item, f"{source}: field 'build_args': {one_line(item[:80])!r}",
                       RecipeError)


def _flag(tokens: list[str], index: int) -> tuple[str, str, int]:
    token = tokens[index]
    if token.startswith("--") and "=" in token:
        flag, _, value = token.partition("=")
        return flag, value, 1
    if token in _VALUE_FLAGS or token in _SCRIPT_VALUE_FLAGS:
        return token, tokens[index + 1] if index + 1 < len(tokens) else "", 2
    return token, "", 1


def _carry(fields: dict[str, dict], flag: str, value: str, source: str) -> None:
    name, key = _VALUE_FLAGS[flag]
    section = fields.setdefault(name, {})
    if key == "cherry_picks":
        try:
            parse_pr_arg(value, flag)
        except RefSyntaxError:
            raise RecipeError(f"{source}: field 'build_args': {flag} '{value}' is not a PR "
                              "number or PR URL") from None
        section.setdefault(key, []).append(value.lstrip("#"))
        return
    if not (_REF if key == "ref" else _REPO).match(value):
        raise RecipeError(f"{source}: field 'build_args': {flag} '{value}' is not a git "
                          f"{'ref' if key == 'ref' else 'repository'}")
    section[key] = value


def _finish(fields: dict[str, dict], notes: list[str]) -> dict:
    out: dict = {}
    vllm = fields.get("vllm")
    if vllm:
        if "ref" not in vllm and "repo" in vllm:
            vllm["ref"] = "main"  # build-and-copy.sh's default ref
        if "ref" not in vllm and vllm.get("cherry_picks"):
            notes.append("build_args pick vLLM PRs without --vllm-ref: applied onto edgevllm's "
                         "pinned vLLM release (eugr applies them onto main; add --vllm-ref to "
                         "build_args or inv build --recipe ... --vllm-ref main)")
        out["vllm"] = vllm
        notes.append(f"build_args: vLLM {_describe(vllm)} (inv build --recipe applies the picks "
                     "and pins them in the lock)")
    flashinfer = fields.get("flashinfer")
    if flashinfer:
        flashinfer.setdefault("repo", UPSTREAM_REPOS["flashinfer"])
        flashinfer.setdefault("ref", "main")
        out["flashinfer"] = {"source": flashinfer}
        notes.append(f"build_args: FlashInfer built from source, {_describe(flashinfer)}")
    return out


def _describe(section: dict) -> str:
    where = section.get("ref") or "the pinned release"
    picks = section.get("cherry_picks") or []
    repo = f" of {section['repo']}" if "repo" in section else ""
    return f"at {where}{repo}" + (f" + PR(s) {', '.join(picks)}" if picks else "")
