"""Binary kernel-arch inspection: which GPU architectures the CUDA libraries in an image carry,
and whether they run on a target (``inv verify``). See docs/verify.md.

Public API (re-exported from ``api``, ``judge``, ``compat``, ``policy``)."""

from __future__ import annotations

from edgevllm.verify.api import scan_file, scan_image, scan_path, scan_tarball, verify, verify_image
from edgevllm.verify.compat import CudaArch, parse_arch
from edgevllm.verify.judge import LibraryVerdict, Verdict, judge
from edgevllm.verify.library import LibraryReport
from edgevllm.verify.policy import Policy, load_policy
from edgevllm.verify.report import print_verdict, write_json

__all__ = ["scan_file", "scan_image", "scan_path", "scan_tarball", "verify", "verify_image",
           "CudaArch", "parse_arch", "LibraryVerdict", "Verdict", "judge", "LibraryReport",
           "Policy", "load_policy", "print_verdict", "write_json"]
