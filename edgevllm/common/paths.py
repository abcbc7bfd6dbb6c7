"""Where edgevllm finds its data (targets, mods, recipes, templates) and keeps its caches.

Data lives beside the code in the repository (an editable install). ``EDGEVLLM_HOME`` points at
another checkout; ``EDGEVLLM_CACHE`` moves the cache (default ``~/.cache/edgevllm``).
Extra target/mod/recipe folders: ``EDGEVLLM_TARGETS_PATH`` etc., ``os.pathsep``-separated.
A user's own recipes (``inv recipe-import`` writes there) live in ``user_recipes_dir()``.
"""

from __future__ import annotations

import os
from pathlib import Path


def project_root() -> Path:
    """The folder holding targets/, mods/, recipes/, patches/ and dockerfiles/: ``EDGEVLLM_HOME``,
    else the checkout around the package (editable install), else the copy a wheel carries."""
    env = os.environ.get("EDGEVLLM_HOME")
    if env:
        return Path(env).resolve()
    package = Path(__file__).resolve().parents[1]
    checkout = package.parent
    return checkout if (checkout / "targets").is_dir() else package / "_data"


def data_dirs(kind: str) -> list[Path]:
    """Folders holding data files of one kind ("targets", "mods", "recipes", "patches").

    The repository's own folder comes first; folders named in ``EDGEVLLM_<KIND>_PATH`` follow,
    so a user adds a target by dropping a YAML file into a folder of their own.
    """
    dirs = [project_root() / kind]
    if kind in ("recipes", "mods"):
        dirs.append(user_data_dir(kind))
    extra = os.environ.get(f"EDGEVLLM_{kind.upper()}_PATH", "")
    dirs += [Path(p) for p in extra.split(os.pathsep) if p]
    return dirs


def data_folders(kind: str, marker: str, error: type[Exception]) -> dict[str, Path]:
    """Every folder holding ``marker`` (e.g. ``manifest.yaml``) under ``data_dirs(kind)``, by
    folder name; the same name in two places raises ``error`` naming both."""
    found: dict[str, Path] = {}
    for root in data_dirs(kind):
        for file in sorted(root.glob(f"*/{marker}")) if root.is_dir() else []:
            name = file.parent.name
            if name in found:
                raise error(f"{file}: '{name}' is also defined in {found[name]}; rename one of "
                            "the folders")
            found[name] = file.parent
    return found


def user_data_dir(kind: str) -> Path:
    """The user's own folder of one kind ("recipes", "mods"): ``$XDG_CONFIG_HOME/edgevllm/<kind>``
    (``~/.config`` when the variable is unset or empty, as the XDG base directory spec says).
    ``inv recipe-import`` and ``inv build --add-mod PATH`` write there."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "edgevllm" / kind


def user_recipes_dir() -> Path:
    return user_data_dir("recipes")


def host_hf_cache() -> Path:
    """The Hugging Face cache on this machine, one folder for every task (``inv model-fetch``
    downloads into it, ``inv serve`` mounts it): ``$HF_HOME`` as huggingface_hub reads it, else
    ``~/.cache/huggingface``; absolute, as a bind mount needs."""
    return Path(os.environ.get("HF_HOME") or "~/.cache/huggingface").expanduser().absolute()


def templates_dir() -> Path:
    return project_root() / "dockerfiles"


def cache_dir(*parts: str, create: bool = True) -> Path:
    """A cache folder (created on demand, 0700 whatever the umask, unless ``create`` is False:
    ``common/trust`` ignores caches others can write): git mirrors, exported wheels, downloads."""
    from edgevllm.common.trust import private_dir

    base = Path(os.environ.get("EDGEVLLM_CACHE", Path.home() / ".cache" / "edgevllm"))
    path = base.joinpath(*parts)
    if create:
        private_dir(path)
    return path
