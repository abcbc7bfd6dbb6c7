"""The one rule for which mods a build applies: the target's defaults (or ``--mod``'s list), plus
``--add-mod``, minus ``--no-mod``; every name must be a known mod (with a did-you-mean).

Mods are folders holding ``manifest.yaml`` under ``mods/`` (and ``EDGEVLLM_MODS_PATH``); this module
knows only their names. Loading and checking manifests is the mods stage's work.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

from edgevllm.common.errors import ManifestError, UnknownModError
from edgevllm.common.paths import data_folders
from edgevllm.common.schema import did_you_mean

MANIFEST = "manifest.yaml"


def mod_folders() -> dict[str, Path]:
    """Every mod folder by name, across data_dirs("mods"); a name defined twice is an error."""
    return data_folders("mods", MANIFEST, ManifestError)


def check_mod_names(names: Iterable[str], known: Iterable[str] | None = None) -> None:
    """Raise ``UnknownModError`` for the first name that is not a mod."""
    known = sorted(known if known is not None else mod_folders())
    for name in names:
        if name not in known:
            hint = did_you_mean(name, known) or f" (known: {', '.join(known) or 'none'})"
            raise UnknownModError(f"unknown mod '{name}'{hint}; 'inv mods' lists them")


def select_mod_names(defaults: Sequence[str], only: Sequence[str] | None = None,
                     add: Sequence[str] = (), remove: Sequence[str] = ()) -> list[str]:
    """``only`` (or ``defaults``) + ``add`` − ``remove``, in order, each name checked."""
    check_mod_names([*(only or []), *add, *remove])
    chosen = list(dict.fromkeys([*(defaults if only is None else only), *add]))
    return [name for name in chosen if name not in set(remove)]
