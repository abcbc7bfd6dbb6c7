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
    found.update(reasons(stats))
    return found


def reasons(stats: dict) -> dict:
    """What says why a unit was compiled here: misses and hits by language, the calls sccache
    passed through (not a compile, not cacheable, an unsupported compiler, each reason it gave)
    and the compiles that failed."""
    found = {}
    for kind in ("cache_misses", "cache_hits"):
        for lang, count in sorted((stats.get(kind) or {}).get("counts", {}).items()):
            found[f"{kind.split('_')[1]}:{lang}"] = count
    for name in ("requests_not_compile", "requests_not_cacheable",
                 "requests_unsupported_compiler", "non_cacheable_compilations", "compile_fails"):
        if stats.get(name):
            found[name] = stats[name]
    for why, count in sorted((stats.get("not_cached") or {}).items()):
        found[f"not_cached:{why}"] = count
    return {name.replace(" ", "_"): int(count) for name, count in found.items()}


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
