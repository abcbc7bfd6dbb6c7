"""The allow-list the kernel plan's CMake evaluation runs under: a tree's CMake is code from others.

``cmake -P`` runs a tree's ``CMakeLists.txt`` (a PR's, a fork's) on the host, so before anything
runs, every CMake file the plan evaluates is read here and refused unless each command it calls is
either a command that only computes (``set``, ``if``, ``string``, ``list``...), one the plan's
prelude replaces with a recorder (``execute_process``, ``file``, ``project``...), or a function the
tree itself defines. CMake keeps a replaced builtin under ``_<name>`` and can call any command by a
computed name (``cmake_language(CALL|EVAL)``, ``variable_watch``): those are refused, as are the
commands that run programs or write files outside a recorder (``exec_program``, ``site_name``,
``load_command``, ``write_file``, ``make_directory``, ``try_run``...). A tree may not redefine a
CMake command or the prelude's ``_ev_*`` helpers. At run time the prelude refuses the same commands
again (``refused_builtins``); ``include`` reaches only the scanned files and CMake's own modules.
A definition named ``_<command>`` (CMake's name for a replaced original) or by a computed name
(``function(${N})``) is refused too. This is the first line, not the guarantee: cmake then runs
in the sandbox (``common/sandbox.py``, docs/security.md) whatever got past it.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from edgevllm.common.dataload import load_text
from edgevllm.common.errors import PlanError
from edgevllm.common.secrets import clean_environ

# Builtins that only compute, branch or read the scope: nothing here starts a process or writes.
SAFE_BUILTINS = frozenset("""
if elseif else endif foreach endforeach while endwhile break continue return block endblock
function endfunction macro endmacro set unset list string math option get_filename_component
cmake_parse_arguments cmake_policy separate_arguments mark_as_advanced include_guard cmake_path
get_cmake_property get_directory_property
""".split())
# Commands the prelude (plan_prelude.cmake / plan_overrides.cmake) defines: recorders and no-ops.
PRELUDE_COMMANDS = frozenset("""
cmake_minimum_required project enable_language add_library add_executable add_custom_target
add_custom_command add_dependencies add_compile_definitions add_compile_options add_link_options
include_directories link_directories link_libraries target_link_libraries target_link_options
target_sources target_compile_features target_precompile_headers set_target_properties install
export configure_file source_group enable_testing add_test define_property
set_directory_properties target_compile_definitions target_compile_options
target_include_directories add_subdirectory set_source_files_properties set_property get_property
get_target_property get_source_file_property find_package find_program find_library find_path
find_file execute_process file message include run_python find_python_from_executable
append_cmake_prefix_path define_extension_target fetchcontent_makeavailable
fetchcontent_getproperties fetchcontent_declare fetchcontent_populate check_cxx_compiler_flag
processorcount python_add_library
""".split())
ALLOWED = SAFE_BUILTINS | PRELUDE_COMMANDS
_DEFINERS = ("function", "macro")
# What the guard reads of a tree before cmake runs: vLLM 0.33.0's CMakeLists.txt is about 60 KiB,
# its cmake/ folder about 20 files; a tree far past these is refused before it is read.
CMAKE_FILE_MAX_BYTES = 4 << 20
CMAKE_FILES_MAX = 2000
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BRACKET_OPEN = re.compile(r"\[(=*)\[")


@dataclass(frozen=True)
class Call:
    name: str  # lower case: CMake command names are case-insensitive
    line: int
    first_arg: str


def scan_calls(text: str) -> list[Call]:
    """Every command invocation in a CMake file (CMake's own grammar: a command name is always a
    literal identifier, so this list is complete)."""
    calls: list[Call] = []
    pos, size = 0, len(text)
    while pos < size:
        char = text[pos]
        if char == "#":
            pos = _skip_comment(text, pos)
        elif char.isspace():
            pos += 1
        else:
            match = _IDENT.match(text, pos)
            if not match:
                raise ValueError(f"{_line(text, pos)}: unexpected '{char}'")
            after = match.end()
            while after < size and text[after] in " \t":
                after += 1
            if after >= size or text[after] != "(":
                raise ValueError(f"{_line(text, pos)}: '{match.group()}' is not followed by '('")
            end, first = _skip_arguments(text, after)
            calls.append(Call(match.group().lower(), _line(text, pos), first))
            pos = end
    return calls


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _skip_comment(text: str, pos: int) -> int:
    bracket = _BRACKET_OPEN.match(text, pos + 1)
    if bracket:
        return _skip_bracket(text, pos + 1, bracket)
    end = text.find("\n", pos)
    return len(text) if end < 0 else end + 1


def _skip_bracket(text: str, pos: int, bracket: re.Match) -> int:
    close = "]" + bracket.group(1) + "]"
    end = text.find(close, bracket.end())
    if end < 0:
        raise ValueError(f"{_line(text, pos)}: bracket '[{bracket.group(1)}[' is not closed")
    return end + len(close)


def _skip_arguments(text: str, pos: int) -> tuple[int, str]:
    """From the '(' after a command name to just past its ')': (end, first argument)."""
    depth, index, size = 0, pos, len(text)
    first, token = "", ""
    while index < size:
        char = text[index]
        if char == "\\":
            token += text[index:index + 2]
            index += 2
            continue
        if char == '"':
            end = _quoted_end(text, index)
            token += text[index + 1:end - 1]
            index = end
            continue
        # A bracket argument opens only where an argument starts (CMake reads "a[[" as text).
        bracket = _BRACKET_OPEN.match(text, index) if char == "[" and not token else None
        if bracket:
            end = _skip_bracket(text, index, bracket)
            token += text[bracket.end():end - len(bracket.group(1)) - 2]
            index = end
            continue
        if char == "#":
            index = _skip_comment(text, index)
            continue
        if char in "()" or char.isspace():
            if token and not first:
                first = token
            token = ""
            depth += {"(": 1, ")": -1}.get(char, 0)
            index += 1
            if depth == 0:
                return index, first
            continue
        token += char
        index += 1
    raise ValueError(f"{_line(text, pos)}: '(' is not closed")


def _quoted_end(text: str, pos: int) -> int:
    index = pos + 1
    while index < len(text):
        if text[index] == "\\":
            index += 2
        elif text[index] == '"':
            return index + 1
        else:
            index += 1
    raise ValueError(f"{_line(text, pos)}: quoted argument is not closed")


def check_tree_cmake(tree: Path, files: dict[str, str], builtins: frozenset[str]) -> None:
    """Refuse the tree (one PlanError line naming file:line) unless every call is allowed.

    ``files``: relative path -> text of every CMake file the plan may evaluate; ``builtins``: the
    commands of the cmake that will run (``cmake --help-command-list``)."""
    scanned: dict[str, list[Call]] = {}
    for rel, text in files.items():
        try:
            scanned[rel] = scan_calls(text)
        except ValueError as exc:
            raise PlanError(f"{tree}: the kernel plan cannot be evaluated: {rel}:{exc} (edgevllm "
                            "reads every CMake file before it runs; fix the syntax)") from None
    defined = {c.first_arg.lower() for calls in scanned.values() for c in calls
               if c.name in _DEFINERS}
    for rel, calls in scanned.items():
        for call in calls:
            _check_call(f"{tree}/{rel}", call, defined, builtins)


def _check_call(rel: str, call: Call, defined: set[str], builtins: frozenset[str]) -> None:
    where = f"{rel}:{call.line}"
    if call.name in _DEFINERS:
        _check_definition(where, call, builtins)
        return
    if call.name in ALLOWED or (call.name in defined and not call.name.startswith("_ev")):
        return
    raise PlanError(f"{where}: '{call.name}' is not allowed while the kernel plan evaluates a "
                    "tree's CMake (it can run programs or reach the host); see docs/security.md")


def _check_definition(where: str, call: Call, builtins: frozenset[str]) -> None:
    """A function or macro of the tree: a literal name (``function(${N})`` could name anything
    at run time), not a CMake command, not a prelude helper, and not the ``_<command>`` under
    which CMake keeps a replaced command (defining ``_execute_process`` after a call, or in an
    ``if(FALSE)`` branch, made a call to it reach CMake's own)."""
    name = call.first_arg.lower()
    if not _IDENT.fullmatch(call.first_arg):
        raise PlanError(f"{where}: the tree defines a {call.name} named '{call.first_arg[:60]}', "
                        "not a plain name; the kernel plan evaluates only literal definitions")
    bare = name.lstrip("_")
    if (name.startswith("_ev") or (name in builtins and name not in PRELUDE_COMMANDS)
            or (bare != name and (bare in builtins or bare in ALLOWED))):
        raise PlanError(f"{where}: the tree redefines '{call.first_arg}' (a CMake command); "
                        "the kernel plan does not evaluate a tree that replaces CMake commands")


def cmake_builtins(cmake: str) -> frozenset[str]:
    """The commands this cmake knows: the runtime refusal list is made from them."""
    proc = subprocess.run([cmake, "--help-command-list"], capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"})
    names = frozenset(line.strip().lower() for line in proc.stdout.splitlines() if line.strip())
    if proc.returncode != 0 or "execute_process" not in names:
        raise PlanError(f"{cmake} --help-command-list failed; reinstall cmake >= 3.25")
    return names


def refused_builtins(builtins: frozenset[str]) -> list[str]:
    """The builtins the prelude replaces with a refusal before the tree runs."""
    return sorted(builtins - ALLOWED - {"cmake_language"})


def tree_cmake_files(tree: Path) -> dict[str, str]:
    """CMakeLists.txt and cmake/**/*.cmake: the files the plan copies, evaluates and scans.
    A link anywhere among them is refused: it could point the copy (and the reads) at the host."""
    top = tree / "CMakeLists.txt"
    files = [top]
    for folder, dirs, names in os.walk(tree / "cmake"):
        for name in sorted(dirs + names):
            path = Path(folder) / name
            if path.is_symlink():
                raise PlanError(f"{path}: a symbolic link in the tree's cmake/ folder; the "
                                "kernel plan evaluates only CMake files inside the tree")
            if name.endswith(".cmake") and path.is_file():
                files.append(path)
    if top.is_symlink() or (tree / "cmake").is_symlink():
        raise PlanError(f"{tree}: CMakeLists.txt or cmake/ is a symbolic link; the kernel plan "
                        "evaluates only CMake files inside the tree")
    if len(files) > CMAKE_FILES_MAX:
        raise PlanError(f"{tree}: {len(files)} CMake files under cmake/, more than a tree's "
                        f"build may hold ({CMAKE_FILES_MAX}); check the tree")
    return {str(path.relative_to(tree)): load_text(path, PlanError, CMAKE_FILE_MAX_BYTES)
            for path in files}


# --- the guarded run -----------------------------------------------------------------------------
# What a tree's CMake may read from the environment: the build's own switches and source folders.
_CMAKE_ENV = re.compile(r"^(VLLM_|FETCHCONTENT_|TORCH_|PYTORCH_|CUDA|NVCC|CMAKE_|MAX_JOBS$|PATH$|"
                        r"LD_LIBRARY_PATH$|PYTHONPATH$)|_(SRC|ROOT)_DIR$")


def cmake_env() -> dict[str, str]:
    """The environment cmake runs in: the build's variables, never a secret (by name or shape),
    so no tree can print a token into the plan's output."""
    return {**clean_environ(os.environ, _CMAKE_ENV), "LC_ALL": "C", "HOME": "/nonexistent"}


def cmake_root(cmake: str) -> Path:
    """This cmake's CMAKE_ROOT (its modules), resolved: include() may reach only those."""
    # In a folder of its own: it writes __cmake_systeminformation/ into its working folder, and
    # two builds at once (inv build --target thor,spark) in one folder read each other's half.
    with tempfile.TemporaryDirectory(prefix="edgevllm-cmake-info-") as scratch:
        proc = subprocess.run([cmake, "--system-information"], capture_output=True, text=True,
                              timeout=120, env=cmake_env(), cwd=scratch)
    found = re.search(r'^CMAKE_ROOT "([^"]+)"', proc.stdout, re.M)
    if not found:
        raise PlanError(f"{cmake} --system-information names no CMAKE_ROOT; reinstall cmake")
    return Path(found.group(1)).resolve()


def guarded_prelude(prelude: str, *, record: Path, shadow: Path, tree: Path, overrides: Path,
                    root: Path, builtins: frozenset[str]) -> str:
    """The prelude with its guards written in as literals (a tree can set any variable)."""
    refusals = "\n".join(f'function({name})\n  _ev_refused("{name}")\nendfunction()'
                         for name in refused_builtins(builtins) + ["cmake_language"])
    pins = {"@EV_OUT@": record, "@EV_SHADOW@": shadow.resolve(), "@EV_TREE_REAL@": tree.resolve(),
            "@EV_OVERRIDES@": overrides, "@EV_CMAKE_ROOT@": root}
    for key, path in pins.items():
        if not re.fullmatch(r"[A-Za-z0-9_./+-]+", str(path)):
            raise PlanError(f"{path}: the kernel plan needs a path of letters, digits and ._/+- "
                            "(it is written into the CMake prelude)")
        prelude = prelude.replace(key, str(path))
    return prelude.replace("@EV_REFUSALS@", refusals)
