"""Packaging hook (metadata lives in pyproject.toml): a wheel carries the data folders.

A non-editable install (``pip install .``) has no checkout beside the package, so the folders
edgevllm reads as data (targets, mods, recipes, patches, dockerfiles) are copied into the wheel
as ``edgevllm/_data/``; ``edgevllm.common.paths.project_root`` finds them there.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

DATA_FOLDERS = ("targets", "mods", "recipes", "patches", "dockerfiles")


class BuildWithData(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads the checkout itself
        root = Path(__file__).resolve().parent
        dest = Path(self.build_lib) / "edgevllm" / "_data"
        for name in DATA_FOLDERS:
            shutil.copytree(root / name, dest / name, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": BuildWithData})
