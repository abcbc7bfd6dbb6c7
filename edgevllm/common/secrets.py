"""What a secret looks like, by name and by shape: the one owner of that rule.

A value is a secret when its key says so (``HF_TOKEN``, ``AWS_SECRET_ACCESS_KEY``, ``*PASSWORD``)
or when the value has the shape of a credential whatever its key (``--env HF_AUTH=hf_…``): Hugging
Face, GitHub, GitLab, npm, OpenAI, Slack, Google and AWS keys, sccache-dist pool tokens,
``Bearer …`` values, JWTs, private keys (PEM and PGP), a URL's userinfo that holds a password
(``https://user:pass@host``, ``https://:pass@host``) or a token as its user
(``https://<token>@host``), a credential as a query parameter (``?password=…``,
``&token=…``) and as a ccache storage attribute
(``|bearer-token=…``, ``|password=…``). Build args, image env, labels and locks refuse them
(``secret_problem``); locks, labels and logs redact them with the one function ``redact``
(a URL keeps its scheme and host, an attribute its name); processes that run code from others get
an environment without them (``clean_environ``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|APIKEY|CREDENTIAL|PRIVATE_KEY|"
                         r"AUTH(?!OR))", re.I)
# Token shapes: long enough that ordinary words, digests and paths do not match. Where a shape has
# a name the redaction keeps (a URL's scheme, an attribute's name), that part is the group
# ``KEPT``; the rest of the match is replaced (and ``***``, what is left, is no secret).
_KEY_CHARS = r"[^\s=&|#;]"
_SHAPES = {
    "a Hugging Face token": r"\bhf_[A-Za-z0-9]{20,}",
    "a GitHub token": r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})",
    "a GitLab token": r"\bglpat-[A-Za-z0-9_-]{20,}",
    "an npm token": r"\bnpm_[A-Za-z0-9]{30,}",
    "an API key": r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}",
    "a Google API key": r"\bAIza[0-9A-Za-z_-]{35}",
    "a Slack token": r"\bxox[abposr]-[A-Za-z0-9-]{10,}",
    "an AWS access key": r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
    # builder/distpool/config.new_token's: a pool's client and worker tokens (DIST_TOKEN_PREFIX)
    "an sccache-dist pool token": r"\bsccd_[A-Za-z0-9_-]{40,}",
    # A token has a digit: "bearer token" (these words, in a refusal) is not one.
    "a bearer token": r"(?P<KEPT>\b[Bb]earer\s+)(?=[A-Za-z._~+/=-]*[0-9])"
                       r"[A-Za-z0-9._~+/=-]{8,}",
    "a JSON web token": r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*",
    "a private key": r"-----BEGIN [A-Z ]*PRIVATE KEY(?: BLOCK)?-----",
    "a password in a URL": r"(?P<KEPT>\b[A-Za-z][A-Za-z0-9+.-]{0,30}://)[^/\s:@]{0,256}:"
                           r"[^/\s@]{1,512}@",
    # A user name of 20+ characters with a digit in it is a token (``https://<PAT>@github.com``).
    "a token as a URL's user": r"(?P<KEPT>\b[A-Za-z][A-Za-z0-9+.-]{0,30}://)"
                               r"(?=[A-Za-z_.~-]{0,256}[0-9])[A-Za-z0-9_.~-]{20,256}@",
    "a credential in a URL's query": r"(?P<KEPT>[?&]" + _KEY_CHARS + r"{0,64}?"
                                     r"(?i:password|passwd|token|secret|api_?key|auth)"
                                     + _KEY_CHARS + r"{0,64}=)(?!\*\*\*(?![\w*]))[^\s&#]+",
    "a credential attribute": r"(?P<KEPT>\|" + _KEY_CHARS + r"{0,64}?"
                              r"(?i:password|passwd|token|secret|api-?key)"
                              + _KEY_CHARS + r"{0,64}=)(?!\*\*\*(?![\w*]))[^\s|]+",
}
DIST_TOKEN_PREFIX = "sccd_"  # what an sccache-dist pool's token starts with (the shape above)
_SHAPE = re.compile("|".join(f"(?P<s{i}>{p.replace('KEPT', f'k{i}')})"
                              for i, p in enumerate(_SHAPES.values())))
_WHAT = list(_SHAPES)
HOW_TO_PASS = ("pass secrets when the container runs (inv serve passes HF_TOKEN by name) or to "
               "the build as a BuildKit secret, never as --env, a build arg or a label")


def token_kind(value: str) -> str | None:
    """What kind of credential ``value`` contains, by its shape; None when it has none."""
    found = _SHAPE.search(value)
    return _WHAT[_index(found)] if found else None


def _index(found: re.Match[str]) -> int:
    return int(next(k for k, v in found.groupdict().items() if v is not None and k[0] == "s")[1:])


def secret_problem(key: str, value: object) -> str | None:
    """Why ``key=value`` must not be baked into an image, a label, a lock or a log (None: fine).
    Never quotes the value."""
    if SECRET_NAME.search(key):
        return f"{key} looks like a secret (its name)"
    kind = token_kind(str(value))
    if kind:
        return f"the value of {key} looks like {kind}"
    return None


def check_no_secrets(values: Mapping[str, object], where: str) -> None:
    """Raise ValueError (one line, no value quoted) when any entry is a secret."""
    for key, value in values.items():
        problem = secret_problem(str(key), value)
        if problem:
            raise ValueError(f"{problem}; {where}: {HOW_TO_PASS}")


def redact(text: str) -> str:
    """``text`` with every credential-shaped piece replaced by ``***``, keeping what names it
    (``https://***@host``, ``|bearer-token=***``, ``?password=***``, ``Bearer ***``). The one
    redaction of a lock (its compile cache), a label (the lock's) and a log (common/console,
    the build log). A redis URL's ``secret@host`` is a password alone (ccache reads it so)."""
    return _REDIS_USER.sub(r"\g<1>***@", _SHAPE.sub(_replace, text))


def _replace(found: re.Match[str]) -> str:
    kept = found.group(f"k{_index(found)}") if f"k{_index(found)}" in _SHAPE.groupindex else None
    if kept is None:
        return "***"
    return f"{kept}***@" if kept.endswith("://") else f"{kept}***"


_REDIS_USER = re.compile(r"\b(rediss?://)(?!\*\*\*@)[^/@\s]{1,512}@", re.I)


def url_without_password(url: str) -> str:
    """``url`` as a lock or a log may hold it: ``redact``'s (kept for its callers)."""
    return redact(url)


def clean_environ(environ: Mapping[str, str], keep: re.Pattern[str]) -> dict[str, str]:
    """The variables whose names match ``keep``, less every secret (by name or by shape)."""
    return {k: v for k, v in environ.items() if keep.search(k) and secret_problem(k, v) is None}
