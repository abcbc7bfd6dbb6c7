"""``inv verify``: which GPU architectures an image's CUDA libraries carry, judged for a target."""

from __future__ import annotations

from edgevllm.kernel.errors import ArchGateFailed
from edgevllm.cli._common import cli_task


@cli_task(help={
    "target": "target name (thor, spark) or a compute capability such as 12.1a",
    "image": "a local Docker image to scan (streamed through docker save)",
    "tarball": "a docker-save tarball (.tar, .tar.gz, .tar.zst, or split .partNNN / .manifest.json)",
    "path": "a folder of libraries (or one library) to scan",
    "json": "also write the full verdict as JSON to this file",
    "cuobjdump": "cross-check every library with NVIDIA cuobjdump; any disagreement fails",
    "policy": "policy YAML naming which libraries must be native/compatible (default: built in)",
})
def verify(c, target, image=None, tarball=None, path=None, json=None, cuobjdump=False, policy=None):
    """Gate: vLLM/FlashInfer/flash-attn/torch CUDA libraries must run natively on the target GPU."""
    from edgevllm.verify import print_verdict
    from edgevllm.verify import verify as run_verify

    verdict = run_verify(target, image=image, tarball=tarball, path=path, policy=policy,
                         cuobjdump=cuobjdump, json_out=json)
    print_verdict(verdict)
    if not verdict.passed:
        raise ArchGateFailed(f"arch gate failed for {verdict.target}: "
                             f"{len(verdict.failures)} librar{'y' if len(verdict.failures) == 1 else 'ies'} "
                             "fall short (see the table above)")
