"""Which keyed base images and rootfs tarballs of the test cache a run used, and the sweep of
the others after a whole, passing CI run (``.ci/run``).

The base images (``edgevllm-test/debian-python``, ``cuda``, ``cuda-ccache``, ``ray``,
``sshd-node``) and their rootfs tarballs carry a key of what they hold; when a test changes what
it asks for, the old key's image and tarball stay behind, and on a shared CI disk they add up
(several GB a week of changes). Each maker calls ``record(tag)``; where ``EDGEVLLM_TEST_LEDGER``
names a file (``.ci/run`` sets it) the tag is appended there. After the whole suite passed,
``python tests/support/cacheuse.py LEDGER`` removes the keyed images and tarballs no test asked
for: only names under this suite's own prefixes, only after a run that reached every maker. The
tests' ``e2e-*`` images are not keyed bases: ``.ci/run`` removes those itself.

Run as a script it takes the ledger's path; ``--dry-run`` only lists.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

LEDGER = "EDGEVLLM_TEST_LEDGER"
# The keyed bases the suite's makers tag (support/images.py, ray_image.py, sshd_node.py).
KEYED = re.compile(r"edgevllm-test/(debian-python|cuda|cuda-ccache|ray|sshd-node):"
                   r"(?P<tag>[A-Za-z0-9._-]+)")
TARBALL = re.compile(r"rootfs-(?P<name>[A-Za-z0-9._-]+)\.tar")


def record(tag: str) -> None:
    """Note that this run used ``tag`` (nothing without ``EDGEVLLM_TEST_LEDGER``)."""
    ledger = os.environ.get(LEDGER)
    if ledger:
        with open(ledger, "a", encoding="utf-8") as handle:
            handle.write(tag + "\n")


def used_tags(ledger: Path) -> set[str]:
    return {line.strip() for line in ledger.read_text().splitlines() if line.strip()}


def tarball_used(name: str, used: set[str]) -> bool:
    """A tarball ``rootfs-<suite>-<arch>-<key>.tar`` (``rootfs-sshd-...`` for the node image)
    belongs to the image whose tag part it repeats."""
    found = TARBALL.fullmatch(name)
    if found is None:
        return True   # not a keyed tarball: never touched
    stem = found["name"].removeprefix("sshd-")
    return any((m := KEYED.fullmatch(tag)) and m["tag"] == stem for tag in used)


def listed_images() -> list[str]:
    proc = subprocess.run(["docker", "images", "--format", "{{.Repository}}:{{.Tag}}"],
                          capture_output=True, text=True, check=True)
    return proc.stdout.split()


def stale_images(listed: list[str], used: set[str]) -> list[str]:
    """The keyed bases among ``listed`` no test asked for (other images are never touched)."""
    return [tag for tag in listed if KEYED.fullmatch(tag) and tag not in used]


def stale_tarballs(cache: Path, used: set[str]) -> list[Path]:
    return [path for path in sorted(cache.glob("rootfs-*.tar"))
            if not tarball_used(path.name, used)]


def sweep(ledger: Path, cache: Path, dry_run: bool = False) -> list[str]:
    """Remove what no test asked for; returns what was (or would be) removed."""
    used = used_tags(ledger)
    if not used:
        return []   # a ledger with nothing in it: the run reached no maker; keep everything
    images, tarballs = stale_images(listed_images(), used), stale_tarballs(cache, used)
    if not dry_run:
        if images:
            subprocess.run(["docker", "rmi", *images], capture_output=True, text=True)
        for path in tarballs:
            path.unlink(missing_ok=True)
    return images + [str(path) for path in tarballs]


def main(argv: list[str]) -> int:
    args = [a for a in argv if a != "--dry-run"]
    if len(args) != 1:
        print("usage: cacheuse.py [--dry-run] LEDGER", file=sys.stderr)
        return 2
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from support.downloads import test_cache_dir

    removed = sweep(Path(args[0]), test_cache_dir(), dry_run="--dry-run" in argv)
    verb = "would remove" if "--dry-run" in argv else "removed"
    print(f"test cache sweep: {verb} {len(removed)} keyed base(s) no test asked for"
          + "".join(f"\n  {name}" for name in removed))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
