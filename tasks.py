"""Invoke entry point: ``inv --list``. The tasks live in edgevllm/cli/, the work in edgevllm/."""

from edgevllm.cli import adopt_inv_parse_errors, namespace

adopt_inv_parse_errors()  # Invoke's own parse errors as one `error:` line, exit 2
ns = namespace()
