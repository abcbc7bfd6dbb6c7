"""Start-up probes for built images.

Level 1 (``probe_level1``, no GPU): imports and build facts inside the image.
Level 2 (``probe_level2``, on the device): serve a small model, check its endpoints and match the
server log against the catalogue of known-bad signatures (``signatures.yaml``).
"""

from edgevllm.probe.level1 import probe_level1
from edgevllm.probe.level2 import ServeSettings, probe_level2
from edgevllm.probe.result import Check, ProbeResult
from edgevllm.probe.target import ProbeTarget, probe_target

__all__ = ["Check", "ProbeResult", "ProbeTarget", "ServeSettings", "probe_level1",
           "probe_level2", "probe_target"]
