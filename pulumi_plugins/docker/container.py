"""`docker.Container`'s lifecycle, as terraform-provider-docker v4.5 runs it behind the bridge.

    inputs, failures = check(news, olds, name="web", seed=b"...", proposed=None)
    result = diff(state, inputs, ignore=[])       # ForceNew changes replace
    container_id, state = create(op, inputs)      # pull if missing, create, upload, start
    delete(op, container_id, state)               # stop (grace), rm -f -v, wait

Create runs the provider's steps in order: find (or pull) the image, create, copy each upload
into the stopped container, start (if `start`), wait for a healthy healthcheck (if `wait`),
wait for the exit (if `attach`), then Read. A failure after the container exists leaves it in
the state with the failure recorded (`InitError`), as the plugin SDK's partial state does: the
config and the id; the next `pulumi up` retries with an (empty) update, which clears the error
without starting the container.
"""

from __future__ import annotations

import base64
import hashlib
import io
import secrets
import tarfile
import time
from pathlib import Path
from typing import Any

from pulumi_plugins.docker import props
from pulumi_plugins.docker.container_schema import (
    MIB,
    OUTPUTS,
    SCHEMA,
    TYPE,
    UPDATABLE,
    create_body,
)
from pulumi_plugins.docker.container_state import state_from_inspect
from pulumi_plugins.docker.engine import EngineError
from pulumi_plugins.docker.ops import DockerError, InitError, Op
from pulumi_plugins.docker.props import Failure
from pulumi_plugins.docker.remote_image import find_image
from pulumi_plugins.rpc import contains_unknown

__all__ = ["TYPE", "autoname", "check", "create", "delete", "diff", "read", "update"]
AUTONAME_HEX = 7
SCHEMA_VERSION = "2"
"""docker_container's Terraform schema version, which the bridge records in `__meta`."""


def autoname(name: str, seed: bytes) -> str:
    """`<name>-<7 hex>`, the bridge's autoname, stable for a given random seed."""
    digest = hashlib.sha256(seed).hexdigest() if seed else secrets.token_hex(8)
    return f"{name}-{digest[:AUTONAME_HEX]}"


def check(
    news: dict[str, Any],
    olds: dict[str, Any] | None,
    name: str,
    seed: bytes,
    proposed: str | None,
    autonaming_disabled: bool = False,
) -> tuple[dict[str, Any], list[Failure]]:
    """The inputs with defaults and an autoname; failures name the property at fault."""
    failures = props.unsupported(SCHEMA, news, "docker.Container")
    inputs = props.apply_defaults(SCHEMA, news, olds)
    if "name" not in inputs:
        old_defaults = (olds or {}).get(props.DEFAULTS_KEY) or []
        if olds and olds.get("name") and "name" in old_defaults:
            inputs["name"] = olds["name"]
        elif not autonaming_disabled:
            inputs["name"] = proposed or autoname(name, seed)
        if "name" in inputs:
            inputs[props.DEFAULTS_KEY] = sorted({*inputs[props.DEFAULTS_KEY], "name"})
    failures += props.validate(SCHEMA, inputs)
    failures += _check_uploads(inputs.get("uploads"))
    command = inputs.get("command")
    if command and not contains_unknown(command) and any(arg == "" for arg in command):
        failures.append(Failure("command", "command: values for command may not be empty"))
    return inputs, failures


def _check_uploads(uploads: Any) -> list[Failure]:
    failures = []
    for i, upload in enumerate(uploads if isinstance(uploads, list) else []):
        if not isinstance(upload, dict) or contains_unknown(upload):
            continue
        given = [k for k in ("content", "contentBase64", "source") if upload.get(k)]
        if len(given) != 1:
            failures.append(
                Failure(
                    f"uploads[{i}]",
                    f"uploads[{i}]: exactly one of 'content', 'contentBase64' or 'source' must "
                    f"be set (got {', '.join(given) or 'none'})",
                )
            )
    return failures


def diff(state: dict[str, Any], inputs: dict[str, Any], ignore: list[str]) -> props.DiffResult:
    return props.diff(SCHEMA, state, inputs, ignore)


def upload_tar(upload: dict[str, Any]) -> bytes:
    """One upload as the tar the provider copies to "/": the file under its path as given,
    mode `permissions`, else 0744 if executable, else 0644."""
    if upload.get("content"):
        data = str(upload["content"]).encode()
    elif upload.get("contentBase64"):
        data = base64.b64decode(upload["contentBase64"])
    elif upload.get("source"):
        try:
            data = Path(upload["source"]).read_bytes()
        except OSError as err:
            raise DockerError(f"could not read file: {err}") from None
    else:
        raise DockerError(
            "error with upload content: one of 'content', 'content_base64', or 'source' must be set"
        )
    if upload.get("permissions"):
        mode = int(upload["permissions"], 8)
    else:
        mode = 0o744 if upload.get("executable") else 0o644
    info = tarfile.TarInfo(upload["file"])
    info.size, info.mode, info.mtime = len(data), mode, time.time()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def create(op: Op, inputs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    if op.preview:
        return "", props.unknowns_for(SCHEMA, inputs, OUTPUTS)
    engine, image = op.engine, inputs["image"]
    try:
        find_image(engine, image, "", op.status, op.timeout)
    except (DockerError, EngineError) as err:
        raise DockerError(f"Unable to create container with image {image}: {err}") from None
    try:
        body = create_body(inputs)
    except ValueError as err:
        raise DockerError(f"Unable to parse volumes: {err}") from None
    try:
        cid = engine.create_container(inputs["name"], body, inputs.get("platform") or None)
    except EngineError as err:
        raise DockerError(f"Unable to create container: {err}") from None
    try:
        _initialise(op, cid, inputs)
    except (DockerError, EngineError) as err:
        # The plugin SDK's partial state: the config and the id, nothing read back (so the
        # next `up` clears the error with an empty update and leaves the container as it is).
        state = props.without_reserved(inputs)
        raise InitError(cid, {**state, "id": cid, **_meta(op)}, [str(err)]) from None
    return cid, {**_read_back(op, cid, inputs), **_meta(op)}


def _meta(op: Op) -> dict[str, Any]:
    return {props.META_KEY: props.bridge_meta(SCHEMA_VERSION, op.timeout)}


def _initialise(op: Op, cid: str, inputs: dict[str, Any]) -> None:
    engine = op.engine
    for upload in inputs.get("uploads") or []:
        try:
            engine.put_archive(cid, "/", upload_tar(upload))
        except EngineError as err:
            raise DockerError(f"Unable to upload volume content: {err}") from None
    if inputs.get("start", True):
        try:
            engine.start(cid)
        except EngineError as err:
            raise DockerError(f"Unable to start container: {err}") from None
        if inputs.get("wait"):
            _wait_healthy(op, cid, int(inputs.get("waitTimeout", 60)))
    if inputs.get("attach"):
        try:
            engine.wait(cid, "not-running", timeout=op.timeout)
        except EngineError as err:
            raise DockerError(f"Unable to wait container end of execution: {err}") from None
        if inputs.get("logs"):
            inputs["containerLogs"] = engine.logs(cid, bool(inputs.get("tty")))


def _wait_healthy(op: Op, cid: str, seconds: int) -> None:
    deadline = time.monotonic() + seconds
    while True:
        info = op.engine.inspect_container(cid) or {}
        health = (info.get("State") or {}).get("Health")
        if not health:
            raise DockerError(
                "you have supplied a 'wait' argument, but the container does not have a "
                "healthcheck defined. Please remove the 'wait' argument or add a 'healthcheck' "
                "attribute"
            )
        if health.get("Status") == "healthy":
            return
        if time.monotonic() >= deadline:
            raise DockerError("container failed to be in healthy state")
        op.status(f"waiting for container {cid[:12]} to be healthy ({health.get('Status')})")
        time.sleep(1)


def _read_back(op: Op, cid: str, prior: dict[str, Any]) -> dict[str, Any]:
    info = op.engine.inspect_container(cid)
    if info is None:
        # rm=True and the container already exited: the provider's Read clears the id.
        raise DockerError(f"container {cid[:12]} is gone right after its creation")
    return state_from_inspect(info, prior)


def read(
    op: Op, cid: str, state: dict[str, Any], inputs: dict[str, Any]
) -> tuple[str, dict[str, Any], dict[str, Any]] | None:
    """The refreshed (id, state, inputs); None when the container is gone."""
    info = op.engine.inspect_container(cid)
    if info is None:
        return None
    prior = state or inputs
    if not prior:
        name = info.get("Name", "").lstrip("/")
        prior = {"name": name, "image": (info.get("Config") or {}).get("Image", "")}
    fresh = state_from_inspect(info, prior)
    new_inputs = inputs or {k: fresh[k] for k in ("name", "image")}
    return fresh["id"], fresh, new_inputs


def update(op: Op, cid: str, olds: dict[str, Any], news: dict[str, Any]) -> dict[str, Any]:
    """Starts a stopped container whose mustRun is back to true, applies restart policy and
    resource changes with `docker update`; everything else only changes the state."""
    state = {**props.without_reserved(olds), **props.kept_meta(olds)}
    for key, prop in SCHEMA.items():
        if key in news:
            state[key] = props.without_reserved(news[key])
        elif not prop.computed:
            state.pop(key, None)
    if op.preview:
        return state
    engine = op.engine
    if olds.get("mustRun") is False and news.get("mustRun", True) and news.get("start", True):
        try:
            engine.start(cid)
        except EngineError as err:
            raise DockerError(f"Unable to start container: {err}") from None
    if any(not props.equal(SCHEMA[k], olds.get(k), news.get(k)) for k in UPDATABLE):
        body: dict[str, Any] = {
            "RestartPolicy": {
                "Name": news.get("restart", ""),
                "MaximumRetryCount": news.get("maxRetryCount") or 0,
            },
            "CpuShares": news.get("cpuShares") or 0,
            "Memory": (news.get("memory") or 0) * MIB,
            "MemoryReservation": (news.get("memoryReservation") or 0) * MIB,
            "CpusetCpus": news.get("cpuSet") or "",
        }
        if news.get("memorySwap"):
            swap = news["memorySwap"]
            body["MemorySwap"] = swap * MIB if swap > 0 else swap
        try:
            engine.update(cid, body)
        except EngineError as err:
            raise DockerError(f"Unable to update a container: {err}") from None
    return state


def _ignorable(err: EngineError) -> bool:
    text = str(err)
    return err.not_found or "No such container" in text or "is already in progress" in text


def delete(op: Op, cid: str, state: dict[str, Any]) -> None:
    """Stop with `destroyGraceSeconds` (0 unless set: the stop signal, then an immediate kill),
    force-remove with its anonymous volumes (`removeVolumes`, default true), wait it out."""
    engine = op.engine
    if not state.get("attach"):
        grace = max(int(state.get("destroyGraceSeconds") or 0), 0)
        try:
            engine.stop(cid, grace, timeout=op.timeout)
        except EngineError as err:
            if not _ignorable(err):
                raise DockerError(f"Error stopping container {cid}: {err}") from None
    try:
        engine.remove(cid, volumes=bool(state.get("removeVolumes", True)), timeout=op.timeout)
    except EngineError as err:
        if not _ignorable(err):
            raise DockerError(f"Error deleting container {cid}: {err}") from None
    condition = "removed" if state.get("rm") else "not-running"
    try:
        engine.wait(cid, condition, timeout=op.timeout)
    except EngineError as err:
        if not _ignorable(err):
            raise DockerError(f"Error waiting for container removal '{cid}': {err}") from None
