"""What a secret looks like, by name and by shape: the one owner of that rule.

A value is a secret when its key says so (``HF_TOKEN``, ``AWS_SECRET_ACCESS_KEY``, ``*PASSWORD``)
or when the value has the shape of a credential whatever its key (``--env HF_AUTH=hf_…``): Hugging
Face, GitHub, GitLab, npm, OpenAI, Slack and AWS tokens, ``Bearer …`` values, JWTs, private keys,
and passwords in a URL's userinfo (``https://user:pass@host``). Build args, image env, labels and
locks refuse them (``secret_problem``), logs and messages redact them (``redact``), and processes
that run code from others get an environment without them (``clean_environ``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|APIKEY|CREDENTIAL|PRIVATE_KEY|"
                         r"AUTH(?!OR))", re.I)
# Token shapes: long enough that ordinary words, digests and paths do not match.
_SHAPES = {
    "a Hugging Face token": r"\bhf_[A-Za-z0-9]{20,}",
    "a GitHub token": r"\b(gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})",
    "a GitLab token": r"\bglpat-[A-Za-z0-9_-]{20,}",
    "an npm token": r"\bnpm_[A-Za-z0-9]{30,}",
    "an API key": r"\bsk-(proj-|ant-)?[A-Za-z0-9_-]{20,}",
    "a Slack token": r"\bxox[abposr]-[A-Za-z0-9-]{10,}",
    "an AWS access key": r"\b(AKIA|ASIA)[0-9A-Z]{16}\b",
    "a bearer credential": r"\b[Bb]earer\s+[A-Za-z0-9._~+/=-]{8,}",
    "a JSON web token": r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*",
    "a private key": r"-----BEGIN [A-Z ]*PRIVATE KEY-----",
    "a password in a URL": r"[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@",
}
_SHAPE = re.compile("|".join(f"(?P<s{i}>{p})" for i, p in enumerate(_SHAPES.values())))
_WHAT = list(_SHAPES)
HOW_TO_PASS = ("pass secrets when the container runs (inv serve passes HF_TOKEN by name) or to "
               "the build as a BuildKit secret, never as --env, a build arg or a label")


def token_kind(value: str) -> str | None:
    """What kind of credential ``value`` contains, by its shape; None when it has none."""
    found = _SHAPE.search(value)
    if not found:
        return None
    index = int(next(k for k, v in found.groupdict().items() if v is not None)[1:])
    return _WHAT[index]


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
    """``text`` with every credential-shaped piece replaced by ``***``."""
    return _SHAPE.sub("***", text)


_USERINFO = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^/@\s]*)@")


def url_without_password(url: str) -> str:
    """``url`` with any password in its userinfo replaced: ``redis://***@host:6379``. The whole
    userinfo goes (``user:***`` would still read as a URL password), and a redis URL's
    ``secret@host`` is a password alone (ccache reads it so)."""
    found = _USERINFO.match(url)
    if not found:
        return url
    redis = found["scheme"].lower().startswith("redis")
    if ":" not in found["user"] and not redis:
        return url  # a user name without a password
    return f"{found['scheme']}***@{url[found.end():]}"


def clean_environ(environ: Mapping[str, str], keep: re.Pattern[str]) -> dict[str, str]:
    """The variables whose names match ``keep``, less every secret (by name or by shape)."""
    return {k: v for k, v in environ.items() if keep.search(k) and secret_problem(k, v) is None}
