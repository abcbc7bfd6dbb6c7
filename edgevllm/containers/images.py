"""The images an engine holds: inspect, list, tag, remove, pull, import a root filesystem, and
``docker save`` / ``docker load`` as streams (no file on disk)."""

from __future__ import annotations

import contextlib
import json
import subprocess
from pathlib import Path
from typing import IO, Callable, Iterator, Sequence

from edgevllm.common.errors import EngineError, ImageNotFoundError
from edgevllm.containers.daemon import Daemon


class Images(Daemon):
    """The engine's images."""

    def image_inspect(self, ref: str) -> dict:
        proc = self._run(["image", "inspect", ref], check=False)
        if proc.returncode != 0:
            raise ImageNotFoundError(
                f"image '{ref}' not found on engine {self.describe()}: build it, pull it or "
                "load it first (docker images lists what is there)"
            )
        return json.loads(proc.stdout)[0]

    def images(self, repository: str, fmt: str = "{{.ID}}") -> list[str]:
        """``docker images REPOSITORY``: one formatted line per image (ids by default)."""
        proc = self._run(["images", "--format", fmt, repository])
        return proc.stdout.decode().split()

    def image_exists(self, ref: str) -> bool:
        return self._run(["image", "inspect", ref], check=False).returncode == 0

    def image_id(self, ref: str) -> str:
        return self.image_inspect(ref)["Id"]

    def image_layer_lists(self) -> list[list[str]]:
        """Every local image's layers (diff ids, bottom first): what the engine is known to
        hold (layers only its build cache holds are not listed by any image)."""
        ids = self._run(["image", "ls", "-aq", "--no-trunc"]).stdout.decode().split()
        if not ids:
            return []
        proc = self._run(["image", "inspect", "--format", "{{json .RootFS.Layers}}",
                          *sorted(set(ids))], check=False)  # an image removed meanwhile: skipped
        found = []
        for line in proc.stdout.decode().splitlines():
            layers = json.loads(line) if line.startswith("[") else None
            if isinstance(layers, list) and all(isinstance(x, str) for x in layers):
                found.append(layers)
        return found

    def image_labels(self, ref: str) -> dict[str, str]:
        return self.image_inspect(ref).get("Config", {}).get("Labels") or {}

    def import_rootfs(
        self, tarball: Path, tag: str, platform: str | None = None, changes: Sequence[str] = ()
    ) -> str:
        """``docker import`` a root filesystem tarball as an image (locally built base images)."""
        args = ["import"] + (["--platform", platform] if platform else [])
        for change in changes:
            args += ["--change", change]
        return self._run(args + [str(tarball), tag]).stdout.decode().strip()

    def tag(self, source: str, target: str) -> None:
        self._run(["tag", source, target])

    def remove_image(self, ref: str, force: bool = False) -> None:
        self._run(["rmi"] + (["-f"] if force else []) + [ref], check=False)

    def pull(self, ref: str) -> None:
        self._run(["pull", "-q", ref])

    @contextlib.contextmanager
    def save_stream(self, refs: Sequence[str]) -> Iterator[IO[bytes]]:
        """``docker save`` as a byte stream (no file on disk)."""
        self._require_binary()
        proc = subprocess.Popen(
            self.base_argv() + ["save"] + list(refs), stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        assert proc.stdout is not None
        try:
            yield proc.stdout
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        proc.stdout.close()
        stderr = proc.stderr.read().decode(errors="replace").strip() if proc.stderr else ""
        if proc.wait() != 0:
            self.raise_if_unreachable(stderr)
            raise EngineError(f"docker save {' '.join(refs)} failed: {stderr.splitlines()[-1:]}")

    @contextlib.contextmanager
    def load_stream(self) -> Iterator[IO[bytes]]:
        """``docker load`` reading the yielded pipe; leaving the block closes it and waits.

        For feeding one ``docker save`` to several engines at once (``inv copy``).
        """
        self._require_binary()
        proc = subprocess.Popen(
            self.base_argv() + ["load", "-q"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        assert proc.stdin is not None
        try:
            yield proc.stdin
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()
        err = proc.stderr.read() if proc.stderr else b""
        if proc.wait() != 0:
            self.raise_if_unreachable(err)
            last = (err.decode(errors="replace").strip().splitlines() or ["?"])[-1]
            raise EngineError(f"docker load failed on engine {self.describe()}: {last}")

    def load_from(self, write: Callable[[IO[bytes]], None]) -> list[str]:
        """Feed ``docker load`` through ``write(stdin)``; return the loaded image names/ids."""
        self._require_binary()
        proc = subprocess.Popen(
            self.base_argv() + ["load"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stdin is not None
        try:
            write(proc.stdin)
            proc.stdin.close()
            proc.stdin = None  # communicate() would flush the closed pipe
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        out, err = proc.communicate()
        if proc.returncode != 0:
            self.raise_if_unreachable(err)
            raise EngineError(f"docker load failed: {err.decode(errors='replace').strip()}")
        loaded = []
        for line in out.decode().splitlines():
            for prefix in ("Loaded image: ", "Loaded image ID: "):
                if line.startswith(prefix):
                    loaded.append(line[len(prefix) :].strip())
        return loaded
