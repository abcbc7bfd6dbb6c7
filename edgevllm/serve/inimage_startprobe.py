"""Time a server's start from inside its container (stdlib only, Python >= 3.8).

It runs INSIDE the container, as ``python3 -c <this file's text> CONFIG``, started right after the
container, so every time it takes is on the clock the container's ``State.StartedAt`` is on.
CONFIG is one JSON object: ``{"health": URL, "completions": URL, "model": NAME, "deadline_s": N}``.

It polls ``health`` until it answers 200 (the time is ``healthy``), then sends one streaming
completion (``"stream": true``, a few tokens) and takes the time of the first chunk that carries
text (``first_token``). It prints one JSON line: ``{"healthy": T, "first_token": T}`` (seconds
since the epoch), with ``"error"`` instead of what it could not measure. It never raises.
"""

import json
import sys
import time
import urllib.error
import urllib.request

POLL_S = 0.25
PROMPT = "The first start of a server"


def wait_healthy(url, deadline):
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return time.time()
        except (urllib.error.URLError, OSError, ValueError):
            pass
        time.sleep(POLL_S)
    return None


def first_token(url, model, deadline):
    body = json.dumps({"model": model, "prompt": PROMPT, "max_tokens": 4, "stream": True,
                       "temperature": 0}).encode()
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    timeout = max(1.0, deadline - time.time())
    with urllib.request.urlopen(request, timeout=timeout) as response:
        for raw in response:
            line = raw.decode(errors="replace").strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            if has_text(json.loads(line[5:])):
                return time.time()
    raise ValueError("the stream ended without a token")


def has_text(chunk):
    """Whether one streamed completion chunk carries text (one without choices, such as a usage
    chunk, does not); a chunk of another shape (a number, a list, choices that are not objects)
    is a ValueError, as a chunk that is not JSON is."""
    choices = (chunk.get("choices") or []) if isinstance(chunk, dict) else None
    if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
        raise ValueError("a chunk is not a completion: " + json.dumps(chunk)[:80])
    return any(choice.get("text") for choice in choices)


def main(argv):
    config = json.loads(argv[0])
    deadline = time.time() + float(config.get("deadline_s", 1800))
    found = {"healthy": wait_healthy(config["health"], deadline)}
    if found["healthy"] is None:
        found["error"] = "not healthy before the deadline"
    else:
        try:
            found["first_token"] = first_token(config["completions"], config["model"], deadline)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            found["error"] = "first token: " + str(exc)[:300]
    sys.stdout.write(json.dumps(found) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
