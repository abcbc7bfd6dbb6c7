"""The one KEY=VALUE parser (edgevllm.common.kv): every flag that takes pairs goes through it and
fails the same way, ``--flag 'item': expected ...``, with its own command's error class."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from edgevllm.common.errors import BenchError, ClusterError, ConfigError, RecipeError, SpecError
from edgevllm.common.kv import parse_pairs, split_csv, split_pair

PACKAGE = Path(__file__).resolve().parents[1] / "edgevllm"


def test_pairs_and_lists():
    assert parse_pairs(["A=1", "B=x=y", "A=2"], "--env", ConfigError) == {"A": "2", "B": "x=y"}
    assert split_pair(" K =v", "--env", ConfigError) == ("K", "v")
    assert split_csv(["a,b", " c ", ""]) == ["a", "b", "c"]


def _sets(item):
    from edgevllm.serve.recipe.values import parse_sets
    return parse_sets([item])


def _node_env(item):
    from edgevllm.serve.cluster import parse_nodes
    return parse_nodes(["local", "local"], node_env=[item])


def _sweep(item):
    from edgevllm.perf.bench import sweep_values
    return sweep_values([item])


def _build_env(item):
    from edgevllm.cli.flags import BUILD_FLAGS, _value
    flag = next(f for f in BUILD_FLAGS if f.option == "--env")
    return _value(flag, [item])


@pytest.mark.parametrize("parse,flag,item,error", [
    (_sets, "--set", "port", RecipeError),
    (_sets, "--set", "=9000", RecipeError),
    (_node_env, "--node-env", "node1:NOEQUALS", ClusterError),
    (_node_env, "--node-env", "node9:X=1", ClusterError),
    (_node_env, "--node-env", "X=1", ClusterError),
    (_sweep, "--sweep", "port", BenchError),
    (_sweep, "--sweep", "port=", BenchError),
    (_build_env, "--env", "NOEQUALS", SpecError),
])
def test_every_pair_flag_fails_one_way(parse, flag, item, error):
    with pytest.raises(error) as info:
        parse(item)
    assert re.match(rf"^{re.escape(flag)} '{re.escape(item)}': expected \S", str(info.value))
    assert "\n" not in str(info.value)


# Modules that split "=" for another reason than a flag's pairs, and why.
NOT_FLAG_PAIRS = {
    "edgevllm/common/kv.py": "the parser itself",
    "edgevllm/mods/inimage_applier.py":
        "self-contained in-image applier: imports nothing of edgevllm",
    "edgevllm/serve/launch.py": "docker's own label listing (a=b,c=d) and vLLM argv (--x=y)",
    "edgevllm/serve/recipe/importer.py": "an imported recipe's vLLM argv (--x=y)",
    "edgevllm/inspect/diff.py": "an image config's Env list (K=V, as docker writes it)",
    "edgevllm/mods/eugr.py": "an eugr mod's shell lines (NAME=value, --output=F)",
    "edgevllm/serve/recipe/build.py": "a recipe's vLLM argv (--load-format=X)",
    "edgevllm/serve/rdma.py": "the RDMA probe's output lines (devices=...)",
    "edgevllm/serve/recipe/buildargs.py": "eugr's build-and-copy.sh argv (--vllm-ref=X)",
    "edgevllm/inspect/inimage_dists.py": "an image's os-release (ID=debian); stdlib, in-image",
    "edgevllm/serve/recipe/hostaccess.py": "a recipe's docker run argv (--flag=value) and "
                                           "--mount fields (type=bind,src=...)",
    "edgevllm/common/fsutil.py": "the output marker's own header (kind=..., folder=...)",
}


def test_no_other_module_splits_pairs():
    found = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("partition", "split")
                    and node.args and isinstance(node.args[0], ast.Constant)
                    and node.args[0].value == "="):
                found.add(str(path.relative_to(PACKAGE.parent)))
    assert found - set(NOT_FLAG_PAIRS) == set(), "parse KEY=VALUE flags with edgevllm.common.kv"
    assert set(NOT_FLAG_PAIRS) - found == set(), "a module here no longer splits '=': drop it"
