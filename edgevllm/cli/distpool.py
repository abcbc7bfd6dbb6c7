"""``inv dist-pool up|down|status|check``: a compile pool on sccache-dist (docs/dist.md)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from edgevllm.cli._common import cli_task
from edgevllm.common import console
from edgevllm.common.errors import ConfigError

ACTIONS = ("up", "down", "status", "check")
_HELP = {
    "action": "up (start a scheduler and --workers workers here), down, status, or check "
              "(a builder's check of --scheduler with its token)",
    "workers": "up: how many workers, each on its share of this host's cores (default 2)",
    "bind": "up: the address the scheduler and workers listen on (default 127.0.0.1; "
            "this host's LAN address for builders on other hosts; never 0.0.0.0)",
    "port": "up: the scheduler's port (default 10600; worker K listens on PORT+K)",
    "scheduler": "check: the pool's scheduler, sccache://HOST:PORT",
    "token-file": "check: the pool's client token (default: $EDGEVLLM_DIST_TOKEN, else this "
                  "host's pool's client.token)",
}


@cli_task(help=_HELP, positional=["action"], auto_shortflags=False)
def dist_pool(c, action, workers="2", bind=None, port=None, scheduler=None, token_file=None):
    """Run or check a compile pool: an sccache-dist scheduler and its workers (docs/dist.md).

    inv dist-pool up --workers N starts them here (root, bubblewrap), down stops them, status
    shows them, check --scheduler sccache://HOST:PORT tries a pool as a builder would.
    """
    from edgevllm.builder.distpool import config, pool, probe, tools
    from edgevllm.common.grammar import flag_int, flag_port

    if action not in ACTIONS:
        raise ConfigError(f"dist-pool {action[:40]!r}: one of {', '.join(ACTIONS)}")
    plan = pool.PoolPlan(
        workers=flag_int(workers, "--workers", 1, 256),
        bind=config.bind_address(bind) if bind is not None else config.DEFAULT_BIND,
        port=flag_port(port, "--port") if port is not None else config.DEFAULT_PORT)
    url = config.scheduler_url(scheduler, "--scheduler") if scheduler is not None else None
    if action == "check":
        token = _client_token(token_file)
        found = probe.check_pool(url or f"http://{config.url_host(plan.bind)}:{plan.port}", token)
        print(json.dumps(found.__dict__))
    elif action == "up":
        pool.check_plan(plan)  # before the download
        found = pool.up(plan, tools.ensure_tools())
        console.info(f"pool up: {found.describe()}; builders' token: "
                     f"{pool.token_paths(pool.pool_dir())[0]}")
        print(json.dumps(found.__dict__))
    elif action == "down":
        console.info(f"pool down: {pool.down()} process(es) stopped")
    else:
        print(json.dumps(pool.status()))


def _client_token(token_file: str | None) -> str:
    from edgevllm.builder.distpool import config, pool

    if token_file is not None:
        return config.read_token(Path(token_file), "--token-file")
    if os.environ.get("EDGEVLLM_DIST_TOKEN"):
        token = os.environ["EDGEVLLM_DIST_TOKEN"].strip()
        if not config.TOKEN.fullmatch(token):
            raise ConfigError("EDGEVLLM_DIST_TOKEN is not a token (16-512 letters, digits or "
                              "._~+/=-)")
        return token
    return config.read_token(pool.token_paths(pool.pool_dir(create=False))[0], "--token-file")
