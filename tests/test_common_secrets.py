"""Secrets are recognised by name and by shape, refused where they would be baked into an image,
a label or a lock, and redacted from what is printed or logged."""

from __future__ import annotations

import io
import json
import re

import pytest
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

TOKENS = {
    "hf_abcdefghijklmnopqrstuvwxyz0123": "Hugging Face",
    "ghp_abcdefghijklmnopqrstuvwxyz0123456789": "GitHub",
    "github_pat_11ABCDEFG0abcdefghijklmn_opqrstuvwxyz0123456789": "GitHub",
    "glpat-abcdefghijklmnopqrst": "GitLab",
    "npm_abcdefghijklmnopqrstuvwxyz0123456789": "npm",
    "sk-proj-abcdefghijklmnopqrstuvwxyz": "API key",
    "AKIAIOSFODNN7EXAMPLE": "AWS",
    "Bearer abcdef0123456789": "bearer",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.sig": "JSON web token",
    "https://user:s3cret@example.com/repo.git": "password in a URL",
    "-----BEGIN OPENSSH PRIVATE KEY-----": "private key",
}
HARMLESS = ["12.1a", "/opt/venv/bin/python3", "expandable_segments:True",
            "sha256:" + "a" * 64, "https://github.com/vllm-project/vllm.git",
            "git@github.com:org/repo.git", "hf_transfer", "hello world", "0" * 40,
            "https://pypi.org/simple"]


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
