"""Load a published set back into an engine (``inv load``): every part checked, the archive
checked whole, the engine's disk checked, then the decompressed tarball streamed into ``docker
load`` without the layers the engine already holds (image/loadskip.py); the loaded image id
must be the manifest's.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from edgevllm.common import console
from edgevllm.common.errors import DiskSpaceError, EngineError, IntegrityError
from edgevllm.containers.docker import DockerEngine
from edgevllm.containers.enginehost import check_load_disk
from edgevllm.image.loadskip import Skip, copy_without, held_chains, layers_to_skip
from edgevllm.image.progress import ByteProgress, human
from edgevllm.image.tarball import CHUNK, TarballSet, open_tarball


@dataclass
class LoadResult:
    loaded: list[str]
    image_id: str | None
    verified: bool
    source: str


def load(engine: DockerEngine, path: Path | str, every_layer: bool = False) -> LoadResult:
    """Check every part, then stream the decompressed tarball into ``docker load``: without
    the layers the engine's images hold, unless ``every_layer``."""
    tarset = open_tarball(path)
    if tarset.verifiable:
        with ByteProgress(f"verify {Path(tarset.describe()).name}", tarset.total_size) as progress:
            tarset.check(progress)
    else:
        console.warn(
            f"{tarset.describe()}: no manifest and no .sha256 beside it, so its "
            "checksum could not be verified; loading it as it is"
        )
    if tarset.format == "zst":
        console.info(decompression_note(tarset))
    with ByteProgress("check the image archive", tarset.total_size) as progress:
        tarset.check_contents(progress)  # one whole image, before docker load reads a byte
    skip = Skip() if every_layer else _held_layers(engine, tarset)
    _check_disk(engine, tarset, skip)
    loaded = _load_sending(engine, tarset, skip)
    image_id = _check_loaded(engine, tarset, loaded)
    return LoadResult(loaded, image_id, tarset.verifiable, tarset.describe())


def decompression_note(tarset: TarballSet) -> str:
    """One line: the memory the zstd decoder will take (what the manifest states, else a bound)."""
    record = (tarset.manifest.compression or {}) if tarset.manifest else {}
    if isinstance(record.get("decompression_memory"), int):
        window = human(1 << record.get("window_log", tarset.window_log))
        return (
            f"decompression needs {human(record['decompression_memory'])} of memory "
            f"(zstd window {window})"
        )
    return (
        f"decompression needs at most {human(1 << tarset.window_log)} of memory for the "
        "zstd window (not recorded in the manifest)"
    )


def _held_layers(engine: DockerEngine, tarset: TarballSet) -> Skip:
    """The archive's layers the engine's images already hold (image/loadskip.py)."""
    shape = tarset.archive
    if shape is None or not shape.layers:
        return Skip()
    skip = layers_to_skip(shape.layers, shape.diff_ids, shape.sizes,
                          held_chains(engine.image_layer_lists()))
    if skip.members:
        console.info(skip.describe())
    return skip


def _check_disk(engine: DockerEngine, tarset: TarballSet, skip: Skip) -> None:
    unpacked = (tarset.archive.unpacked if tarset.archive else 0) - skip.bytes
    level, line = check_load_disk(engine, unpacked)
    if level == "error":
        raise DiskSpaceError(f"{tarset.describe()}: {line}")
    (console.warn if level == "warn" else console.info)(line)


def _load_sending(engine: DockerEngine, tarset: TarballSet, skip: Skip) -> list[str]:
    """docker load without the held layers; where it then misses one (an image removed since
    the look), once more with every layer."""
    try:
        return _stream_load(engine, tarset, skip.members)
    except EngineError as exc:
        if not skip.members or "no such file or directory" not in str(exc):
            raise
    console.warn("docker load missed a layer the engine held a moment ago (an image was "
                 "removed meanwhile): loading again with every layer")
    return _stream_load(engine, tarset, set())


def _stream_load(engine: DockerEngine, tarset: TarballSet, skip: set[str]) -> list[str]:
    def feed(stdin: IO[bytes]) -> None:
        with ByteProgress("load", tarset.total_size) as progress:
            with tarset.tar_stream(progress) as tar:
                try:
                    if skip:
                        copy_without(tar, stdin, skip, tarset.describe())
                    else:
                        shutil.copyfileobj(tar, stdin, CHUNK)
                except BrokenPipeError:
                    return  # docker load stopped reading: its own error explains why

    return engine.load_from(feed)


def _check_loaded(engine: DockerEngine, tarset: TarballSet, loaded: list[str]) -> str | None:
    ids = {name if name.startswith("sha256:") else engine.image_id(name) for name in loaded}
    if tarset.manifest is None:
        return next(iter(ids)) if len(ids) == 1 else None
    expected = tarset.manifest.image.get("id")
    if not loaded or ids != {expected}:
        raise IntegrityError(
            f"{tarset.describe()}: the loaded image ({', '.join(sorted(ids)) or 'none'}) is not "
            f"the one the manifest names ({expected}); the manifest does not match its parts"
        )
    return expected
