"""Reading a rendered Dockerfile's stages: which stages a build target needs, and their text.

The compile key hashes exactly the stages the ``wheels`` target depends on (``FROM <stage>``,
``COPY --from=<stage>``, ``RUN --mount=…,from=<stage>``), so a change to the runtime stage never
looks like a change to the compile, and no comment banner decides where the compile ends.
"""

from __future__ import annotations

import re
from typing import Sequence

_FROM = re.compile(r"^FROM[ \t]+(?:--platform=(?P<platform>\S+)[ \t]+)?(?P<base>\S+)"
                   r"(?:[ \t]+AS[ \t]+(?P<name>\S+))?[ \t]*$", re.IGNORECASE | re.MULTILINE)
_USES = re.compile(r"(?:--|[,\s])from=(?P<stage>[A-Za-z0-9_.-]+)")  # COPY --from=, mount from=


def stages(text: str) -> dict[str, str]:
    """Stage name (or its index, for an unnamed stage) → the stage's text, in file order."""
    marks = list(_FROM.finditer(text))
    out: dict[str, str] = {}
    for index, mark in enumerate(marks):
        end = marks[index + 1].start() if index + 1 < len(marks) else len(text)
        out[mark.group("name") or str(index)] = text[mark.start():end]
    return out


def needs(text: str, target: str) -> list[str]:
    """The stages ``target`` is built from, itself last, in file order."""
    by_name = stages(text)
    if target not in by_name:
        raise KeyError(f"no stage named '{target}' in the Dockerfile")
    wanted: set[str] = set()
    pending = [target]
    while pending:
        name = pending.pop()
        if name in wanted or name not in by_name:
            continue  # an image reference or a named build context, not a stage
        wanted.add(name)
        body = by_name[name]
        base = _FROM.match(body.lstrip())
        pending += [base.group("base")] if base else []
        pending += [m.group("stage") for m in _USES.finditer(body)]
    return [name for name in by_name if name in wanted]


def bases(text: str, targets: Sequence[str], target_platform: str, build_platform: str
          ) -> list[tuple[str, str]]:
    """(image, platform) for each image the stages ``targets`` need start from (not scratch, not
    a stage), in file order, once each: ``--platform=$BUILDPLATFORM`` stages run where the
    builder runs, the others on the target's platform."""
    by_name = stages(text)
    wanted = {name for target in targets for name in needs(text, target)}
    pairs: list[tuple[str, str]] = []
    for name, body in by_name.items():
        mark = _FROM.match(body)
        if name not in wanted or mark is None:
            continue
        base, given = mark.group("base"), mark.group("platform")
        if base.lower() == "scratch" or base in by_name:
            continue
        platform = {None: target_platform, "$TARGETPLATFORM": target_platform,
                    "$BUILDPLATFORM": build_platform}.get(given, given)
        if (base, platform) not in pairs:
            pairs.append((base, platform))
    return pairs


def stage_text(text: str, target: str) -> str:
    """The text of every stage ``target`` needs, joined: what a cache key for it should hash."""
    by_name = stages(text)
    return "".join(by_name[name] for name in needs(text, target))
