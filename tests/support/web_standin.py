"""A stand-in for the web (this machine reaches none of it): an HTTP server on 127.0.0.1 serving
the files a test names, by path. edgevllm fetches from others over https, and plain http on
loopback only, so the server is reached as itself (no proxy)."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

from support.localhttp import serve_pages

PLUGIN = b"# stand-in reasoning parser plugin\n"
PLUGIN_PATH = "/parsers/plugin_parser.py"
# What the eugr fixture mod downloads (tests/fixtures/eugr-recipes/mods/plugin-download).
PLUGIN_URL = "http://example.org/parsers/plugin_parser.py"


def serve(files: dict[str, bytes]) -> contextlib.AbstractContextManager[str]:
    """``files`` (path -> bytes, changeable while it runs) served on 127.0.0.1; its base URL."""
    return serve_pages(files)


def plugin_mod(fixture: Path, dest: Path, base_url: str) -> Path:
    """A copy of the eugr fixture mod ``fixture`` at ``dest`` whose run.sh downloads from
    ``base_url`` (the stand-in) instead of example.org."""
    shutil.copytree(fixture, dest)
    script = dest / "run.sh"
    script.write_text(script.read_text().replace("http://example.org", base_url))
    return dest
