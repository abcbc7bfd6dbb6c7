"""Docker's login for a registry API v2 call (image/registryauth.py): read from docker's config
as `docker login` writes it, or from a credential helper (a real executable speaking docker's
helper protocol); a 401's challenge answered with it; a token realm in clear text on another
host is never sent the login. (The end to end: tests/test_image_wheelcache.py, a registry that
asks for a login.)"""

from __future__ import annotations

import base64
import json
import os
import stat

import pytest

from edgevllm.image.registryauth import authorization, docker_login


@pytest.fixture
def docker_config(tmp_path, monkeypatch):
    folder = tmp_path / "docker"
    folder.mkdir()
    monkeypatch.setenv("DOCKER_CONFIG", str(folder))

    def write(data: dict) -> None:
        (folder / "config.json").write_text(json.dumps(data))
    return write


def test_the_login_docker_login_wrote(docker_config):
    docker_config({"auths": {"reg.lan:5000": {"auth": base64.b64encode(b"me:pw1").decode()}}})
    assert docker_login("reg.lan:5000") == ("me", "pw1")
    assert docker_login("other.lan") is None
    docker_config({"auths": {"reg.lan:5000": {"auth": "%%% not base64"}}})
    assert docker_login("reg.lan:5000") is None


def test_a_credential_helper_is_asked(docker_config, tmp_path, monkeypatch):
    helper = tmp_path / "bin" / "docker-credential-edgevllmtest"
    helper.parent.mkdir()
    helper.write_text("#!/bin/sh\nread host\n[ \"$host\" = reg.lan ] || exit 1\n"
                      "echo '{\"Username\": \"ci\", \"Secret\": \"tok-1\"}'\n")
    helper.chmod(helper.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{helper.parent}{os.pathsep}{os.environ['PATH']}")
    docker_config({"credHelpers": {"reg.lan": "edgevllmtest"}})
    assert docker_login("reg.lan") == ("ci", "tok-1")
    docker_config({"credsStore": "edgevllmtest"})
    assert docker_login("elsewhere.lan") is None  # the helper knows no login for it


def test_a_challenge_is_answered_only_where_it_is_safe(docker_config):
    docker_config({"auths": {"reg.lan": {"auth": base64.b64encode(b"me:pw1").decode()}}})
    basic = authorization('Basic realm="x"', "reg.lan", "team/wheels")
    assert basic == "Basic " + base64.b64encode(b"me:pw1").decode()
    assert authorization('Basic realm="x"', "other.lan", "team/wheels") is None
    clear = 'Bearer realm="http://tokens.example/token",service="reg.lan"'
    assert authorization(clear, "reg.lan", "team/wheels") is None
    assert authorization("Negotiate", "reg.lan", "team/wheels") is None
