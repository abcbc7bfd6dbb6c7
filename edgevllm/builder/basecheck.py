"""Every image a build's stages start from, for the platform that stage runs on, checked in
preflight, before anything is fetched.

A stage runs on the target's platform unless its ``FROM`` says ``--platform=$BUILDPLATFORM``
(the closure's byte-code, compiled where the builder runs). A base the engine holds only for the
target's platform (a local arm64 image, as an air-gapped user or the test suite makes) would
otherwise build for minutes and then fail in BuildKit's words (``failed to do request: Head
https://registry-1…``) when a build-platform stage asks the registry for it. The pairs come from
the rendered Dockerfile itself (builder/dockerfile.py reads its stages), so a new stage on the
build platform is checked with no change here.
"""

from __future__ import annotations

from edgevllm.common.dataload import load_json
from edgevllm.common.errors import ConfigError, EngineError, ImageNotFoundError
from edgevllm.containers.docker import DockerEngine
from edgevllm.specs.buildspec import EffectiveSpec


def _os_arch(platform: str) -> str:
    return "/".join(platform.split("/")[:2])


def local_platform(engine: DockerEngine, ref: str) -> str | None:
    """The platform of the engine's own copy of ``ref`` (None when it has none)."""
    proc = engine.run_cli(["image", "inspect", "--format", "{{.Os}}/{{.Architecture}}", ref])
    return proc.stdout.decode().strip() if proc.returncode == 0 else None


def registry_serves(engine: DockerEngine, ref: str, platform: str) -> bool:
    """Whether ``ref``'s registry serves it for ``platform`` (a single-platform manifest counts:
    its platform is only in its config, and BuildKit takes it as it is)."""
    try:
        proc = engine.run_cli(["buildx", "imagetools", "inspect", "--raw", ref], timeout=60)
    except EngineError:  # timed out: the registry does not serve it in time
        return False
    if proc.returncode != 0:
        return False
    try:
        manifest = load_json(proc.stdout, "the registry's manifest list", ConfigError)
    except ConfigError:
        return False
    listed = manifest.get("manifests") if isinstance(manifest, dict) else None
    if not isinstance(listed, list):
        return isinstance(manifest, dict)
    return any(isinstance(m, dict) and isinstance(m.get("platform"), dict)
               and f"{m['platform'].get('os')}/{m['platform'].get('architecture')}"
               == _os_arch(platform) for m in listed)


def check_build_bases(eff: EffectiveSpec, engine: DockerEngine, builder_arch: str,
                      wheels_reused: bool = False) -> None:
    """Preflight: every base the stages this build will build start from (the runtime, and the
    wheels where they are exported), each for its stage's platform."""
    from edgevllm.builder.dockerfile import bases, stages
    from edgevllm.builder.render import render_dockerfile

    text = render_dockerfile(eff)
    targets = [t for t in ("wheels", "runtime") if t in stages(text)
               and not (t == "wheels" and wheels_reused)]
    check_stage_bases(engine, bases(text, targets, eff.platform, f"linux/{builder_arch}"),
                      eff.platform)


def check_stage_bases(engine: DockerEngine, pairs: list[tuple[str, str]],
                      target_platform: str) -> None:
    """Each (image, platform) is on the engine for that platform, or its registry serves it
    there; else one line saying which and how to give it (exit 4)."""
    for ref, platform in pairs:
        local = local_platform(engine, ref)
        if local is not None and _os_arch(local) == _os_arch(platform):
            continue
        if registry_serves(engine, ref, platform):
            continue
        held = f"holds it for {local} only" if local else "does not hold it"
        remedy = (f"give its {platform} twin (the same Python) as bytecode_image in a --spec "
                  "file, or pull it there" if platform != target_platform and local
                  else f"pull or load it there for {platform} (docker pull --platform "
                  f"{platform} {ref})")
        raise ImageNotFoundError(
            f"base image {ref} is needed for {platform} (a stage runs there) but engine "
            f"{engine.describe()} {held} and its registry does not serve it: {remedy}")
