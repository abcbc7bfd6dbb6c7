"""The files a mod's script downloads (an eugr ``run.sh``'s ``wget``/``curl``), fetched by the
build and pinned in its lock.

The import records each download (its URL, the file it becomes, its sha256 when known) and
fetches nothing, so a folder of recipes imports offline. The build fetches each one here, on the
host, before any container (through ``common/http.fetch_bounded``: https, at most
``MAX_DOWNLOAD`` bytes within its whole-download deadline, with no login of the user's: no
``~/.netrc``, cookie or engine login, whatever the host), into the staged copy of the mod; the
applier answers the script's ``wget``/``curl`` from that file. What each file's sha256 must be:
the lock's, on a lock rebuild; else the mod's own, when its manifest records one; a file whose
bytes differ is refused, one line. The sha256 of every file goes into the lock
(``ModLock.downloads``).

A mod imported before the build fetched (its file already in the mod folder, pinned by the
manifest) is used as it is.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from edgevllm.common.errors import DownloadChangedError, DownloadError, ManifestError
from edgevllm.common.foreign import path_inside
from edgevllm.common.fsutil import atomic_write_bytes
from edgevllm.common.http import fetch_bounded

MAX_DOWNLOAD = 64 << 20  # a parser plugin, a template, a config: far under this

Pins = dict[str, dict[str, str]]  # mod name -> {url: sha256}


@dataclass(frozen=True)
class Wanted:
    """One download a mod's manifest records."""

    mod: str
    url: str
    file: str  # in the mod's folder
    sha256: str | None  # the manifest's pin, where the import knew it


def fetch_downloads(wanted: list[Wanted], staged: Path, locked: Pins | None,
                    fetch: bool = True) -> Pins:
    """Fetch every download into ``staged/<mod>/`` (each mod's staged copy) and return their
    sha256 by mod and URL. ``locked``: the pins of a lock being rebuilt. ``fetch`` off
    (``inv render``): nothing is fetched, and only known pins are returned."""
    pins: Pins = {}
    for item in wanted:
        from_lock = (locked or {}).get(item.mod, {})
        pinned, by = (from_lock[item.url], "the lock") if item.url in from_lock else \
            (item.sha256, f"mod {item.mod}'s manifest")
        what = f"mod {item.mod}: the download {item.file}"
        dest = path_inside(staged / item.mod, item.file, what=what, error=ManifestError)
        if dest.is_file():
            body = dest.read_bytes()  # an older import's file, in the mod folder
        elif fetch:
            body = fetch_bounded(item.url, MAX_DOWNLOAD, what, DownloadError)
        else:
            if pinned:
                pins.setdefault(item.mod, {})[item.url] = pinned
            continue
        digest = hashlib.sha256(body).hexdigest()
        if pinned and digest != pinned:
            raise DownloadChangedError(
                f"{what} from {item.url} has sha256 {digest[:16]}…, {by} pins {pinned[:16]}…: "
                "the file changed where it is published; read the new one, then build without "
                "--lock (or import the mod again)")
        if not dest.is_file():
            atomic_write_bytes(dest, body)
        pins.setdefault(item.mod, {})[item.url] = digest
    return pins
