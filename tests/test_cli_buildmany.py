"""``--engine`` for one or several targets, and the per-target build command lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgevllm.cli.buildmany import child_argv, engine_of, engines_for
from edgevllm.common.errors import ConfigError, SpecError
from edgevllm.containers.docker import DockerEngine


def test_one_engine_for_every_target_and_one_per_target():
    engines = engines_for(["ssh://me@spark"], ["thor", "spark"])
    assert engine_of(engines, "thor").host == engine_of(engines, "spark").host == "ssh://me@spark"
    engines = engines_for(["thor=ssh://me@thor:2222", "spark=spark-ctx"], ["thor", "spark"])
    assert engine_of(engines, "thor").host == "ssh://me@thor:2222"
    assert engine_of(engines, "spark").context == "spark-ctx"
    engines = engines_for(["thor=ssh://me@thor"], ["thor", "spark"])
    assert not engine_of(engines, "spark").host  # a target not named builds here
    assert engine_of(engines_for(None, ["spark"]), "spark").describe() == "default"


@pytest.mark.parametrize("raw, message", [
    (["orin=ssh://x"], "--engine orin=ssh://x: 'orin' is not a target of this build"),
    (["thor=ssh://a", "thor=ssh://b"], "two engines for thor"),
    (["ssh://a", "ssh://b"], "two engines for every target"),
])
def test_engine_flags_refused(raw, message):
    with pytest.raises(SpecError, match=message):
        engines_for(raw, ["thor", "spark"])


def test_a_bad_engine_is_one_line_naming_the_grammar():
    with pytest.raises(ConfigError, match="^--engine thor=ssh://a b: .*expected ssh://"):
        engines_for(["thor=ssh://a b"], ["thor"])


def test_child_command_line_carries_every_flag_given():
    values = {"target": "thor,spark", "spec": "s.yaml", "cherry_pick": ["12", "34"],
              "build_arg": ["A=1"], "rerun_steps": True, "verify": False, "out": "o",
              "max_jobs": "4", "engine": ["thor=ssh://x"], "compile": False}
    argv = child_argv(values, "thor", DockerEngine.named("ssh://me@thor"), Path("/t/thor.json"))
    assert argv[:5] == ["build", "--target", "thor", "--json", "/t/thor.json"]
    assert argv[5:7] == ["--engine", "ssh://me@thor"]
    rest = argv[7:]
    assert " ".join(rest) == ("--spec s.yaml --cherry-pick 12 --cherry-pick 34 --max-jobs 4 "
                              "--build-arg A=1 --rerun-steps --out o --no-verify")
    local = child_argv({"target": "spark"}, "spark", DockerEngine(), Path("j"))
    assert "--engine" not in local
