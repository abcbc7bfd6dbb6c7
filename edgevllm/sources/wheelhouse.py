"""The wheelhouse: a resolved closure's wheels fetched by hash, and one build's folder of them.

``Wheelhouse`` downloads the pins of a ``sources.wheels.Closure`` into a content-addressed cache
(``<cache>/wheelhouse/sha256/<hash>/<file>``, shared by every build; a wheel lands under its
final name only once its hash matched; fetched through common/http.stream_bounded: no login of
the user's, a deadline by its size, the redirect rules) and assembles one build's folder of hard
links plus the ``requirements.txt`` that the image installs with ``--no-deps
--require-hashes``, offline: the whole closure but the packages the mode installs over it in
their own stage (its vLLM), whose pins go to ``requirements-mode.txt``. A local wheel
(``--vllm-wheel FILE``) comes in through ``local_pin`` and ``add_file``.

Contracts: nothing is downloaded but what a pin names; every wheel in an assembled folder has
the sha256 its pin names (checked on the host, and again by the installer in the image).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Sequence

from packaging.utils import canonicalize_name, parse_wheel_filename

from edgevllm.common.errors import ClosureError, WheelHashMismatch
from edgevllm.common.fsutil import StagedFile, atomic_dir, atomic_write_text, sha256_file
from edgevllm.common.http import stream_bounded
from edgevllm.sources.wheels import Closure, WheelPin

MAX_WHEEL = 4 << 30   # the most a wheel may be whose pin names no size (torch: about 1 GiB)
REQUIREMENTS_FILE = "requirements.txt"
MODE_REQUIREMENTS_FILE = "requirements-mode.txt"   # the mode's own pins, installed over the closure


# --- the wheelhouse ------------------------------------------------------------------------------

class Wheelhouse:
    """Content-addressed wheel cache: ``root/sha256/<hash>/<file name>``, shared by builds."""

    def __init__(self, root: Path | None = None):
        if root is None:
            from edgevllm.common.paths import cache_dir

            root = cache_dir("wheelhouse")
        self.root = Path(root)

    def path_for(self, pin: WheelPin) -> Path:
        return self.root / "sha256" / pin.sha256 / pin.filename

    def missing(self, pins: list[WheelPin]) -> list[WheelPin]:
        return [p for p in pins if not self.path_for(p).is_file()]

    def add_file(self, source: Path, pin: WheelPin) -> Path:
        """A local wheel (``--vllm-wheel FILE``) copied in, checked against its pin."""
        dest = self.path_for(pin)
        if not dest.is_file():
            _atomic_copy(source, dest, pin)
        return dest

    def fetch(self, pins: list[WheelPin], jobs: int = 4, progress=None,
              seconds: float | None = None) -> list[Path]:
        """Download every missing pin (``jobs`` at a time; each within ``seconds``, else a
        deadline by its size); Ctrl-C leaves only temporaries gone."""
        todo = self.missing(pins)
        cancel = threading.Event()
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(self._download, pin, cancel, seconds) for pin in todo]
            try:
                for future in futures:
                    future.result()
                    if progress:
                        progress(future)
            except BaseException:
                cancel.set()
                for future in futures:
                    future.cancel()
                raise
        return [self.path_for(p) for p in pins]

    def _download(self, pin: WheelPin, cancel: threading.Event,
                  seconds: float | None = None) -> Path:
        """One pin, from a URL that a lock of anyone's may name: through common/http (no login
        of the user's, the redirect rules, at most its pinned size within a deadline by it)."""
        if not pin.url:
            raise ClosureError(f"{pin.filename}: a local wheel that is not in the wheelhouse "
                               f"{self.root}; give its file to --vllm-wheel again")
        dest = self.path_for(pin)
        digest = hashlib.sha256()

        def write(block: bytes) -> None:
            digest.update(block)
            out.write(block)

        try:
            with StagedFile(dest) as staged, staged.open("wb") as out:
                stream_bounded(pin.url, write, min(pin.size or MAX_WHEEL, MAX_WHEEL),
                               f"downloading {pin.filename}", ClosureError, seconds=seconds,
                               cancel=cancel, anywhere=True)
                if digest.hexdigest() != pin.sha256:
                    raise WheelHashMismatch(f"{pin.url}: downloaded bytes have sha256 "
                                            f"{digest.hexdigest()}, the lock pins {pin.sha256}; "
                                            "nothing installed")
                staged.commit()
        except ClosureError as exc:
            raise ClosureError(f"{exc} (a lock whose wheels are cached in {self.root} builds "
                               "offline)") from None
        return dest

    def verify(self, pins: list[WheelPin]) -> None:
        """Every cached wheel still has its pinned hash (a changed file is refused, named)."""
        for pin in pins:
            path = self.path_for(pin)
            actual = sha256_file(path)
            if actual != pin.sha256:
                raise WheelHashMismatch(f"{path}: sha256 {actual} is not the pinned "
                                        f"{pin.sha256}; delete it to download it again; "
                                        "nothing installed")

    def set_folder(self, closure: Closure, over: Sequence[str] = ()) -> Path:
        """Where this closure's build context lives: one folder per set of hashes (and of the
        packages left to the mode's own stage), kept, so that a rebuild passes BuildKit the very
        same files (metadata included) and hits its cache."""
        held = ",".join(sorted(p.name for p in mode_pins(closure, over)))
        text = "".join(p.sha256 for p in closure.pins) + (f"|over:{held}" if held else "")
        return self.root / "sets" / hashlib.sha256(text.encode()).hexdigest()[:16]

    def assemble(self, closure: Closure, dest: Path | None = None,
                 over: Sequence[str] = ()) -> Path:
        """``dest`` (default: ``set_folder``): hard links to the closure's wheels plus
        requirements.txt (by hash; without the ``over`` packages, whose pins go to
        requirements-mode.txt), written atomically; an identical folder is reused as is."""
        self.verify(closure.pins)
        dest = dest or self.set_folder(closure, over)
        texts = {REQUIREMENTS_FILE: requirements_text(closure, over)}
        if mode_pins(closure, over):
            texts[MODE_REQUIREMENTS_FILE] = mode_requirements_text(closure, over)
        if all((dest / name).is_file() and (dest / name).read_text() == text
               for name, text in texts.items()) and all(
                (dest / p.filename).is_file() for p in closure.pins):
            return dest
        with atomic_dir(dest) as tmp:
            for pin in closure.pins:
                _link_or_copy(self.path_for(pin), tmp / pin.filename)
            for name, text in texts.items():
                atomic_write_text(tmp / name, text)
        return dest


def mode_pins(closure: Closure, over: Sequence[str]) -> list[WheelPin]:
    """The closure's pins of the ``over`` packages (the mode's vLLM): locked with the closure,
    installed over it in their own stage, so no layer shadows another's files."""
    names = {canonicalize_name(n) for n in over}
    return [p for p in closure.pins if canonicalize_name(p.name) in names]


def requirements_text(closure: Closure, over: Sequence[str] = ()) -> str:
    """What the closure stage installs: every pin with its hash (``--no-deps``: the closure is
    whole) but the ``over`` packages. Nothing but the pins and where they install: two targets
    (or modes) with the same pins get the same bytes, so the same build context and one shared
    install layer (the overrides that led to the pins are in the lock)."""
    later = mode_pins(closure, over)
    head = ("# The locked closure, installed offline with --no-deps --require-hashes.\n"
            f"# {closure.python_platform}, Python {closure.python_version}\n")
    if later:
        head += (f"# Not here: {', '.join(p.name for p in later)} (installed over it in its "
                 f"own stage, from {MODE_REQUIREMENTS_FILE}).\n")
    return head + "".join(p.requirement_line() + "\n" for p in closure.pins if p not in later)


def mode_requirements_text(closure: Closure, over: Sequence[str]) -> str:
    """The ``over`` pins, by hash: what a prebuilt image installs over the closure."""
    return ("# The mode's own packages, installed over the closure with --no-deps "
            "--require-hashes.\n" + "".join(p.requirement_line() + "\n"
                                             for p in mode_pins(closure, over)))


def local_pin(path: Path, name: str = "vllm") -> WheelPin:
    """A pin for a local wheel file (version from its name, hash from its bytes)."""
    _, version, _, _ = parse_wheel_filename(path.name)
    return WheelPin(name=name, version=str(version), filename=path.name,
                    sha256=sha256_file(path), size=path.stat().st_size)


def _link_or_copy(source: Path, dest: Path) -> None:
    try:
        os.link(source, dest)
    except OSError:
        shutil.copyfile(source, dest)


def _atomic_copy(source: Path, dest: Path, pin: WheelPin) -> None:
    with StagedFile(dest) as staged:
        shutil.copyfile(source, staged.tmp)
        if sha256_file(staged.tmp) != pin.sha256:
            raise WheelHashMismatch(f"{source}: its sha256 is not the pinned {pin.sha256}; "
                                    "nothing installed")
        staged.commit()
