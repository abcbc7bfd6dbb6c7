"""The start timing's parts that need no container (``serve/starttime.py``): the probe's config
(the health path and port, and the model name the server answers to: a literal
``--served-model-name`` such as an imported eugr recipe keeps, or the one ``inv serve -- ...``
appends, was ignored, so the probe asked for the HF repo id, vLLM answered 404 and the first token
was never timed), Docker's times read to the nanosecond, and the one line a start prints; the
probe's config served to the real probe against a server on 127.0.0.1 that knows one name."""

from __future__ import annotations

import http.server
import json
from datetime import datetime, timezone

import pytest

from edgevllm.serve import inimage_startprobe
from edgevllm.serve.recipe.load import parse_recipe, render
from edgevllm.serve.starttime import StartTiming, docker_time, probe_config, served_model_name
from support.localhttp import serve_handler


def rendered(args: list[str], defaults: dict | None = None, extra: list[str] | None = None,
             **changes):
    data = {"name": "start-parts", "description": "d", "targets": ["spark"],
            "status": {"spark": "untested"}, "image": "edgevllm-test/absent:1",
            "model": "org/Big-Model", "defaults": defaults or {},
            "serve": {"args": ["{{ model }}", *args]}, **changes}
    return render(parse_recipe(data, "t"), {"target": "spark"}, extra_args=extra)


# -- the model name --------------------------------------------------------------------------------
@pytest.mark.parametrize("args, extra, name", [
    ([], None, "org/Big-Model"),
    (["--served-model-name", "big"], None, "big"),
    (["--served-model-name=big"], None, "big"),
    (["--served-model-name", "big", "alias"], None, "big"),  # nargs=+: the first is reported
    (["--served-model-name=big"], ["--served-model-name", "late"], "late"),  # vLLM takes the last
])
def test_the_name_the_server_answers_to(args, extra, name):
    assert served_model_name(rendered(args, extra=extra)) == name


def test_a_recipes_served_model_name_value_counts_where_the_command_has_none():
    assert served_model_name(rendered(["--port", "8000"],
                                      defaults={"served_model_name": "short"})) == "short"
    templated = rendered(["--served-model-name={{ served_model_name }}"],
                         defaults={"served_model_name": "short"})
    assert served_model_name(templated) == "short"


def test_the_config_points_at_the_health_path_and_port_inside_the_container():
    config = probe_config(rendered(["--served-model-name", "big"],
                                   health={"path": "/v1/models"}), 600)
    assert config == {"health": "http://localhost:8000/v1/models",
                      "completions": "http://localhost:8000/v1/completions",
                      "model": "big", "deadline_s": 600}


def answers_to(name: str):
    """A completions server that knows one model name, as vLLM does (404 for any other)."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            known = body.get("model") == name
            data = (b'data: {"choices": [{"text": "A"}]}\n\ndata: [DONE]\n\n' if known
                    else b'{"error": "The model does not exist."}')
            self.send_response(200 if known else 404)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    return Handler


def test_the_probe_asks_for_the_served_name_and_gets_its_first_token(capsys):
    config = probe_config(rendered(["--served-model-name", "big"]), 20)
    with serve_handler(answers_to("big")) as base:
        config["health"] = base + "/health"
        config["completions"] = base + "/v1/completions"
        assert inimage_startprobe.main([json.dumps(config)]) == 0
    found = json.loads(capsys.readouterr().out)
    assert "error" not in found and found["first_token"] >= found["healthy"]


# -- Docker's times and the line printed -----------------------------------------------------------
def test_docker_times_are_read_to_the_nanosecond_in_utc():
    whole = datetime(2026, 11, 29, 14, 0, 5, tzinfo=timezone.utc).timestamp()
    assert docker_time("2026-11-29T14:00:05.000000001Z") == pytest.approx(whole + 1e-9)
    assert docker_time("2026-11-29T14:00:05.5Z") == whole + 0.5
    assert docker_time("2026-11-29T14:00:05Z") == whole


def test_the_start_line_says_what_was_measured_and_what_not():
    full = StartTiming("t", health_s=41.26, first_token_s=43.9)
    assert full.describe() == ("start: healthy 41.3 s after the container started, "
                               "first streamed token at 43.9 s")
    half = StartTiming("t", health_s=12.0, error="first token: HTTP Error 404: Not Found")
    assert half.describe() == ("start: healthy 12.0 s after the container started, not "
                               "measured: first token: HTTP Error 404: Not Found")
    assert StartTiming(None).to_json() == {"started_at": None, "health_s": None,
                                           "first_token_s": None, "error": None}
