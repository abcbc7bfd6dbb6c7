"""Every installed Python distribution and Debian package of a filesystem, as JSON. Stdlib only:
it runs inside the image (fed to the image's python3 on stdin, ``--network none``) and its
functions are reused on the host for the layers of a published tarball set, so both ways find
the same set.

A distribution is a ``*.dist-info`` (METADATA, RECORD) or ``*.egg-info`` (PKG-INFO) entry whose
parent folder is the first ``site-packages`` / ``dist-packages`` on its path; folders inside a
packages folder are not walked (a vendored copy is part of the package that vendors it).

A Debian package is a ``/var/lib/dpkg/status`` entry whose status is ``installed``; the
distribution it belongs to (its purl's namespace) is ``/etc/os-release``'s ID and codename.
"""

import hashlib
import json
import os
import sys

PACKAGE_DIRS = ("site-packages", "dist-packages")
SKIP = ("/proc", "/sys", "/dev")
DIST_INFO = ".dist-info"  # a wheel's (and an installed distribution's) metadata folder suffix
MARKER = "EDGEVLLM-DISTS "
DEBS_MARKER = "EDGEVLLM-DEBS "
DPKG_STATUS = "var/lib/dpkg/status"
OS_RELEASE = ("etc/os-release", "usr/lib/os-release")  # the first one that is there


def canonical(name):
    """PEP 503: lower case, runs of -_. as one -."""
    out, dash = [], False  # type: list[str], bool
    for char in name.strip().lower():
        if char in "-_.":
            dash = True
            continue
        if dash and out:
            out.append("-")
        dash = False
        out.append(char)
    return "".join(out)


def header_fields(data):
    """Name and Version from a METADATA / PKG-INFO header (email style; the body is ignored)."""
    found = {}
    for raw in data.decode("utf-8", "replace").splitlines():
        if not raw.strip():
            break
        key, sep, value = raw.partition(":")
        if sep and key in ("Name", "Version") and key not in found:
            found[key] = value.strip()
    return found.get("Name", ""), found.get("Version", "")


def unnamed(location):
    """The name of a distribution whose metadata names none: its folder's (``foo-1.0.dist-info``
    is ``foo``), else ``unnamed``; an SBOM entry needs one."""
    stem = os.path.basename(location.rstrip("/")).rsplit(".", 1)[0]
    return canonical(stem.split("-")[0]) or "unnamed"


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def entry(location, metadata, record):
    """One distribution: where (its .dist-info / .egg-info path), name, version and hashes."""
    name, version = header_fields(metadata)
    return {"name": canonical(name) or unnamed(location), "version": version, "path": location,
            "metadata_sha256": sha256(metadata),
            "record_sha256": sha256(record) if record is not None else None}


def _read(path):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None


def _from_packages_dir(folder, found):
    for name in sorted(os.listdir(folder)):
        full = os.path.join(folder, name)
        if name.endswith(DIST_INFO) and os.path.isdir(full):
            metadata = _read(os.path.join(full, "METADATA"))
            if metadata is not None:
                found.append(entry(full, metadata, _read(os.path.join(full, "RECORD"))))
        elif name.endswith(".egg-info"):
            metadata = _read(os.path.join(full, "PKG-INFO") if os.path.isdir(full) else full)
            if metadata is not None:
                found.append(entry(full, metadata, None))


def distributions(root="/"):
    found = []  # type: list[dict]
    for folder, dirs, _files in os.walk(root):
        if folder in SKIP:
            dirs[:] = []
            continue
        if os.path.basename(folder) in PACKAGE_DIRS:
            _from_packages_dir(folder, found)
            dirs[:] = []
            continue
        dirs.sort()
    return found


def _release_fields(data):
    """ID and VERSION_CODENAME of an os-release file (KEY=value lines, values maybe quoted)."""
    found = {}
    for raw in (data or b"").decode("utf-8", "replace").splitlines():
        key, sep, value = raw.partition("=")
        if sep and key.strip() in ("ID", "VERSION_CODENAME"):
            found[key.strip()] = value.strip().strip("'\"")
    return found


def _paragraphs(text):
    """The stanzas of a dpkg status file: field -> value (continuation lines skipped)."""
    fields = {}  # type: dict
    for line in text.splitlines() + [""]:
        if not line.strip():
            if fields:
                yield fields
            fields = {}
        elif line[0] not in " \t":
            key, sep, value = line.partition(":")
            if sep:
                fields[key] = value.strip()


def deb_packages(status, os_release=None):
    """The installed packages of a dpkg status file: name, version, architecture, distro."""
    release = _release_fields(os_release)
    found = [{"name": p["Package"], "version": p.get("Version", ""),
              "arch": p.get("Architecture", ""), "distro": release.get("ID", ""),
              "codename": release.get("VERSION_CODENAME", "")}
             for p in _paragraphs((status or b"").decode("utf-8", "replace"))
             if p.get("Package") and p.get("Status", "").endswith(" installed")]
    return sorted(found, key=lambda d: (d["name"], d["arch"]))


def debs(root="/"):
    release = next((data for data in (_read(os.path.join(root, p)) for p in OS_RELEASE)
                    if data is not None), None)
    return deb_packages(_read(os.path.join(root, DPKG_STATUS)), release)


def main():
    sys.stdout.write(MARKER + json.dumps(distributions(), sort_keys=True) + "\n")
    sys.stdout.write(DEBS_MARKER + json.dumps(debs(), sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
