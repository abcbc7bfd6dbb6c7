"""eugr (spark-vllm-docker) mods: read what a ``run.sh`` leaves behind, and turn one into an
edgevllm mod that runs at build time.

An eugr mod is ``mods/<name>/run.sh`` plus its files; eugr runs the script in the container at
every start. What a recipe's arguments can depend on is what the script leaves behind:

* a file it copies, often under another name (``cp chat_template.jinja
  $WORKSPACE_DIR/unsloth.jinja``): ``copies`` maps the name in the workspace to the file in the
  mod folder;
* a file it downloads (``wget URL``, ``wget -O NAME URL``, ``curl -L -o NAME URL``):
  ``downloads`` maps the name to the URL;
* a background loop (``nohup … &``, a line ending in ``&``): such a mod makes sense only at start
  (``start_only``), never in an image build.

The script is read, never run, here: one shell word list per line, no expansion but plain
``NAME=value`` variables. ``import_eugr_mod`` copies the folder into an edgevllm mod whose one
step (``kind: script``) runs ``run.sh`` in the image build (the applier). Each file the script
downloads is recorded (its URL), never fetched here, so a folder imports offline: the build
fetches it on the host and pins it by sha256 in its lock (mods/downloads.py; the image build has
no network).
"""

from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from edgevllm.common.dataload import load_yaml, shell_words
from edgevllm.common.errors import ManifestError
from edgevllm.common.fdtree import copy_tree
from edgevllm.common.foreign import inside, links_out
from edgevllm.common.fsutil import atomic_write_text, move_into_place

_URL = re.compile(r"^https?://\S+\Z")
# How a script names its own folder before a file name: "$(dirname "$0")/x", "$SCRIPT_DIR/x".
_SELF_DIR = re.compile(r"^(\$\(dirname [^)]*\)|\$\{?\w*DIR\}?|\.)/")
_ASSIGN = re.compile(r"^[A-Za-z_]\w*=")
_VARIABLE = re.compile(r"\$\{?([A-Za-z_]\w*)\}?")
_BACKGROUND = re.compile(r"(^|\s)nohup\s|(?<![&|])&\s*$")


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
        if (mod_dir / "run.sh").is_file() and not mod_dir.is_symlink() and \
                inside(mod_dir, "run.sh") is not None:
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
            _read_download([_expand(w, assigned) for w in words], mod)
    return mod


def _words(line: str) -> list[str]:
    stripped = line.strip()
    if not stripped or stripped.startswith("#"):
        return []
    try:
        return shell_words(stripped, "run.sh line", ManifestError, comments=True)
    except ManifestError:  # a line not understood is not a copy edgevllm carries
        return []


def _expand(word: str, assigned: dict[str, str]) -> str:
    """``$NAME`` / ``${NAME}`` set earlier in the script by a plain ``NAME=value`` line."""
    return _VARIABLE.sub(lambda m: assigned.get(m.group(1), m.group(0)), word)


def _copy(args: list[str], mod: EugrMod) -> None:
    paths = [a for a in args if not a.startswith("-")]
    if len(paths) != 2:
        return
    source = inside(mod.folder, _SELF_DIR.sub("", paths[0]))
    if source is None or not source.is_file():
        return  # a host file (/abs/path, ../x, a link out) is never carried along
    dest = paths[1].rstrip("/")
    last = dest.rsplit("/", 1)[-1]
    into_folder = paths[1].endswith("/") or last in ("", ".") or "$" in last
    mod.copies[source.name if into_folder else last] = source


def _read_download(words: list[str], mod: EugrMod) -> None:
    url = next((w for w in words if _URL.match(w)), None)
    if url is None or "$" in url:
        return  # a URL made at run time cannot be pinned: the build will refuse to fetch it
    name = url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    for flag in ("-O", "-o", "--output", "--output-document"):
        if flag in words[:-1] and not (words[0] == "curl" and flag == "-O"):
            name = words[words.index(flag) + 1].rsplit("/", 1)[-1]
    if name:
        mod.downloads[name] = url


# -- an eugr mod as an edgevllm mod --------------------------------------------------------------
def mod_name(folder: Path) -> str:
    """An edgevllm mod name for an eugr mod folder: ``fix-qwen3.5-autoround`` →
    ``eugr-fix-qwen3-5-autoround`` (the prefix keeps it apart from edgevllm's own mods)."""
    return "eugr-" + (re.sub(r"[^a-z0-9]+", "-", folder.name.lower()).strip("-") or "mod")


def _check_imported(folder: Path) -> None:
    """A mod folder is replaced only when it is an earlier import (its manifest's version is
    ``eugr``): one of the user's own is never deleted."""
    try:
        manifest = load_yaml((folder / "manifest.yaml").read_bytes(), str(folder), ManifestError)
    except (OSError, ManifestError):
        manifest = None
    if not isinstance(manifest, dict) or manifest.get("version") != "eugr":
        raise ManifestError(f"{folder}: a mod folder that is not an eugr import; edgevllm will "
                            "not replace it: move it away or rename it")


def import_eugr_mod(folder: Path, dest_root: Path, targets: list[str]) -> Path:
    """Write ``dest_root/<mod_name>/``: the eugr folder's files and ``manifest.yaml`` with one
    script step, recording each file the script downloads (its URL; its sha256 where an earlier
    import pinned it): nothing is fetched here, the build fetches and locks it
    (mods/downloads.py)."""
    if not (folder / "run.sh").is_file():
        raise ManifestError(f"{folder}: not an eugr mod (no run.sh); an edgevllm mod has "
                            "manifest.yaml (docs/mods.md)")
    outside = links_out(folder)
    if outside:
        raise ManifestError(f"{outside[0]}: a link out of the mod folder {folder} (or to "
                            "nothing); edgevllm copies no file from outside a mod: put the file "
                            "itself in the folder")
    mod = read_mod(folder.name, folder)
    if mod.start_only:
        raise ManifestError(f"{folder}: run.sh starts a background loop at every start, which an "
                            f"image cannot hold: run it on the host before inv serve "
                            f"(sudo bash {folder / 'run.sh'}), not as a build mod")
    name = mod_name(folder)
    with tempfile.TemporaryDirectory(dir=_made(dest_root), prefix=f".{name}-") as tmp:
        staged = Path(tmp) / name
        copy_tree(folder, staged, what=str(folder), error=ManifestError,  # by descriptors
                  skip=("__pycache__", ".git"))
        known = _known_pins(dest_root / name)
        downloads = [{"url": url, "file": f"downloads/{file}",
                      **({"sha256": known[url]} if url in known else {})}
                     for file, url in sorted(mod.downloads.items())]
        manifest = {"name": name, "version": "eugr",
                    "description": f"eugr mod {folder.name}: its run.sh, run at build time",
                    "targets": targets,
                    "steps": [{"kind": "script", "title": f"{folder.name}/run.sh",
                               "run": "run.sh", "downloads": downloads}]}
        atomic_write_text(staged / "manifest.yaml",
                          yaml.safe_dump(manifest, sort_keys=False, width=1000))
        final = dest_root / name
        if final.exists():
            _check_imported(final)
            shutil.rmtree(final)  # an earlier import of this mod (edgevllm wrote it)
        move_into_place(staged, final)
    return final


def _made(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _known_pins(earlier: Path) -> dict[str, str]:
    """url -> sha256 of the downloads an earlier import of this mod pinned."""
    try:
        manifest = load_yaml((earlier / "manifest.yaml").read_bytes(), str(earlier), ManifestError)
        steps = manifest["steps"] if isinstance(manifest, dict) else []
        return {d["url"]: d["sha256"] for step in steps for d in step.get("downloads", [])
                if isinstance(d, dict) and isinstance(d.get("sha256"), str)}
    except (OSError, ManifestError, KeyError, TypeError, AttributeError):
        return {}
