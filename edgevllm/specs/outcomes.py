"""The outcomes of a mod or a source patch, as the mods record (``/opt/edgevllm/mods.json``) and
``inv mods`` write them.

The in-image applier (edgevllm/mods/inimage_applier.py) runs without edgevllm installed and keeps a
literal copy; tests/test_specs_outcomes.py holds it equal to this one.
"""

from __future__ import annotations

APPLIED = "applied"                  # the mod changed the image
ALREADY_APPLIED = "already-applied"  # every step found its work done
NOT_APPLICABLE = "not-applicable"    # a version outside the mod's range, or upstream fixed it
FAILED = "failed"                    # a step could not do its work: the build stops

OUTCOMES = (APPLIED, ALREADY_APPLIED, NOT_APPLICABLE, FAILED)
# The image is as the mod wants it: the probe passes these.
GOOD_OUTCOMES = (APPLIED, ALREADY_APPLIED, NOT_APPLICABLE)
