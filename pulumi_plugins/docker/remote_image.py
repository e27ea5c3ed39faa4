"""`docker.RemoteImage` (terraform-provider-docker's `docker_image`): an image made present on
the endpoint, taken as it is if the name already resolves locally, else pulled.

    inputs, failures = check({"name": "busybox:1.36", "keepLocally": True}, olds=None)
    image_id, state = create(op, inputs)   # id is `<image id><name>`, as the provider sets it
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pulumi_plugins.docker import props
from pulumi_plugins.docker.engine import Engine, EngineError
from pulumi_plugins.docker.ops import DockerError, Op
from pulumi_plugins.docker.props import Failure, Prop

TYPE = "docker:index/remoteImage:RemoteImage"
SCHEMA: dict[str, Prop] = {
    "name": Prop("str", force_new=True, required=True),
    "keepLocally": Prop("bool"),
    "forceRemove": Prop("bool"),
    "pullTriggers": Prop("set", force_new=True),
    "triggers": Prop("map", force_new=True),
    "platform": Prop("str", force_new=True, default=""),
}
OUTPUTS = ["imageId", "repoDigest"]


def check(news: dict[str, Any], olds: dict[str, Any] | None) -> tuple[dict, list[Failure]]:
    failures = props.unsupported(SCHEMA, news, "docker.RemoteImage")
    failures += props.validate(SCHEMA, news)
    return props.apply_defaults(SCHEMA, news, olds), failures


def diff(olds: dict[str, Any], news: dict[str, Any], ignore: list[str]) -> props.DiffResult:
    return props.diff(SCHEMA, olds, news, ignore)


def find_image(
    engine: Engine, name: str, platform: str, log: Callable[[str], None], timeout: float
) -> dict[str, Any]:
    """The local image `name` resolves to; pulled (for `platform`, if given) only if there is
    none. A local image is used whatever its platform, as the Terraform provider does."""
    if not name:
        raise DockerError("empty image name is not allowed")
    found = engine.inspect_image(name)
    if found is not None:
        return found
    args = ["pull", *(["--platform", platform] if platform else []), name]
    try:
        engine.run(args, on_line=log, timeout=timeout)
    except EngineError as err:
        raise DockerError(f"unable to pull image {name}: {err}") from None
    found = engine.inspect_image(name)
    if found is None:
        raise DockerError(f"unable to find or pull image {name}")
    return found


def repo_digest(name: str, image: dict[str, Any]) -> str:
    """The provider's choice among the image's RepoDigests: the only one, else the first that
    starts with the name without its tag, else the first; "" for images never pulled/pushed."""
    digests = image.get("RepoDigests") or []
    if len(digests) <= 1:
        return digests[0] if digests else ""
    colon = name.find(":")
    bare = name[:colon] if colon != -1 else name
    return next((d for d in digests if d.startswith(bare)), digests[0])


def _state(inputs: dict[str, Any], image: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    state = {**props.without_reserved(inputs), **props.kept_meta(inputs)}
    state["imageId"] = image["Id"]
    state["repoDigest"] = repo_digest(inputs["name"], image)
    state["id"] = image["Id"] + inputs["name"]
    return state["id"], state


def create(op: Op, inputs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    if op.preview:
        return "", props.unknowns_for(SCHEMA, inputs, OUTPUTS)
    try:
        image = find_image(
            op.engine, inputs["name"], inputs.get("platform") or "", op.status, op.timeout
        )
    except (DockerError, EngineError) as err:
        raise DockerError(f"Unable to read Docker image into resource: {err}") from None
    rid, state = _state(inputs, image)
    return rid, {**state, props.META_KEY: props.bridge_meta(None, op.timeout)}


def read(op: Op, state: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """None once no local image has the name (the engine then drops it from the state)."""
    image = op.engine.inspect_image(state["name"])
    if image is None:
        return None
    return _state(state, image)


def update(op: Op, olds: dict[str, Any], news: dict[str, Any]) -> dict[str, Any]:
    if op.preview:
        return {
            **props.without_reserved(olds),
            **props.kept_meta(olds),
            **props.without_reserved(news),
        }
    try:
        image = find_image(
            op.engine, news["name"], news.get("platform") or "", op.status, op.timeout
        )
    except (DockerError, EngineError) as err:
        raise DockerError(f"Unable to read Docker image into resource: {err}") from None
    return {**_state(news, image)[1], **props.kept_meta(olds)}


def delete(op: Op, state: dict[str, Any]) -> None:
    """Removes the image by name (an untag if other tags remain) unless keepLocally."""
    if state.get("keepLocally"):
        return
    name = state.get("name") or ""
    if not name:
        raise DockerError("Unable to remove Docker image: empty image name is not allowed")
    if op.engine.inspect_image(name) is None:
        return
    try:
        op.engine.remove_image(name, force=bool(state.get("forceRemove")))
    except EngineError as err:
        raise DockerError(f"Unable to remove Docker image: {err}") from None
