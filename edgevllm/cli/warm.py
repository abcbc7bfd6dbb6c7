"""``inv warm RECIPE``: harvest a recipe's JIT caches on the device into a checked bundle."""

from __future__ import annotations

from pathlib import Path

from edgevllm.cli._common import cli_task
from edgevllm.common import console
from edgevllm.common.errors import RecipeError
from edgevllm.common.grammar import ImageRef, check, flag_float, flag_int, flag_lengths
from edgevllm.containers.docker import DockerEngine

_WARM_HELP = {
    "recipe": "recipe name (inv recipes) or path to a recipe YAML file",
    "set": "override a recipe default (repeatable): --set port=9000",
    "target": "device the recipe runs on, for recipes with several targets (thor, spark)",
    "engine": "docker engine: 'local' (default), a docker context name or ssh://user@host",
    "out": "folder for the bundle (default: the bundle folder inv serve looks in)",
    "prompts": "warm-up requests per length (default 2)",
    "lengths": "input:output token lengths of the warm-up, comma list (default 128:32,1024:16)",
    "wait": "seconds to wait for the server to be healthy (default 1800)",
    "build": "build the recipe's image if the engine lacks it",
    "client-python": "run vLLM's client with this python here instead of in the container "
                     "(it must reach the server's port)",
    "tokenizer": "with --client-python: tokenizer folder or HF id (default: the recipe's model)",
    "image": "warm this image (tag or repo@sha256:...) instead of the recipe's",
    "allow-host-access": "let the recipe's container reach the host (inv serve --help)",
}


@cli_task(help=_WARM_HELP, iterable=["set_"], positional=["recipe"], auto_shortflags=False)
def warm(c, recipe, set_=None, target=None, engine=None, out=None, prompts="2", lengths=None,
         wait="1800", build=False, client_python=None, tokenizer=None, image=None,
         allow_host_access=False):
    """Start a recipe's server once, warm it up, and bundle the JIT caches it filled.

    inv warm RECIPE: the bundle (<recipe>-<image id>.jitcache.tar) is what inv serve, inv copy
    --with-caches and inv publish --with-caches take; docs/first-start.md.
    """
    from edgevllm.perf.client import PythonRunner
    from edgevllm.perf.warm import DEFAULT_LENGTHS, WarmPlan, warm_recipe
    from edgevllm.serve.cache.bundle import bundles_dir
    from edgevllm.serve.recipe.load import render_named

    rendered = render_named(recipe, set_, target, allow_host_access=allow_host_access)
    if image:
        rendered.image = check(ImageRef, image, "--image")
    if rendered.topology.mode != "solo":
        raise RecipeError(f"recipe {rendered.name} is a cluster recipe: warm it on one node "
                          "with its solo form")
    plan = WarmPlan(prompts=flag_int(prompts, "--prompts", 1, 1000),
                    lengths=flag_lengths(lengths) if lengths else list(DEFAULT_LENGTHS),
                    tokenizer=tokenizer, wait_s=flag_float(wait, "--wait"))
    runner_for = (lambda container: PythonRunner(client_python)) if client_python else None
    result = warm_recipe(rendered, DockerEngine.named(engine), Path(out) if out else bundles_dir(),
                         plan, build=build, runner_for=runner_for, progress=console.step)
    health = result.start.get("health_s")
    console.info(f"start: healthy after {health} s; {result.requests} warm-up requests" if health
                 is not None else f"{result.requests} warm-up requests")
    console.step(f"bundle: {result.manifest.describe()}")  # type: ignore[attr-defined]
    print(result.bundle)
