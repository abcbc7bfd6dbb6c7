"""Whose logins uv reads: the user's (``~/.netrc``, uv's stored logins, a keyring,
``UV_INDEX_<NAME>_USERNAME``/``_PASSWORD``) only for a resolve whose every index is the user's own
(PyPI, or a target file's ``torch.index_url``: ``own_indexes``); an index from anywhere else (a
recipe's, a ``--spec``'s, a lock's) is resolved with none of them (``resolve_env``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Sequence

from edgevllm.common.errors import EdgeVllmError

PYPI = "https://pypi.org/simple"
_INDEX_LOGIN = re.compile(r"UV_INDEX_\w+_(USERNAME|PASSWORD)")


def uv_env(scratch: Path | None = None) -> dict[str, str]:
    """uv resolves for a target Python it need not have: never let it fetch an interpreter.
    With ``scratch`` (a folder of the resolve's own), uv gets no login of the user's: ``NETRC``
    names an empty file there, its stored logins an empty folder, no keyring, no
    ``UV_INDEX_<NAME>_USERNAME``/``_PASSWORD``."""
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never", "UV_NO_PROGRESS": "1"}
    if scratch is None:
        return env
    (scratch / "netrc").write_text("")
    (scratch / "credentials").mkdir(exist_ok=True)
    env = {key: value for key, value in env.items() if not _INDEX_LOGIN.fullmatch(key)}
    return {**env, "NETRC": str(scratch / "netrc"), "UV_KEYRING_PROVIDER": "disabled",
            "UV_CREDENTIALS_DIR": str(scratch / "credentials")}


def own_indexes() -> set[str]:
    """The indexes the user's own configuration names: PyPI and each target file's
    ``torch.index_url`` (a target file that does not load names none)."""
    from edgevllm.specs.targets import load_target, target_files

    found = {PYPI}
    for name in target_files():
        try:
            index = load_target(name).torch.index_url
        except EdgeVllmError:
            continue
        if index:
            found.add(index.rstrip("/"))
    return found


def resolve_env(scratch: Path, indexes: Sequence[str]) -> dict[str, str]:
    """uv's environment for a resolve over ``indexes``: the user's logins only when every one
    is the user's own (``own_indexes``); an index from a recipe, a --spec or a lock gets none."""
    mine = own_indexes()
    return uv_env(None if all(i.rstrip("/") in mine for i in indexes) else scratch)
