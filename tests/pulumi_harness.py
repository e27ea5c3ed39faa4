"""Runs the stack program under Pulumi mocks and records every resource, in registration order.

Test-only: no Pulumi CLI or provider plugin is needed. Each registration keeps what the engine
would see: type, name, inputs, parent, dependencies, provider and the replace options.

    recording = record_stack({"cards": "2", "accelerator": "sim"})
    recording.of_type("docker:index/container:Container")
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import runpy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import rpc
from pulumi.runtime import settings as runtime_settings
from pulumi.runtime import stack as pulumi_stack
from pulumi.runtime.sync_await import _sync_await

PROJECT = "paddleocr-fleet"
REPO = Path(__file__).resolve().parent.parent
PROGRAM = REPO / "__main__.py"

CONTAINER = "docker:index/container:Container"
IMAGE = "docker:index/image:Image"
REMOTE_IMAGE = "docker:index/remoteImage:RemoteImage"
STACK_REFERENCE = "pulumi:pulumi:StackReference"
COMMAND = "command:local:Command"
PROVIDER = "pulumi:providers:docker"
RUN = "command:local:run"
MOCK_STARTED = "2026-01-01T00:00:00.000000000Z running=true"


@dataclass
class Registration:
    urn: str
    type: str
    name: str
    inputs: dict[str, Any]
    parent: str
    dependencies: list[str]
    provider: str
    custom: bool
    delete_before_replace: bool
    ignore_changes: list[str]
    replace_on_changes: list[str]
    aliases: list[str] = field(default_factory=list)
    """The names of the aliases given (by spec, as the engine receives them)."""
    root_aliases: list[str] = field(default_factory=list)
    """The names of the aliases that say the resource had no parent ('' for its own name)."""


@dataclass
class Recording:
    resources: list[Registration] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    """Each invoke: (token, arguments)."""

    def of_type(self, type_: str) -> list[Registration]:
        return [r for r in self.resources if r.type == type_]

    def named(self, name: str) -> Registration:
        """The custom resource (container, command, ...) of that logical name."""
        matches = [r for r in self.resources if r.name == name and r.custom]
        assert len(matches) == 1, f"{len(matches)} resources named {name!r}"
        return matches[0]

    def by_urn(self, urn: str) -> Registration:
        return next(r for r in self.resources if r.urn == urn)


@dataclass(frozen=True)
class Growth:
    """What an update from one config to a larger one does to the stack's resources."""

    changed: list[str]
    """The sorted names of the resources both have whose inputs differ."""
    added: list[Registration]


def growth(before: Recording, after: Recording) -> Growth:
    """The update from ``before`` to ``after``; a resource of ``before`` that ``after`` lacks
    (one the update would delete) fails the test, naming it."""
    old = {r.urn: r for r in before.resources}
    new = {r.urn: r for r in after.resources}
    gone = sorted(r.name for urn, r in old.items() if urn not in new)
    assert not gone, f"the update removes {gone}"
    return Growth(
        changed=sorted(r.name for urn, r in old.items() if r.inputs != new[urn].inputs),
        added=[r for urn, r in new.items() if urn not in old],
    )


class _Mocks(pulumi.runtime.Mocks):
    """Every custom resource gets a stable id and echoes its inputs; commands print `ok` (in a
    preview, like the engine, their output is not known yet)."""

    def __init__(
        self,
        preview: bool,
        previous_outputs: dict[str, Any] | None = None,
        recording: Recording | None = None,
    ):
        self.preview = preview
        self.previous_outputs = previous_outputs or {}
        self.recording = recording

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        state = dict(args.inputs)
        if args.typ == STACK_REFERENCE:
            return f"{args.name}-id", {**state, "outputs": self.previous_outputs}
        if args.typ == COMMAND and not self.preview:
            state.setdefault("stdout", "ok")
            state.setdefault("stderr", "")
        if args.typ == IMAGE:
            state.setdefault("imageName", args.inputs.get("imageName"))
            state.setdefault("repoDigest", f"{args.inputs.get('imageName')}@sha256:{'0' * 64}")
        if args.typ == REMOTE_IMAGE:
            state.setdefault("imageId", f"sha256:{args.name}")
            state.setdefault("repoDigest", f"{args.inputs.get('name')}@sha256:{'1' * 64}")
        return f"{args.name}-id", state

    def call(self, args: pulumi.runtime.MockCallArgs):
        if self.recording is not None:
            self.recording.calls.append((args.token, dict(args.args)))
        if args.token == RUN:  # the containers' start times (`containers.last_started`)
            return {**args.args, "stdout": MOCK_STARTED, "stderr": ""}
        return {}


class _RecordingMonitor(pulumi_mocks.MockMonitor):
    def __init__(self, mocks: pulumi.runtime.Mocks, recording: Recording):
        super().__init__(mocks)
        self.recording = recording

    def RegisterResource(self, request):
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            self.recording.resources.append(
                Registration(
                    urn=response.urn,
                    type=request.type,
                    name=request.name,
                    inputs=rpc.deserialize_properties(request.object) if request.custom else {},
                    parent=request.parent,
                    dependencies=list(request.dependencies),
                    provider=request.provider,
                    custom=request.custom,
                    delete_before_replace=request.deleteBeforeReplace,
                    ignore_changes=list(request.ignoreChanges),
                    replace_on_changes=list(request.replaceOnChanges),
                    aliases=[a.spec.name for a in request.aliases if a.spec.name],
                    root_aliases=[a.spec.name for a in request.aliases if a.spec.noParent],
                )
            )
        return response


def record_stack(
    config: dict[str, str],
    *,
    preview: bool = False,
    recording: Recording | None = None,
    secrets: dict[str, str] | None = None,
    previous_outputs: dict[str, Any] | None = None,
) -> Recording:
    """Run `__main__.py` with `config` (keys without the project prefix) and record it.

    `secrets` are config values the stack holds as Pulumi secrets. A config that names no token
    (and says nothing of `allowOpenAccess`) gets `allowOpenAccess: true`, so tests about other
    things need not configure access. Pass `recording` to see what was registered even when the
    program raises. `previous_outputs` are the stack's outputs of its last update (what the
    program reads through its reference to itself).
    """
    secrets = secrets or {}
    config = dict(config)
    if not {"tokens", "adminTokens", "allowOpenAccess"} & (set(config) | set(secrets)):
        config["allowOpenAccess"] = "true"
    config.update(secrets)
    recording = recording if recording is not None else Recording()
    # The SDK runs on the thread's current loop; a test before us may have closed or unset it.
    # The loop of the recording before is closed (its selector, self-pipe and executor: about
    # 20 descriptors a test that the suite's process would otherwise hold to its end).
    _close_idle_loop()
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return _record(config, secrets, preview, recording, previous_outputs)
    except BaseException:
        # The test asserts on the error it expected; the SDK's other outputs failed with it or
        # still wait on it, and each would print itself when collected ("Task exception was never
        # retrieved", "Task was destroyed but it is pending!": a million lines at the end of the
        # suite's output, after its summary).
        loop.set_exception_handler(_quiet_about_abandoned_tasks)
        raise


def _record(
    config: dict[str, str],
    secrets: dict[str, str],
    preview: bool,
    recording: Recording,
    previous_outputs: dict[str, Any] | None,
) -> Recording:
    runtime_settings.reset_options()
    # As the language host hands it over: in PULUMI_CONFIG (what the program lists keys of),
    # which `pulumi-language-python-exec` also sets as the SDK's config.
    full = {f"{PROJECT}:{k}": v for k, v in config.items()}
    pulumi.runtime.set_all_config(full, [f"{PROJECT}:{k}" for k in secrets])
    env_before = os.environ.get("PULUMI_CONFIG")
    os.environ["PULUMI_CONFIG"] = json.dumps(full)
    mocks = _Mocks(preview, previous_outputs, recording)
    pulumi_mocks.set_mocks(
        mocks,
        project=PROJECT,
        stack="test",
        preview=preview,
        monitor=_RecordingMonitor(mocks, recording),
    )
    try:
        runpy.run_path(str(PROGRAM), run_name="__main__")
    finally:
        if env_before is None:
            os.environ.pop("PULUMI_CONFIG", None)
        else:
            os.environ["PULUMI_CONFIG"] = env_before
    stack = runtime_settings.get_root_resource()
    recording.outputs = {
        key: _resolve(value) for key, value in getattr(stack, "outputs", {}).items()
    }
    _sync_await(pulumi_stack.wait_for_rpcs())
    return recording


def _quiet_about_abandoned_tasks(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    message = context.get("message", "")
    if "never retrieved" not in message and "destroyed but it is pending" not in message:
        loop.default_exception_handler(context)


def _close_idle_loop() -> None:
    with contextlib.suppress(RuntimeError):  # none set
        loop = asyncio.get_event_loop_policy().get_event_loop()
        # a loop with work left (a program that raised) is left alone: closing it would drop
        # its coroutines unawaited (asyncio keeps the callbacks it would run in `_ready`)
        left = asyncio.all_tasks(loop) or getattr(loop, "_ready", None)
        if not loop.is_running() and not loop.is_closed() and not left:
            loop.close()


def _resolve(value: Any) -> Any:
    output = pulumi.Output.from_input(value)
    return _sync_await(output.future(with_unknowns=True))
