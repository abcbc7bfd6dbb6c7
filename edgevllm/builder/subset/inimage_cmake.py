#!/usr/bin/env python3
"""A partial kernel build's ``cmake``, first on PATH in the compile's build step only (standard
library only): the tree's setup.py runs it as ``cmake``; it builds the chosen extensions only,
and never the targets the target's data leaves out.

vLLM's setup.py (0.33.0: ``cmake_build_ext.build_extensions``) configures once, builds every
extension's CMake target in one ``cmake --build . --target=<name> ...`` and installs each with
``cmake --install . --component <name>``; it has no setting that builds fewer. So, with
``EDGEVLLM_EXTENSIONS`` naming the chosen extensions (CMake target names, comma-separated):

- ``cmake --build``: only the chosen ``--target`` names stay, and any target whose build runs no
  command at all (ninja's own answer: vLLM's ``triton_kernels``, a Python package copied at
  install, which setup.py then copies again); the others are left out, said so on stderr;
- ``cmake --install --component X`` of a target left out: nothing, said so;
- anything else (the configure, ``--version``): the real cmake, unchanged.

With ``EDGEVLLM_LEAVE_OUT`` naming a JSON file (CMake target -> why; the target's ``leave_out``,
e.g. FlashAttention 3's ``_vllm_fa3_C`` on sm_121a/sm_110a), with or without chosen extensions:
those targets are dropped from ``cmake --build`` and their ``cmake --install --component`` is
nothing, each said on stderr with why.

The real cmake is the next ``cmake`` on PATH after this file's own folder. Nothing in the tree
is edited; without either setting every call goes to the real cmake as it is.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

SETTING = "EDGEVLLM_EXTENSIONS"
LEAVE_OUT = "EDGEVLLM_LEAVE_OUT"
SAY = "edgevllm extensions:"


def real_cmake() -> str:
    """The next ``cmake`` on PATH that is not this file."""
    own = os.path.realpath(__file__)
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        candidate = os.path.join(folder or ".", "cmake")
        if (os.path.isfile(candidate) and os.access(candidate, os.X_OK)
                and os.path.realpath(candidate) != own):
            return candidate
    print(f"{SAY} error: no cmake on PATH besides {own}: the build requirements bring cmake",
          file=sys.stderr)
    raise SystemExit(127)


def chosen() -> list[str]:
    return [name for name in os.environ.get(SETTING, "").split(",") if name]


def left_out() -> dict[str, str]:
    """The targets left out, name -> why (the JSON file ``EDGEVLLM_LEAVE_OUT`` names)."""
    path = os.environ.get(LEAVE_OUT, "")
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as handle:
            listed = json.load(handle)
    except (OSError, ValueError) as exc:
        print(f"{SAY} error: {LEAVE_OUT}={path}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    if not isinstance(listed, dict):
        print(f"{SAY} error: {LEAVE_OUT}={path}: not a JSON object of target -> why",
              file=sys.stderr)
        raise SystemExit(2)
    return {str(name): str(why) for name, why in listed.items()}


def split_targets(args: list[str]) -> tuple[list[str], list[str]]:
    """``cmake --build`` arguments -> (the arguments without targets, the targets named):
    ``--target=A``, ``--target A B``, ``-t A``."""
    rest, targets = [], []
    index = 0
    while index < len(args):
        arg = args[index]
        if arg.startswith("--target="):
            targets += [t for t in arg[len("--target="):].split(",") if t]
        elif arg in ("--target", "-t"):
            index += 1
            while index < len(args) and not args[index].startswith("-"):
                targets.append(args[index])
                index += 1
            continue
        else:
            rest.append(arg)
        index += 1
    return rest, targets


def cache_value(build_dir: str, name: str) -> str:
    """One entry of the build folder's CMakeCache.txt ('' when absent)."""
    try:
        with open(os.path.join(build_dir, "CMakeCache.txt"), encoding="utf-8",
                  errors="replace") as handle:
            for line in handle:
                found = re.match(rf"{re.escape(name)}:[A-Z]+=(.*)$", line.rstrip("\n"))
                if found:
                    return found[1]
    except OSError:
        pass
    return ""


def runs_nothing(build_dir: str, target: str) -> bool:
    """Whether building ``target`` runs no command (ninja's ``-t commands``); False where the
    generator is not Ninja or ninja cannot say."""
    if "Ninja" not in cache_value(build_dir, "CMAKE_GENERATOR"):
        return False
    ninja = cache_value(build_dir, "CMAKE_MAKE_PROGRAM") or shutil.which("ninja") or "ninja"
    try:
        proc = subprocess.run([ninja, "-C", build_dir, "-t", "commands", target],
                              capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0 and not proc.stdout.strip()


def build(args: list[str], keep: list[str], dropped: dict[str, str] | None = None
          ) -> list[str] | None:
    """The ``cmake --build`` arguments with only the kept targets (all but the ``dropped`` ones
    where none are chosen); None: nothing to build."""
    dropped = dropped or {}
    rest, targets = split_targets(args)
    if not targets:
        return args  # no --target: not setup.py's call; as it is
    build_dir = args[1] if len(args) > 1 and not args[1].startswith("-") else "."
    wanted = [t for t in targets if t not in dropped]
    kept = [t for t in wanted if not keep or t in keep or runs_nothing(build_dir, t)]
    line = f"{SAY} cmake --build: {', '.join(kept) or 'nothing'}"
    if keep:
        left = [t for t in wanted if t not in kept]
        missing = [t for t in keep if t not in targets]
        line += f"; left out (not asked for): {', '.join(left) or '-'}" + (
            f"; asked for but not built by the tree's setup.py: {', '.join(missing)}"
            if missing else "")
    gone = [f"{t} ({dropped[t]})" for t in targets if t in dropped]
    if gone:
        line += f"; left out by the target: {'; '.join(gone)}"
    print(line, file=sys.stderr, flush=True)
    if not kept:
        return None
    return rest + [f"--target={t}" for t in kept]


def install_skipped(args: list[str], keep: list[str],
                    dropped: dict[str, str] | None = None) -> bool:
    """Whether this is ``cmake --install --component X`` of a target left out."""
    if "--component" not in args or args.index("--component") + 1 >= len(args):
        return False
    component = args[args.index("--component") + 1]
    if component in (dropped or {}):
        print(f"{SAY} cmake --install --component {component}: skipped (left out by the "
              f"target: {(dropped or {})[component]})", file=sys.stderr, flush=True)
        return True
    build_dir = args[1] if len(args) > 1 and not args[1].startswith("-") else "."
    if not keep or component in keep or runs_nothing(build_dir, component):
        return False
    print(f"{SAY} cmake --install --component {component}: skipped (not built: not among the "
          "extensions asked for)", file=sys.stderr, flush=True)
    return True


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    keep, dropped = chosen(), left_out()
    cmake = real_cmake()
    if (keep or dropped) and args[:1] == ["--build"]:
        filtered = build(args, keep, dropped)
        if filtered is None:
            return 0
        args = filtered
    elif (keep or dropped) and args[:1] == ["--install"] and install_skipped(args, keep, dropped):
        return 0
    os.execv(cmake, [cmake, *args])
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main())
