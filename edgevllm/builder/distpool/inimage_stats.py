"""In the image (the ``edgevllm-sccache`` context): ``sccache --show-stats --stats-format json``
on stdin, one ``edgevllm-sccache-stats NAME COUNT`` line per figure on stdout for the build
summary (builder/distpool/client.py): units compiled on workers and here, dist errors, and the
jobs of each worker. Standard library only; never fails the build (the compile's own exit status
does)."""

import json
import sys

MARKER = "edgevllm-sccache-stats"


def counts(stats: dict) -> dict:
    sent = stats.get("dist_compiles") or {}
    misses = sum((stats.get("cache_misses") or {}).get("counts", {}).values())
    found = {"distributed": sum(sent.values()), "dist_errors": int(stats.get("dist_errors", 0))}
    found["local"] = max(misses - found["distributed"], 0)
    for worker, jobs in sorted(sent.items()):
        found[f"worker:{worker.replace(' ', '_')}"] = jobs
    return found


def main() -> None:
    try:
        stats = json.load(sys.stdin)["stats"]
        found = counts(stats)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        print(f"{MARKER} unreadable ({type(exc).__name__})")
        return
    for name, value in found.items():
        print(f"{MARKER} {name} {int(value)}")


if __name__ == "__main__":
    main()
