"""In the image, ``--dist`` only: the ``sccache`` the compile step finds first on PATH for CUDA
units. It runs the pinned sccache (which may compile the unit on a pool's worker), then, for a
sample of units, compiles the same unit again here without sccache and compares the two objects
section by section. sccache trusts what a worker sends back (a worker with a bad toolchain or a
bad actor on it returns a wrong object that links and loads), so a difference stops the compile:
one ``edgevllm-dist-check mismatch OBJECT`` line, exit 1, and no wheel is made.

The sample: the build's first CUDA unit, and every unit whose object path hashes to 0 modulo
``$EDGEVLLM_DIST_CHECK_EVERY`` (0: only the first). Sections compared: all but the symbol table
(``.symtab``, ``.strtab``) and debug information, which carry the per-run temporary file names of
nvcc or sccache (a remote and a local compile differ there, as two local ones do); the device code
(``.nv_fatbin``) and host code (``.text*``) are compared byte for byte. Standard library only.
"""

import hashlib
import os
import struct
import subprocess
import sys
import tempfile

MARKER = "edgevllm-dist-check"
SCCACHE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sccache")
FIRST = os.path.join(tempfile.gettempdir(), "edgevllm-dist-check-first")
SKIPPED = (".strtab", ".symtab", ".debug", ".rela.debug", ".zdebug")


def output_at(argv: list) -> int:
    """Index of the object's path in ``argv`` (-o X, --output-file X), or -1."""
    for k, arg in enumerate(argv[:-1]):
        if arg in ("-o", "--output-file"):
            return k + 1
    return -1


def is_cuda_compile(argv: list) -> bool:
    return bool(argv) and os.path.basename(argv[0]) == "nvcc" and (
        "-c" in argv or "--compile" in argv) and output_at(argv) > 0


def sampled(path: str, every: int) -> bool:
    try:
        os.close(os.open(FIRST, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        return True   # the build's first CUDA unit
    except FileExistsError:
        pass
    digest = int(hashlib.sha256(os.path.abspath(path).encode()).hexdigest(), 16)
    return every > 0 and digest % every == 0


def sections(path: str) -> dict:
    """An ELF64 object's sections by name (bytes; NOBITS as empty), those compared only."""
    with open(path, "rb") as handle:
        data = handle.read()
    if data[:4] != b"\x7fELF" or data[4] != 2:
        return {"": data}   # not an ELF64 object: compared whole
    end = "<" if data[5] == 1 else ">"
    shoff = struct.unpack_from(end + "Q", data, 40)[0]
    shentsize, shnum, shstrndx = struct.unpack_from(end + "HHH", data, 58)
    header = [struct.unpack_from(end + "IIQQQQ", data, shoff + k * shentsize)
              for k in range(shnum)]
    names = header[shstrndx][4]
    found = {}
    for name_at, kind, _, _, offset, size in header:
        name = data[names + name_at:data.index(b"\0", names + name_at)].decode(errors="replace")
        if name and not name.startswith(SKIPPED):
            found[name] = b"" if kind == 8 else data[offset:offset + size]
    return found


def compare(argv: list, out: str) -> int:
    """Compile ``argv`` here into a scratch object; 0 when its sections are ``out``'s."""
    with tempfile.TemporaryDirectory(prefix="edgevllm-dist-check-") as scratch:
        again = list(argv)
        again[output_at(argv)] = os.path.join(scratch, os.path.basename(out))
        code = subprocess.call(again)
        if code:
            print(f"{MARKER} local-failed {out}", file=sys.stderr, flush=True)
            return code
        remote, local = sections(out), sections(again[output_at(argv)])
    differing = sorted(n for n in set(remote) | set(local) if remote.get(n) != local.get(n))
    if differing:
        print(f"{MARKER} mismatch {out} (sections {', '.join(differing[:5])}): the object "
              f"sccache returned differs from this machine's compile", file=sys.stderr,
              flush=True)
        return 1
    print(f"{MARKER} same {out}", file=sys.stderr, flush=True)
    return 0


def main(argv: list) -> int:
    code = subprocess.call([SCCACHE, *argv])
    if code or not is_cuda_compile(argv):
        return code
    out = argv[output_at(argv)]
    every = int(os.environ.get("EDGEVLLM_DIST_CHECK_EVERY", "0") or 0)
    return compare(argv, out) if sampled(out, every) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
