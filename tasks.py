"""Invoke entry point: ``inv --list``. The tasks live in edgevllm/cli/, the work in edgevllm/."""

from edgevllm.cli import namespace

ns = namespace()
