"""Secrets are recognised by name and by shape, refused where they would be baked into an image,
a label or a lock, and redacted from what is printed or logged."""

from __future__ import annotations

import io
import json
import re
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_specs_lock import sample_lock

from edgevllm.builder.buildlog import BuildFollower
from edgevllm.common.errors import LockError
from edgevllm.common.secrets import (
    check_no_secrets,
    clean_environ,
    redact,
    secret_problem,
    token_kind,
)
from edgevllm.specs.lock import lock_to_text, parse_lock
from support.properties import PROPERTY, bounded

TOKENS = {
    "hf_abcdefghijklmnopqrstuvwxyz0123": "Hugging Face",
    "ghp_abcdefghijklmnopqrstuvwxyz0123456789": "GitHub",
    "github_pat_11ABCDEFG0abcdefghijklmn_opqrstuvwxyz0123456789": "GitHub",
    "glpat-abcdefghijklmnopqrst": "GitLab",
    "npm_abcdefghijklmnopqrstuvwxyz0123456789": "npm",
    "sk-proj-abcdefghijklmnopqrstuvwxyz": "API key",
    "AKIAIOSFODNN7EXAMPLE": "AWS",
    "Bearer abcdef0123456789": "bearer",
    "https://:s3cretpw@example.com/repo.git": "password in a URL",  # no user name
    "https://abcdefghij0123456789klmnop@github.com/o/r.git": "token as a URL's user",
    "https://cache.example/c?password=s3cretpw": "query",
    "https://cache.example/c?x=1&api_token=s3cretpw": "query",
    "https://cache.example/c|bearer-token=s3cretpw": "attribute",
    "http://cache.example/c|layout=subdirs|password=s3cretpw": "attribute",
    "-----BEGIN PGP PRIVATE KEY BLOCK-----": "private key",
    "AIzaSyA1bcdefghijklmnopqrstuvwxyz012345": "Google API key",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.sig": "JSON web token",
    "https://user:s3cret@example.com/repo.git": "password in a URL",
    "-----BEGIN OPENSSH PRIVATE KEY-----": "private key",
}
HARMLESS = ["12.1a", "/opt/venv/bin/python3", "expandable_segments:True",
            "sha256:" + "a" * 64, "https://github.com/vllm-project/vllm.git",
            "git@github.com:org/repo.git", "hf_transfer", "hello world", "0" * 40,
            "https://pypi.org/simple", "https://me@example.com/r.git",
            "http://cache.lan/c|layout=subdirs|connect-timeout=100", "https://h/x?page=2",
            "the value looks like a bearer token; pass it by name"]


@pytest.mark.parametrize("value, kind", sorted(TOKENS.items()))
def test_tokens_are_recognised_by_shape(value, kind):
    assert kind in (token_kind(value) or "")
    assert kind in (token_kind(f"prefix {value} suffix") or "")
    assert value not in redact(f"x={value};")


@pytest.mark.parametrize("value", HARMLESS)
def test_ordinary_values_are_not_secrets(value):
    assert token_kind(value) is None
    assert redact(value) == value
    assert secret_problem("SOME_SETTING", value) is None


def test_names_say_secret_whatever_the_value():
    for name in ("HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "OPENAI_API_KEY", "HF_AUTH"):
        assert secret_problem(name, "x") is not None, name
    assert secret_problem("AUTHORS", "x") is None


def test_refusal_never_quotes_the_value():
    value = "hf_abcdefghijklmnopqrstuvwxyz0123"
    with pytest.raises(ValueError) as info:
        check_no_secrets({"HF_AUTH_X": value}, "here")
    assert value not in str(info.value) and "\n" not in str(info.value)


def test_clean_environ_keeps_the_named_and_drops_tokens():
    env = {"VLLM_A": "1", "VLLM_B": "hf_abcdefghijklmnopqrstuvwxyz0123", "HF_TOKEN": "x",
           "HOME": "/root"}
    assert clean_environ(env, re.compile(r"^VLLM_|^HF_")) == {"VLLM_A": "1"}


@pytest.mark.parametrize("flag", ["--env", "--build-arg"])
def test_a_token_given_as_env_or_build_arg_is_refused_with_one_line(flag, tmp_path, cli):
    token = "hf_abcdefghijklmnopqrstuvwxyz0123"
    out = tmp_path / "out"
    code, stdout, err = cli("render", "--target", "thor", flag, f"HF_AUTH_VALUE={token}",
                            "--out", str(out))
    assert code == 2, err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    assert "looks like a secret" in err and "BuildKit secret" in err
    assert token not in stdout + err
    assert not out.exists()
    code, _, err = cli("render", "--target", "thor", flag, f"SETTING={token}", "--out", str(out))
    assert code == 2 and "looks like a Hugging Face token" in err and token not in err


def test_the_build_log_is_redacted(tmp_path):
    log = io.StringIO()
    follower = BuildFollower(log_file=log)
    follower.feed("#5 [stage 1/2] RUN echo hf_abcdefghijklmnopqrstuvwxyz0123")
    assert "hf_abcdefghijklmnopqrstuvwxyz0123" not in log.getvalue()
    assert "***" in log.getvalue() and "***" in follower.tail[-1]


@pytest.mark.parametrize("where", ["settings", "build_args", "vllm_repo"])
def test_a_lock_holding_a_token_anywhere_is_refused_with_one_line(where):
    token = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"
    data = json.loads(lock_to_text(sample_lock()))
    if where == "settings":
        data["settings"] = {"env": {"SETTING": token}}
    elif where == "build_args":
        data["build_args"] = {"X": token}
    else:
        data["vllm"]["repo"] = f"https://me:{token}@github.com/me/vllm.git"
    with pytest.raises(LockError) as info:
        parse_lock(json.dumps(data), "shared.lock.json")
    message = str(info.value)
    assert "shared.lock.json" in message and "looks like" in message
    assert token not in message and "\n" not in message


def test_inv_probe_refuses_a_token_given_as_env(cli):
    token = "hf_abcdefghijklmnopqrstuvwxyz0123"
    code, out, err = cli("probe", "--image", "x", "--target", "thor", "--level", "2",
                         "--env", f"SETTING={token}")
    assert code == 2 and err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    assert "passed to the container by name" in err and token not in out + err


@pytest.mark.parametrize(("url", "shown"), [
    ("redis://cache.lan:6379", "redis://cache.lan:6379"),
    ("redis://s3cretpw@cache.lan:6379", "redis://***@cache.lan:6379"),  # redis: a password alone
    ("redis://:s3cretpw@cache.lan/1", "redis://***@cache.lan/1"),
    ("https://me:s3cretpw@cache.example/c", "https://***@cache.example/c"),
    ("http://me@cache.example/c", "http://me@cache.example/c"),  # a user name, no password
])
def test_url_without_password(url, shown):
    from edgevllm.common.secrets import url_without_password

    assert url_without_password(url) == shown
    assert "s3cretpw" not in shown and token_kind(shown) is None  # a lock accepts it


@pytest.mark.parametrize(("text", "shown"), [
    ("https://cache.example/c|bearer-token=s3cretpw", "https://cache.example/c|bearer-token=***"),
    ("http://h/c|layout=subdirs|password=s3cretpw|keep-alive=true",
     "http://h/c|layout=subdirs|password=***|keep-alive=true"),
    ("https://h/c?password=s3cretpw&x=1", "https://h/c?password=***&x=1"),
    ("https://abcdefghij0123456789klmnop@github.com/o", "https://***@github.com/o"),
    ("Authorization: Bearer abcdef0123456789", "Authorization: Bearer ***"),
])
def test_redaction_keeps_what_names_the_secret(text, shown):
    assert redact(text) == shown and token_kind(shown) is None


def test_a_refused_bearer_value_keeps_its_own_explanation():
    """The refusal names the kind in words that are not themselves redacted on the way out."""
    with pytest.raises(ValueError) as info:
        check_no_secrets({"HEADER": "Bearer abcdef0123456789"}, "an image must not hold it")
    message = str(info.value)
    assert "looks like a bearer token" in message and redact(message) == message


def test_a_compile_cache_attribute_never_lands_in_a_lock_or_its_label():
    """--compile-cache 'https://h/c|bearer-token=T': the lock (and so the image label and the
    published manifests, which carry the label) hold it redacted by the one redaction."""
    from edgevllm.specs.lock import label_value

    url = "https://cache.example/c|bearer-token=s3cretpw0123"
    lock = sample_lock().model_copy(update={"compile_cache": None})
    data = json.loads(lock_to_text(lock))
    data["compile_cache"] = url
    parsed = parse_lock(json.dumps(data), "shared.lock.json")
    assert parsed.compile_cache == "https://cache.example/c|bearer-token=***"
    assert "s3cretpw0123" not in lock_to_text(parsed) + label_value(parsed)
    assert "s3cretpw0123" not in label_value(lock.model_copy(update={"compile_cache": url}))


_SECRET = st.text(alphabet=string.ascii_letters + string.digits, min_size=8, max_size=40).map(
    lambda s: f"S3{s}")  # a digit in it, as every generated credential has
_CREDENTIAL = st.one_of(
    st.tuples(st.sampled_from(["https", "http", "redis", "git+https"]), _SECRET).map(
        lambda t: (f"{t[0]}://:{t[1]}@host.example/x", t[1])),
    st.tuples(st.sampled_from(["https", "http"]), _SECRET).map(
        lambda t: (f"{t[0]}://me:{t[1]}@host.example/x", t[1])),
    _SECRET.filter(lambda s: len(s) >= 20).map(lambda s: (f"https://{s}@github.com/o/r", s)),
    st.tuples(st.sampled_from(["password", "token", "api_key", "access_token", "Secret"]),
              _SECRET, st.sampled_from(["?", "?a=1&"])).map(
        lambda t: (f"https://h/p{t[2]}{t[0]}={t[1]}", t[1])),
    st.tuples(st.sampled_from(["bearer-token", "password", "auth-token"]), _SECRET).map(
        lambda t: (f"https://h/c|layout=subdirs|{t[0]}={t[1]}", t[1])),
    _SECRET.map(lambda s: (f"Authorization: Bearer {s}", s)),
)


@PROPERTY
@given(_CREDENTIAL, st.text(max_size=30), st.text(max_size=30))
def test_every_credential_shape_is_found_and_redacted(credential, before, after):
    """Any credential of the shapes above, inside any text: found by its shape and gone from
    what redact gives, within the memory bound and the deadline."""
    text, secret = credential
    whole = f"{before} {text} {after}"
    assert bounded(token_kind, whole) is not None
    shown = bounded(redact, whole)
    assert secret not in shown.replace(before, "").replace(after, "")


@PROPERTY
@given(st.sampled_from(["a://", ":", "@", "|x=", "?token=", "Bearer ", "AIza", "-----BEGIN "]),
       st.integers(1000, 20_000))
def test_the_shapes_stay_linear_on_hostile_text(piece, count):
    """A long run of the pieces the shapes start with (a log line from a hostile build) is
    scanned within the deadline: no shape backtracks quadratically (up to 220 KB here: a
    quadratic shape would take hours there; a linear one takes well under a second)."""
    bounded(redact, piece * count)
    bounded(token_kind, piece * count + "x")
