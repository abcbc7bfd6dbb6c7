"""Every fatal error edgevllm reports, as a class with its own exit code.

A message is one line: what is wrong (naming the field, file, ref or mod) and what to do.
The CLI prints ``error: <message>`` and exits with ``exit_code``; no traceback reaches the user.
Modules raise the most specific class here; add a subclass rather than a new ad-hoc exception.
"""

from __future__ import annotations


class EdgeVllmError(Exception):
    """Base class: a problem the user can fix; printed as one line."""

    exit_code = 1

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


# --- bad input (2) -----------------------------------------------------------------------------
class ConfigError(EdgeVllmError):
    """Invalid user input: a flag, a spec/target/recipe/manifest file, a field. Always one line."""

    exit_code = 2

    def __str__(self) -> str:
        return " ".join(self.message.split())


class UnknownTargetError(ConfigError):
    pass


class SpecError(ConfigError):
    pass


class ManifestError(ConfigError):
    """A malformed mod manifest, recipe or other data file."""


class UnknownModError(ConfigError):
    pass


class OutputFolderError(ConfigError):
    """An output folder that holds files edgevllm did not write (it would have to delete them)."""


class InsecureURLError(ConfigError):
    """A URL edgevllm would fetch from others that is not https (plain http: loopback only)."""


class MissingInputError(ConfigError):
    """A file or folder the user named is not there: an input error (2), whatever reads it."""


class SuppliedFolderError(ConfigError):
    """A folder the user supplies in place of a fetch (``--cmake-dep NAME=FOLDER``) that its gate
    refuses: a link out, a device, a name, a cap passed."""


# --- environment: tools missing (3) ------------------------------------------------------------
class MissingToolError(EdgeVllmError):
    """A required program or service is missing or not running."""

    exit_code = 3


class DockerUnavailableError(MissingToolError):
    pass


class SandboxMissingError(MissingToolError):
    """No sandbox (bubblewrap) on this host: code from others (a tree's CMake) is refused."""


class BinfmtMissingError(MissingToolError):
    pass


class DiskSpaceError(MissingToolError):
    pass


# --- container engine (4) ----------------------------------------------------------------------
class EngineError(EdgeVllmError):
    """A docker command failed in a way that is not a build failure."""

    exit_code = 4


class ImageNotFoundError(EngineError):
    pass


class EngineLostError(EngineError):
    """A remote engine stopped answering during a build (its machine went away)."""


class DaemonUnreachableError(DockerUnavailableError, EngineError):
    """The daemon did not answer at all: exit 3 (environment), and still an EngineError for the
    code that reports one node's engine failure as that node's result (inv copy, a probe)."""


# --- sources: refs, PRs, cherry-picks, locks (5) -----------------------------------------------
class SourceError(EdgeVllmError):
    exit_code = 5


class RefNotFoundError(SourceError):
    pass


class CherryPickConflictError(SourceError):
    pass


class LockError(SourceError):
    pass


class RefSyntaxError(ConfigError, SourceError):
    """A repository, ref, PR or commit spelled outside its grammar: bad input (exit 2) that
    callers of the sources stage may still catch as a SourceError."""


class PlanError(SourceError):
    """The kernel plan cannot be evaluated: no CMakeLists.txt, or the tree's CMake stops."""


class PlanGapError(PlanError):
    """A kernel group the target needs would compile nothing for it."""


class ClosureError(SourceError):
    """The closure cannot be resolved for the target (unknown version, no wheel, ...)."""


class UnresolvableError(ClosureError):
    """The requirements conflict for the target; ``reason`` is uv's explanation, one line."""

    def __init__(self, message: str, reason: str = ""):
        super().__init__(message)
        self.reason = reason


class WheelInputError(ConfigError):
    """A --vllm-wheel that does not fit the target (platform, Python) or cannot be read."""


class IndexUnreachable(SourceError):
    """The package index does not answer."""


class WheelHashMismatch(SourceError):
    """A wheel's bytes do not have the sha256 the lock pins."""


class DownloadError(SourceError):
    """A file from others (a mod's download) that cannot be fetched, or is over its limit."""


class DownloadChangedError(LockError):
    """A download's bytes are not the ones the lock (or the mod) pins by sha256."""


# --- image build (6) ---------------------------------------------------------------------------
class BuildError(EdgeVllmError):
    exit_code = 6


class SizeBudgetError(BuildError):
    """The image is larger than its target's size budget."""


class NotReproducibleError(BuildError):
    """A rebuild of the same lock gave another image (--check-reproducible): the first
    differing file named (its layer, its path, what differs)."""


# --- mods and patches (7) ----------------------------------------------------------------------
class ModError(EdgeVllmError):
    exit_code = 7


class ModFailedError(ModError):
    """A mod failed; ``table`` is the applier's outcome table (printed before the error line)."""

    def __init__(self, message: str, record: dict | None = None, table: str = ""):
        super().__init__(message)
        self.record, self.table = record, table


class ModConflictError(ConfigError):
    """Two selected mods edit the same anchor, or set one env var to different values."""


class ModNotForTargetError(ConfigError):
    """A mod was selected for a target its manifest does not list."""


# --- arch verification (8) ---------------------------------------------------------------------
class VerifyError(EdgeVllmError):
    """Bad verify input (not ELF, not a tarball...) or a failed gate."""

    exit_code = 8


class ArchGateFailed(VerifyError):
    pass


class SupplyChainError(VerifyError):
    """A signature, SBOM, statement or image that disagrees with the others (supply-chain check)."""


# --- probe (9) ---------------------------------------------------------------------------------
class ProbeError(EdgeVllmError):
    exit_code = 9


# --- publish / load / push (10) ----------------------------------------------------------------
class PublishError(EdgeVllmError):
    exit_code = 10


class IntegrityError(PublishError):
    """A tarball or manifest fails its checksum, size or completeness check."""


class RegistryError(PublishError):
    pass


class WheelCacheError(IntegrityError):
    """A compiled-wheels artifact (--wheel-cache) that is not its compile key's wheels as its
    sha256 list names them: refused, nothing kept."""


# --- recipes and serving (11) ------------------------------------------------------------------
class RecipeError(EdgeVllmError):
    exit_code = 11


class ClusterError(RecipeError):
    pass


# --- serving benchmarks and the roofline (12) -------------------------------------------------
class BenchError(EdgeVllmError):
    exit_code = 12


class RooflineUnknown(BenchError):
    """The checkpoint's layout is not one the roofline knows: it says so instead of guessing."""


class NoSuchModelError(MissingInputError, RooflineUnknown):
    """A model that is neither a folder nor a model id: an input error (2) for ``inv roofline``,
    a roofline the bench record calls unknown."""


# --- arch verification: specific causes (edgevllm/verify) ------------------------------------
class NotElfError(VerifyError):
    """A file given to verify is not an ELF shared object."""


class CorruptBinaryError(VerifyError):
    """An ELF file or its fatbin is truncated or malformed."""


class NotATarballError(VerifyError):
    """A --tarball input is not a (compressed) tar archive or its parts are missing."""


class ScanError(VerifyError):
    """A folder to scan cannot be read whole (permissions, a symlink loop)."""


class ResourceLimitError(VerifyError):
    """An input declares or decodes to more than a reader's ceiling (a size, a ratio)."""


class CuobjdumpMismatch(VerifyError):
    """cuobjdump lists different kernel architectures than edgevllm's own parser."""


class CuobjdumpNotFoundError(MissingToolError):
    pass


class PolicyError(ConfigError):
    """A malformed arch policy file."""


class DistPoolError(MissingToolError):
    """An sccache-dist compile pool that cannot serve: its scheduler unreachable, the token
    refused, a worker that did not register, a pool already up (builder/distpool)."""
