"""The one owner of each field grammar: what a value may look like before it reaches a
Dockerfile, a shell line, a label or a command.

Every value below comes from data someone else may have written (a spec, a target file, a lock
that travelled inside an image or a published manifest, a recipe, a flag), and is pasted into
text that a shell or Docker parses. A value that steps outside its grammar could add a line to the
Dockerfile (a newline in an env name), a word to a shell line (a space in an apt package), or a
second label. So each field is checked where it enters, by the annotated types here (pydantic
models use them as field types), or by the ``flag_*`` functions (command-line flags, which raise
``ConfigError``: exit 2). The templates trust these types and quote nothing further.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Callable

from pydantic import AfterValidator, BeforeValidator, Field, TypeAdapter, ValidationError

from edgevllm.common.errors import ConfigError, EdgeVllmError
from edgevllm.common.kv import split_csv

# --- regular grammars ------------------------------------------------------------------------
# POSIX: environment variable names (also build-arg names and ulimit-free keys).
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.A)
# Debian policy 5.6.1 (lower case, digits, + - .; two characters at least), optionally =VERSION.
APT_PACKAGE = re.compile(r"[a-z0-9][a-z0-9+.-]+(=[A-Za-z0-9.+~:-]+)?", re.A)
# PEP 508 distribution names.
PACKAGE_NAME = re.compile(r"[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9]", re.A)
# A program name or an absolute path to it: ``python3.12``, ``/usr/bin/python3``.
COMMAND = re.compile(r"/?[A-Za-z0-9_.+-]+(/[A-Za-z0-9_.+-]+)*", re.A)
# A compute capability: 11.0a, 12.1a, 12.0f, 8.9 (optionally +PTX, as TORCH_CUDA_ARCH_LIST has it).
CUDA_ARCH = re.compile(r"\d{1,2}\.\d[af]?", re.A)
ARCH_LIST = re.compile(r"\d{1,2}\.\d[af]?(\+PTX)?([; ]\d{1,2}\.\d[af]?(\+PTX)?)*", re.A)
CUDA_VERSION = re.compile(r"\d{1,2}\.\d{1,2}(\.\d{1,3})?", re.A)
# OCI platform: os/arch[/variant].
PLATFORM = re.compile(r"[a-z0-9]+/[a-z0-9_]+(/[a-z0-9]+)?", re.A)
# Names that become part of cache ids, labels and file names: targets, mods, caches.
NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,127}", re.A)
MOD_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(:[A-Za-z0-9._/-]+)?", re.A)
MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", re.A)
SHA256_DIGEST = re.compile(r"sha256:[0-9a-f]{64}", re.A)
SHA256_HEX = re.compile(r"[0-9a-f]{64}", re.A)  # a file's sha256, as sha256sum prints it
# A git object name in full: SHA-1 (40 hex digits) or SHA-256 (64).
GIT_SHA = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?", re.A)

# The docker reference grammar (distribution/reference): [domain/]path[:tag][@digest].
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_REPO = re.compile(rf"(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*", re.A)
IMAGE_REF = re.compile(
    rf"(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*(?::{_TAG})?(?:@{_DIGEST})?", re.A)
IMAGE_TAG = re.compile(_TAG, re.A)

# Characters no one-line value may hold: C0 controls (newline included), DEL, C1 controls.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]", re.A)
# Label text sits inside double quotes in the Dockerfile: no quote, backslash or $ either.
_LABEL_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\"\\$`]", re.A)
_URL = re.compile(r"(https?|file)://[A-Za-z0-9._~:/?#\[\]@!%*+,=-]+", re.A)
# A ccache remote storage (ccache >= 4.4): redis(s)://[[USER:]PASSWORD@]HOST[:PORT][/DB] or
# http(s)://[USER:PASSWORD@]HOST[:PORT][/PATH], then ccache's own "|attribute=value" options.
COMPILE_CACHE_URL = re.compile(
    r"(rediss?|https?)://([A-Za-z0-9._~!%*+,;=-]*(:[A-Za-z0-9._~!%*+,;=-]*)?@)?"
    r"([A-Za-z0-9._-]+|\[[0-9a-fA-F:]+\])(:\d{1,5})?(/[A-Za-z0-9._~/%-]*)?"
    r"(\|[a-z-]+=[A-Za-z0-9._~/%:-]+)*", re.A)


def _matcher(pattern: re.Pattern, what: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        if not pattern.fullmatch(value):
            raise ValueError(f"{value!r} is not {what}")
        return value

    return check


def _no_control(value: str) -> str:
    if _CONTROL.search(value):
        raise ValueError(f"{value!r} holds a newline or control character; give one plain line")
    return value


def _label_text(value: str) -> str:
    if _LABEL_UNSAFE.search(value):
        raise ValueError(f"{value!r}: label text may not hold newlines, control characters, "
                         "quotes, backslashes, backticks or $")
    return value


def _image_ref(value: str) -> str:
    if len(value) > 512 or not IMAGE_REF.fullmatch(value):
        raise ValueError(f"{value!r} is not an image reference (registry/name[:tag][@sha256:…], "
                         "lower-case name)")
    return value


_PORT_MAPPING = re.compile(
    r"(?:(?:\d{1,3}(?:\.\d{1,3}){3}|\[[0-9a-fA-F:]+\]):)?"
    r"(?:(\d{1,5})(?:-(\d{1,5}))?:)?(\d{1,5})(?:-(\d{1,5}))?(?:/(?:tcp|udp|sctp))?", re.A)


def port_mapping(value: str) -> str:
    """``docker run -p``: ``[IP:][HOST[-HOST]:]PORT[-PORT][/tcp]``, every port 1-65535."""
    found = _PORT_MAPPING.fullmatch(value)
    if not found or any(p and not 1 <= int(p) <= 65535 for p in found.groups()):
        raise ValueError(f"{value!r} is not a port mapping such as 8000:8000 (ports 1-65535)")
    return value


def _tag_or_ref(value: str) -> str:
    """``--tag latest`` (a tag of the image repository) or ``--tag reg/name:tag`` (a full
    reference)."""
    if IMAGE_TAG.fullmatch(value) or (":" in value and IMAGE_REF.fullmatch(value)):
        return value
    raise ValueError(f"{value!r} is not an image tag or reference (latest, reg/name:tag)")


def _version(value: str) -> str:
    from packaging.version import InvalidVersion, Version

    problem = f"{value!r} is not a PEP 440 version such as 2.14.0 or 0.7.2.post1"
    if value != value.strip() or _CONTROL.search(value):  # packaging strips what a shell splits
        raise ValueError(problem)
    try:
        Version(value)
    except InvalidVersion:
        raise ValueError(problem) from None
    return value


def _pin(value: str) -> str:
    """A package pin as a spec writes it: ``1.2.3`` or ``==1.2.3``."""
    _version(value.lstrip("="))
    return value


def _requirement(value: str) -> str:
    """A requirement as data: name, extras, version, marker; no URL, path or option
    (common/requirements.py: a resolve never builds a project on the host)."""
    from edgevllm.common.requirements import check_requirement

    try:
        check_requirement(value)
    except ValueError as exc:
        raise ValueError(f"{exc} (such as 'certifi>=2026.10.18')") from None
    return _no_control(value)


def _container_path(value: str) -> str:
    if not value.startswith("/") or _CONTROL.search(value) or re.search(r"[:,\s]", value):
        raise ValueError(f"{value!r} is not an absolute container path (no ':', ',' or spaces)")
    return value


def _compile_cache_url(value: str) -> str:
    # The URL is a secret's carrier: never quote it back (it may hold a password).
    if not COMPILE_CACHE_URL.fullmatch(value):
        scheme = value.split("://", 1)[0] if "://" in value else "no scheme"
        raise ValueError(f"is not a compile cache URL ({scheme[:12]}): give redis://HOST:PORT, "
                         "rediss://, http:// or https:// (ccache remote storage); a local "
                         "cache name is compile_cache_id")
    return value


def _plain_name(value: str) -> str:
    from edgevllm.common.foreign import plain_name

    try:
        return plain_name(value, what="name", error=ConfigError)
    except ConfigError as exc:
        raise ValueError(str(exc).removeprefix("name: ")) from None


def _strict_str(value: Any) -> Any:
    # YAML turns 1.10 into 1.1 and 13.0 into a float: a grammar string must be written as text.
    if not isinstance(value, str):
        raise ValueError(f"{value!r} must be text (quote it in YAML)")
    return value


def _text(check: Callable[[str], str]) -> Any:
    return Annotated[str, BeforeValidator(_strict_str), AfterValidator(check)]


EnvName = _text(_matcher(ENV_NAME, "an environment variable name ([A-Za-z_][A-Za-z0-9_]*)"))
AptPackage = _text(_matcher(APT_PACKAGE, "a Debian package name such as python3.12-venv"))
PackageName = _text(_matcher(PACKAGE_NAME, "a Python package name such as flashinfer-python"))
PythonCommand = _text(_matcher(COMMAND, "a program name or absolute path such as python3.12"))
CudaArch = _text(_matcher(CUDA_ARCH, "a compute capability like 11.0a or 12.1a"))
ArchList = _text(_matcher(ARCH_LIST, "an arch list such as '12.1a' or '11.0a;12.1a'"))
CudaVersion = _text(_matcher(CUDA_VERSION, "a CUDA version such as 13.0.2"))
Platform = _text(_matcher(PLATFORM, "a platform os/arch[/variant] such as linux/arm64"))
Name = _text(_matcher(NAME, "a lower-case name (a-z, 0-9, '.', '_', '-')"))
ModName = _text(_matcher(MOD_NAME, "a mod name such as thor-runtime"))
PlainName = _text(_plain_name)  # a name from others that becomes a folder (common/foreign.py)
PythonModule = _text(_matcher(MODULE, "a Python module name such as vllm"))
ImageRef = _text(_image_ref)
ImageRepo = _text(_matcher(IMAGE_REPO, "a lower-case image repository such as edgevllm/vllm"))
ImageTag = _text(_matcher(IMAGE_TAG, "an image tag ([A-Za-z0-9_][A-Za-z0-9_.-]{0,127})"))
ImageTagOrRef = _text(_tag_or_ref)
Digest = _text(_matcher(SHA256_DIGEST, "a digest sha256:<64 hex digits>"))
CompileCacheUrl = _text(_compile_cache_url)
IndexUrl = _text(_matcher(_URL, "an http(s) or file URL without spaces or shell characters"))
Version = _text(_version)
PackagePin = _text(_pin)
Requirement = _text(_requirement)
LabelText = _text(_label_text)
Line = _text(_no_control)
ContainerPath = _text(_container_path)
HostPath = _text(_no_control)
Port = Annotated[int, Field(strict=True, ge=1, le=65535)]
PortMapping = _text(port_mapping)
PositiveInt = Annotated[int, Field(strict=True, ge=1)]
PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegativeFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]
SchemaVersion = Annotated[int, Field(strict=True, ge=1)]


def check(kind: Any, value: Any, field: str, error: type[EdgeVllmError] = ConfigError) -> Any:
    """``value`` checked against the annotated type ``kind``; one line naming ``field`` if not."""
    try:
        return TypeAdapter(kind).validate_python(value)
    except ValidationError as exc:
        message = exc.errors()[0].get("msg", "invalid").removeprefix("Value error, ")
        raise error(f"{field}: {message}") from None


# --- command-line flags ----------------------------------------------------------------------
def flag_int(raw: Any, flag: str, low: int = 0, high: int = 2**31 - 1,
             error: type[EdgeVllmError] = ConfigError) -> int:
    """A whole-number flag within [low, high]: ``--max-jobs 8``; words, signs and floats are
    refused with one line."""
    text = str(raw).strip()
    if isinstance(raw, bool) or not re.fullmatch(r"-?[0-9]{1,12}", text):
        raise error(f"{flag} '{raw}': expected a whole number")
    value = int(text)
    if not low <= value <= high:
        raise error(f"{flag} {value}: expected a whole number from {low} to {high}")
    return value


def flag_port(raw: Any, flag: str, error: type[EdgeVllmError] = ConfigError) -> int:
    return flag_int(raw, flag, 1, 65535, error)


def flag_float(raw: Any, flag: str, positive: bool = True, example: str = "",
               error: type[EdgeVllmError] = ConfigError) -> float:
    """A finite number flag (``--gpu-memory-gb 40``): nan, inf and words are refused."""
    try:
        value = float(str(raw).strip())
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or (value <= 0 if positive else value < 0):
        kind = "a positive" if positive else "a non-negative"
        hint = f", e.g. {flag} {example}" if example else ""
        raise error(f"{flag} '{raw}': expected {kind} number{hint}")
    return value


def flag_lengths(raw: str, flag: str = "--lengths") -> list[tuple[int, int]]:
    """Token lengths as ``INPUT:OUTPUT`` pairs, a comma list (``128:32,1024:16``)."""
    out = []
    for item in split_csv([raw]):
        inp, sep, outp = item.partition(":")
        if not sep:
            raise ConfigError(f"{flag} '{item}': write INPUT:OUTPUT tokens, e.g. 1024:128")
        out.append((flag_int(inp, f"{flag} INPUT", 0, 10_000_000),
                    flag_int(outp, f"{flag} OUTPUT", 1, 10_000_000)))
    if not out:
        raise ConfigError(f"{flag} '{raw}': write INPUT:OUTPUT tokens, e.g. 1024:128")
    return out
