"""Read an eugr (spark-vllm-docker) mod folder: what its ``run.sh`` leaves in the workspace.

An eugr mod is ``mods/<name>/run.sh`` plus its files; eugr runs the script in the container at
every start. What a recipe's arguments can depend on is what the script leaves behind:

* a file it copies, often under another name (``cp chat_template.jinja
  $WORKSPACE_DIR/unsloth.jinja``): ``copies`` maps the name in the workspace to the file in the
  mod folder;
* a file it downloads (``wget URL``, ``wget -O NAME URL``, ``curl -L -o NAME URL``):
  ``downloads`` maps the name to the URL;
* a background loop (``nohup … &``, ``while true``): such a mod makes sense only at start
  (``start_only``), never in an image build.

The script is read, never run: one shell word list per line, no expansion.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

_URL = re.compile(r"^https?://\S+$")
# How a script names its own folder before a file name: "$(dirname "$0")/x", "$SCRIPT_DIR/x".
_SELF_DIR = re.compile(r"^(\$\(dirname [^)]*\)|\$\{?\w*DIR\}?|\.)/")
_ASSIGN = re.compile(r"^[A-Za-z_]\w*=")
_VARIABLE = re.compile(r"\$\{?([A-Za-z_]\w*)\}?")
_BACKGROUND = re.compile(r"(^|\s)nohup\s|&\s*$|^\s*while\s+true")


@dataclass
class EugrMod:
    name: str  # as the recipe names it, e.g. "mods/fix-qwen3.6-chat-template"
    folder: Path
    copies: dict[str, Path] = field(default_factory=dict)  # workspace name -> file in the mod
    downloads: dict[str, str] = field(default_factory=dict)  # workspace name -> URL
    start_only: bool = False


def find_mod(source: Path, mod: str) -> EugrMod | None:
    """eugr's layout: ``<repo>/recipes[/<sub>]/x.yaml`` beside ``<repo>/mods/<mod>/run.sh``."""
    for folder in list(source.resolve().parents)[:4]:
        mod_dir = folder / mod
        if (mod_dir / "run.sh").is_file():
            return read_mod(mod, mod_dir)
    return None


def read_mod(name: str, folder: Path) -> EugrMod:
    mod = EugrMod(name, folder)
    script = (folder / "run.sh").read_text(errors="replace")
    assigned: dict[str, str] = {}
    for line in script.splitlines():
        if _BACKGROUND.search(line.split("#", 1)[0]):
            mod.start_only = True
        words = _words(line)
        if not words:
            continue
        if len(words) == 1 and _ASSIGN.match(words[0]):
            key, _, value = words[0].partition("=")
            assigned[key] = value
        elif words[0] == "cp":
            _copy([_expand(w, assigned) for w in words[1:]], mod)
        elif words[0] in ("wget", "curl"):
            _download(words, mod)
    return mod


def _words(line: str) -> list[str]:
    stripped = line.strip()
    if not stripped or stripped.startswith("#"):
        return []
    try:
        return shlex.split(stripped, comments=True)
    except ValueError:
        return []


def _expand(word: str, assigned: dict[str, str]) -> str:
    """``$NAME`` / ``${NAME}`` set earlier in the script by a plain ``NAME=value`` line."""
    return _VARIABLE.sub(lambda m: assigned.get(m.group(1), m.group(0)), word)


def _copy(args: list[str], mod: EugrMod) -> None:
    paths = [a for a in args if not a.startswith("-")]
    if len(paths) != 2:
        return
    source = mod.folder / _SELF_DIR.sub("", paths[0])
    if not source.is_file():
        return
    dest = paths[1].rstrip("/")
    last = dest.rsplit("/", 1)[-1]
    into_folder = paths[1].endswith("/") or last in ("", ".") or "$" in last
    mod.copies[source.name if into_folder else last] = source


def _download(words: list[str], mod: EugrMod) -> None:
    url = next((w for w in words if _URL.match(w)), None)
    if url is None:
        return
    name = url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    for flag in ("-O", "-o", "--output", "--output-document"):
        if flag in words[:-1] and not (words[0] == "curl" and flag == "-O"):
            name = words[words.index(flag) + 1].rsplit("/", 1)[-1]
    if name:
        mod.downloads[name] = url
