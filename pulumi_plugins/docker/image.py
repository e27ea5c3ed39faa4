"""`docker.Image`, pulumi-docker's native (not bridged) build resource.

    inputs, failures = check(news, op)           # defaults, build.contextDigest, build.platform
    result = diff(state, inputs)                 # against the inputs saved in the state
    image_name, state = build(op, inputs)        # docker build, then push unless skipPush

As in pulumi-docker 5.x: Check fills `build.context` (".") and `build.dockerfile`
(`<context>/Dockerfile`; a relative path is relative to the program's directory, not the
context), adds `build.contextDigest` (see context_digest) and `build.platform` (linux/<arch of
the machine running Pulumi>) and `buildOnPreview` (false). Diff compares those inputs with the
ones saved under `__inputs` in the state: any change is an in-place update, i.e. a rebuild,
never a replacement; registry credentials alone never rebuild. The id is `imageName`;
`repoDigest` is the local image id (sha256:...) with skipPush, else `<repo>@<digest>` of the
push. Read returns the state as it is; Delete leaves the image in place.
"""

from __future__ import annotations

import os
import platform as host_platform
import re
import tempfile
from pathlib import Path
from typing import Any

from pulumi_plugins.docker.context_digest import ContextError, context_digest
from pulumi_plugins.docker.engine import EngineError
from pulumi_plugins.docker.ops import DockerError, Op
from pulumi_plugins.docker.props import Failure
from pulumi_plugins.rpc import SECRET_SIG, SIG_KEY, UNKNOWN, contains_unknown

TYPE = "docker:index/image:Image"
INPUTS_KEY = "__inputs"
OUTPUTS = ["baseImageName", "context", "dockerfile", "platform", "registryServer", "repoDigest"]
BUILD_FIELDS = {
    "context",
    "dockerfile",
    "args",
    "target",
    "builderVersion",
    "platform",
    "addHosts",
    "network",
    "cacheFrom",
    "contextDigest",
}
TOP_FIELDS = {"imageName", "build", "skipPush", "buildOnPreview", "registry"}
GOARCH = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "armv7l": "arm",
    "i686": "386",
    "i386": "386",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
    "riscv64": "riscv64",
}
_DOMAIN = re.compile(r"^(localhost|[^/]*[.:][^/]*)$")


def host_platform_name() -> str:
    machine = host_platform.machine().lower()
    return f"linux/{GOARCH.get(machine, machine)}"


def build_defaults(build: Any) -> tuple[str | None, str | None]:
    """(context, dockerfile) with the provider's defaults; None where the value is unknown."""
    if not isinstance(build, dict):
        return ".", "Dockerfile"
    context = build.get("context")
    context = None if contains_unknown(context) else (context or ".")
    dockerfile = build.get("dockerfile")
    if contains_unknown(dockerfile):
        dockerfile = None
    elif not dockerfile:
        dockerfile = None if context is None else os.path.join(context, "Dockerfile")
    return context, dockerfile


def canonical(name: str) -> str | None:
    """Why `name` is not a fully qualified reference (the registry lookup's requirement)."""
    first = name.split("/", 1)[0]
    qualified = "/" in name and _DOMAIN.match(first)
    if qualified and (
        first != "docker.io" or name.startswith("docker.io/library/") or name.count("/") > 1
    ):
        return None
    return (
        f"{name!r}: repository name must be canonical.\nThis resource requires all image names to "
        "be fully qualified.\nFor example, if you are attempting to push to Dockerhub, prefix "
        "your image name with `docker.io`:\n\n`docker.io/repository/image:tag`"
    )


def check(news: dict[str, Any], op: Op | None) -> tuple[dict[str, Any], list[Failure]]:
    failures = [
        Failure(k, f"docker.Image: '{k}' is not implemented by this provider")
        for k in sorted(set(news) - TOP_FIELDS)
        if not k.startswith("__")
    ]
    inputs = {k: v for k, v in news.items() if v is not None}
    on_preview = inputs.get("buildOnPreview")
    inputs["buildOnPreview"] = on_preview if isinstance(on_preview, bool) else False
    raw = inputs.get("build")
    build = dict(raw) if isinstance(raw, dict) else {}
    failures += [
        Failure(f"build.{k}", f"docker.Image: 'build.{k}' is not implemented by this provider")
        for k in sorted(set(build) - BUILD_FIELDS)
    ]
    context, dockerfile = build_defaults(raw)
    if context is not None:
        build["context"] = context
    if dockerfile is not None:
        build["dockerfile"] = dockerfile
        if (reason := _dockerfile_problem(context or ".", dockerfile)) is not None:
            failures.append(Failure("build.dockerfile", reason))
        elif context is not None:
            try:
                build["contextDigest"] = context_digest(context, dockerfile)
            except ContextError as err:
                failures.append(Failure("build.context", str(err)))
    if build.get("platform") is None:
        build["platform"] = host_platform_name()
        if op is not None:
            op.info(
                f"Building your image for {build['platform']} architecture.\nTo ensure you are "
                "building for the correct platform, consider explicitly setting the `platform` "
                "field on ImageBuildOptions."
            )
    inputs["build"] = build
    cache = ((build.get("cacheFrom") or {}).get("images")) or []
    name = inputs.get("imageName")
    if (cache or not inputs.get("skipPush")) and isinstance(name, str) and name != UNKNOWN:
        for ref in [name, *(c for c in cache if isinstance(c, str) and c != UNKNOWN)]:
            if (reason := canonical(ref)) is not None:
                failures.append(Failure("imageName", reason))
                break
    return inputs, failures


def _dockerfile_problem(context: str, dockerfile: str) -> str | None:
    if Path(dockerfile).exists():
        return None
    if os.path.isabs(dockerfile):
        return f"expected a relative Dockerfile path; got {dockerfile!r} instead: no such file"
    joined = os.path.join(context, dockerfile)
    if not Path(joined).exists():
        return f"could not open dockerfile at relative path {dockerfile!r}: no such file"
    return (
        f"could not open dockerfile at relative path {dockerfile!r}. "
        f"Try setting `dockerfile` to {joined!r}"
    )


def saved_inputs(state: dict[str, Any]) -> dict[str, Any]:
    saved = state.get(INPUTS_KEY)
    if isinstance(saved, dict) and saved.get(SIG_KEY) == SECRET_SIG:
        saved = saved.get("value")
    return saved if isinstance(saved, dict) else {}


def diff(state: dict[str, Any], news: dict[str, Any]) -> dict[str, str]:
    """Property -> ADD/DELETE/UPDATE of the new inputs against the saved ones."""
    olds = {k: v for k, v in saved_inputs(state).items() if v is not None}
    news = {k: v for k, v in news.items() if v is not None and not k.startswith("__")}
    changes: dict[str, str] = {}
    for key in sorted(set(olds) | set(news)):
        if key not in olds:
            changes[key] = "ADD"
        elif key not in news:
            changes[key] = "DELETE"
        elif key == "registry" and isinstance(olds[key], dict) and isinstance(news[key], dict):
            if olds[key].get("server") != news[key].get("server"):
                changes[key] = "UPDATE"
        elif olds[key] != news[key] or contains_unknown(news[key]):
            changes[key] = "UPDATE"
    return changes


def can_preview(op: Op, inputs: dict[str, Any]) -> bool:
    if contains_unknown(inputs.get("buildOnPreview")):
        op.warn(
            "buildOnPreview is unresolved; cannot build on preview. Continuing without preview "
            "image build. To avoid this warning, set buildOnPreview explicitly, and ensure all "
            "inputs are resolved at preview."
        )
        return False
    if not inputs.get("buildOnPreview"):
        return False
    build = inputs.get("build") or {}
    if any(contains_unknown(build.get(k)) for k in ("dockerfile", "context", "args")) or (
        contains_unknown(inputs.get("imageName"))
    ):
        op.warn(
            "Minimum inputs for build are unresolved. Continuing without preview image build. "
            "To avoid this warning, ensure image name, dockerfile, args, and context are "
            "resolved at preview."
        )
        return False
    return True


def build(op: Op, inputs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Builds (and pushes) the image; the id is the image name."""
    if op.preview and not can_preview(op, inputs):
        state = {k: v for k, v in inputs.items() if not k.startswith("__")}
        state.update({key: UNKNOWN for key in OUTPUTS})
        return "", state
    name = inputs["imageName"]
    spec = inputs.get("build") or {}
    context, dockerfile = build_defaults(spec)
    assert context is not None and dockerfile is not None
    registry = inputs.get("registry") or {}
    image_id = _docker_build(op, name, spec, context, dockerfile)
    outputs: dict[str, Any] = {
        "dockerfile": os.path.relpath(os.path.abspath(dockerfile), os.path.realpath(context)),
        "context": context,
        "baseImageName": name,
        "registryServer": registry.get("server") or "",
        "imageName": name,
        "platform": spec.get("platform") or "",
    }
    if inputs.get("skipPush") or op.preview:
        outputs["repoDigest"] = image_id
    else:
        outputs["repoDigest"] = _push(op, name, registry)
    outputs[INPUTS_KEY] = {SIG_KEY: SECRET_SIG, "value": inputs}
    return name, outputs


def _docker_build(op: Op, name: str, spec: dict[str, Any], context: str, dockerfile: str) -> str:
    engine = op.engine
    buildkit = spec.get("builderVersion", "BuilderBuildKit") == "BuilderBuildKit"
    if buildkit and not engine.buildkit():
        # The official provider builds with BuildKit through the engine's API and says nothing;
        # the image is the same, so this is progress, not a warning (a quiet `pulumi up`).
        op.status("BuildKit is not available (no docker buildx plugin): building with BuilderV1")
        buildkit = False
    with tempfile.TemporaryDirectory(prefix="pulumi-docker-build-") as scratch:
        iidfile = Path(scratch) / "iid"
        args = ["build", "-t", name, "-f", dockerfile, "--iidfile", str(iidfile)]
        for key, value in sorted((spec.get("args") or {}).items()):
            args += ["--build-arg", f"{key}={value}"]
        for flag, key in (
            ("--platform", "platform"),
            ("--target", "target"),
            ("--network", "network"),
        ):
            if spec.get(key):
                args += [flag, spec[key]]
        for host in spec.get("addHosts") or []:
            args += ["--add-host", host]
        for image in (spec.get("cacheFrom") or {}).get("images") or []:
            args += ["--cache-from", image]
        if buildkit:
            args.append("--load")
        env = {"DOCKER_BUILDKIT": "1" if buildkit else "0"}
        op.status("Starting Docker build")
        try:
            engine.run([*args, context], on_line=op.status, timeout=op.timeout, env=env)
        except EngineError as err:
            raise DockerError(f"error building image: {err}") from None
        image_id = iidfile.read_text().strip() if iidfile.exists() else ""
    if not image_id:
        raise DockerError("no image id found in build output")
    if engine.inspect_image(image_id) is None:
        raise DockerError("unable to find built image in local image store")
    op.status(f"Image built successfully, local id {image_id!r}")
    return image_id


def normalized_repo(name: str) -> str:
    """The repository of `name` without tag or digest, as Docker normalises it."""
    repo = name.split("@", 1)[0]
    last = repo.rsplit("/", 1)[-1]
    if ":" in last:
        repo = repo[: len(repo) - len(last)] + last.split(":", 1)[0]
    first = repo.split("/", 1)[0]
    if "/" not in repo or not _DOMAIN.match(first):
        repo = "docker.io/" + (repo if "/" in repo else "library/" + repo)
    return repo


def _push(op: Op, name: str, registry: dict[str, Any]) -> str:
    """`docker push`, logged in with the registry's credentials (in a config of its own) if
    given, else with the Docker CLI's; the digest the push reports."""
    with tempfile.TemporaryDirectory(prefix="pulumi-docker-auth-") as config:
        env: dict[str, str] = {}
        if registry.get("username") and registry.get("password"):
            env["DOCKER_CONFIG"] = config
            server = registry.get("server") or name.split("/", 1)[0]
            try:
                op.engine.run(
                    ["login", "-u", registry["username"], "--password-stdin", server],
                    stdin=str(registry["password"]).encode(),
                    env=env,
                )
            except EngineError as err:
                raise DockerError(f"error logging in to {server}: {err}") from None
        op.status("Pushing Image to the registry")
        try:
            output = op.engine.run(["push", name], on_line=op.status, timeout=op.timeout, env=env)
        except EngineError as err:
            raise DockerError(str(err)) from None
    found = re.findall(r"digest: (sha256:[0-9a-f]{64})", output)
    if not found:
        raise DockerError("Push completed without reporting a digest")
    return f"{normalized_repo(name)}@{found[-1]}"
