"""The `command` resource provider (plugin version 1.2.1): `command:local:Command` and the
`command:local:run` invoke, with the semantics of pulumi-command 1.2.1.

The engine starts it as `python -m pulumi_plugins.command [flags] ENGINE_ADDRESS`; it serves on a
loopback port that it prints on stdout. Install it for a PULUMI_HOME with a wrapper script::

    #!/bin/sh
    PYTHONPATH=/work/main exec /work/main/.venv/bin/python -m pulumi_plugins.command "$@"

    pulumi plugin install resource command 1.2.1 --file WRAPPER

Semantics, as users of `pulumi_command.local.Command` rely on them:

- Create runs `create` (not in a preview, where `stdout`/`stderr` are unknown); Update runs
  `update`, or `create` when there is no `update`; Delete runs `delete` with the last run's output
  in PULUMI_COMMAND_STDOUT/PULUMI_COMMAND_STDERR. A failing command fails the step, its output in
  the error; a failed create leaves nothing in the state.
- Diff compares old and new inputs: a change of `triggers` replaces, any other change updates in
  place, no change runs nothing. The engine's `ignoreChanges` paths keep their old values.
- Commands run as `interpreter + [command]` (default `/bin/sh -c`) in `dir` (default: the
  provider's working directory) with the provider's environment plus `environment`, `stdin` on
  standard input, and each output line logged to the engine unless `logging` says otherwise. Each
  runs in its own process group, ended on the engine's Cancel or on the step's custom timeout.
- Secrets are accepted; outputs that mirror secret inputs stay secret (`stdout`/`stderr` are secret
  only through `additionalSecretOutputs`, as with the original).
- `assetPaths`/`archivePaths` are not supported: Check refuses them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import IO, Any, NoReturn

import grpc
from google.protobuf import empty_pb2, struct_pb2
from pulumi.runtime.proto import (
    engine_pb2,
    engine_pb2_grpc,
    plugin_pb2,
    provider_pb2,
    provider_pb2_grpc,
)

from pulumi_plugins import rpc

PLUGIN_VERSION = "1.2.1"
COMMAND_TYPE = "command:local:Command"
RUN_TOKEN = "command:local:run"
DEFAULT_INTERPRETER = ("/bin/sh", "-c")
PREVIOUS_STDOUT = "PULUMI_COMMAND_STDOUT"
PREVIOUS_STDERR = "PULUMI_COMMAND_STDERR"
KILL_GRACE_SECONDS = 3.0
ERROR_OUTPUT_LIMIT = 64 * 1024
"""The most output (its tail) a failure's message carries: gRPC status messages are headers."""

LOGGING_VALUES = ("stdout", "stderr", "stdoutAndStderr", "none")
UNSUPPORTED = ("assetPaths", "archivePaths")

# The inputs shared by the resource and the invoke, and the shape each must have.
BASE_FIELDS = {
    "stdin": "string",
    "logging": "logging",
    "interpreter": "string_list",
    "dir": "string",
    "environment": "string_map",
    "assetPaths": "string_list",
    "archivePaths": "string_list",
    "addPreviousOutputInEnv": "bool",
}
COMMAND_FIELDS = {
    "triggers": "list",
    "create": "string",
    "update": "string",
    "delete": "string",
    **BASE_FIELDS,
}
RUN_FIELDS = {"command": "string", **BASE_FIELDS}
REPLACE_ON_CHANGES = frozenset({"triggers"})
KEPT_CONFIG_KEYS = ("__pulumi-go-provider-version",)
"""Reserved keys of the official provider's configuration inputs that CheckConfig carries over."""
_CHANGES = provider_pb2.DiffResponse.DIFF_SOME
_NO_CHANGES = provider_pb2.DiffResponse.DIFF_NONE

Props = Mapping[str, Any]
LogFn = Callable[[str], None]


# ---------------------------------------------------------------------------------------------
# Check: the inputs' shapes


def _is_string_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _is_string_map(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())


# Each field kind: what a value must be, and how to say so.
_SHAPES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "string": (lambda v: isinstance(v, str), "a string"),
    "bool": (lambda v: isinstance(v, bool), "a boolean"),
    "list": (lambda v: isinstance(v, list), "a list"),
    "string_list": (_is_string_list, "a list of strings"),
    "string_map": (_is_string_map, "a map of strings"),
    "logging": (lambda v: v in LOGGING_VALUES, f"one of {', '.join(LOGGING_VALUES)}"),
}


def check_inputs(inputs: Props, fields: Mapping[str, str]) -> list[tuple[str, str]]:
    """(property, reason) for each input the provider cannot take."""
    failures: list[tuple[str, str]] = []
    for name, value in inputs.items():
        kind = fields.get(name)
        if kind is None:
            if not name.startswith("__"):
                failures.append((name, f"unrecognized property {name!r}"))
        elif value is not None and value != rpc.UNKNOWN and not _SHAPES[kind][0](value):
            failures.append((name, f"{name} must be {_SHAPES[kind][1]}"))
        elif name in UNSUPPORTED and value:
            failures.append((name, f"{name} is not supported by this command provider"))
    return failures


# ---------------------------------------------------------------------------------------------
# Property paths (ignoreChanges, detailed diffs)

_PATH_TOKEN = re.compile(r'\.?([^.\[\]"]+)|\[(\d+|\*)\]|\["((?:[^"\\]|\\.)*)"\]')


def parse_path(path: str) -> list[str | int]:
    """`environment.FOO`, `triggers[0]`, `environment["a.b"]`, `triggers[*]` as segments."""
    segments: list[str | int] = []
    position = 0
    while position < len(path):
        match = _PATH_TOKEN.match(path, position)
        if match is None or match.end() == position:
            raise ValueError(f"invalid property path {path!r}")
        name, index, quoted = match.groups()
        if index is not None:
            segments.append("*" if index == "*" else int(index))
        elif quoted is not None:
            segments.append(json.loads(f'"{quoted}"'))
        else:
            segments.append(name)
        position = match.end()
    return segments


def format_path(segments: Iterable[str | int]) -> str:
    out = ""
    for segment in segments:
        if isinstance(segment, int):
            out += f"[{segment}]"
        elif re.fullmatch(r"[A-Za-z_$][A-Za-z0-9_$]*", segment):
            out += f".{segment}" if out else segment
        else:
            out += f"[{json.dumps(segment)}]"
    return out


_MISSING = object()


def _child(container: Any, key: str | int) -> Any:
    if isinstance(container, dict) and isinstance(key, str):
        return container.get(key, _MISSING)
    if isinstance(container, list) and isinstance(key, int) and 0 <= key < len(container):
        return container[key]
    return _MISSING


def _keys(*containers: Any) -> list[str | int]:
    keys: list[str | int] = []
    for container in containers:
        if isinstance(container, dict):
            keys += [k for k in container if k not in keys]
        elif isinstance(container, list):
            keys += [i for i in range(len(container)) if i not in keys]
    return keys


def _reset(segments: list[str | int], source: Any, dest: Any) -> None:
    """Set the value at `segments` in dest to the one in source; remove it where source has none."""
    head, rest = segments[0], segments[1:]
    targets = _keys(source, dest) if head == "*" else [head]
    for key in targets:
        old, new = _child(source, key), _child(dest, key)
        if rest:
            if new is not _MISSING and old is not _MISSING:
                _reset(rest, old, new)
        elif old is not _MISSING:
            if isinstance(dest, dict) or (isinstance(dest, list) and new is not _MISSING):
                dest[key] = old
        elif isinstance(dest, dict) and new is not _MISSING:
            del dest[key]


def apply_ignore_changes(news: Props, olds: Props, paths: Iterable[str]) -> dict[str, Any]:
    """New inputs with the ignored paths reset to their old values, as the engine does."""
    result = json.loads(json.dumps(dict(news)))
    for path in paths:
        _reset(parse_path(path), dict(olds), result)
    return result


# ---------------------------------------------------------------------------------------------
# Diff


@dataclass(frozen=True)
class InputDiff:
    detailed: dict[str, int]
    """Property path → `PropertyDiff.Kind`."""
    replaces: list[str]
    diffs: list[str]

    @property
    def changed(self) -> bool:
        return bool(self.detailed)


_ADD = provider_pb2.PropertyDiff.ADD
_DELETE = provider_pb2.PropertyDiff.DELETE
_UPDATE = provider_pb2.PropertyDiff.UPDATE
_AS_REPLACE = {
    _ADD: provider_pb2.PropertyDiff.ADD_REPLACE,
    _DELETE: provider_pb2.PropertyDiff.DELETE_REPLACE,
    _UPDATE: provider_pb2.PropertyDiff.UPDATE_REPLACE,
}


def _same(old: Any, new: Any) -> bool:
    """Equal and of the same types throughout (`True` is not `1`)."""
    if type(old) is not type(new):
        return False
    if isinstance(old, dict):
        return old.keys() == new.keys() and all(_same(old[k], new[k]) for k in old)
    if isinstance(old, list):
        return len(old) == len(new) and all(map(_same, old, new))
    return bool(old == new)


def _value_diff(path: list[str | int], old: Any, new: Any, out: dict[str, int]) -> None:
    if new == rpc.UNKNOWN or old == rpc.UNKNOWN:
        out[format_path(path)] = _UPDATE
        return
    if _same(old, new):
        return
    same_containers = (isinstance(old, dict) and isinstance(new, dict)) or (
        isinstance(old, list) and isinstance(new, list)
    )
    if not same_containers:
        out[format_path(path)] = _UPDATE
        return
    for key in _keys(old, new):
        old_value, new_value = _child(old, key), _child(new, key)
        if new_value is _MISSING:
            out[format_path([*path, key])] = _DELETE
        elif old_value is _MISSING:
            out[format_path([*path, key])] = _ADD
        else:
            _value_diff([*path, key], old_value, new_value, out)


def _present(props: Props, fields: Iterable[str]) -> dict[str, Any]:
    return {k: props[k] for k in fields if props.get(k) is not None}


def diff_inputs(olds: Props, news: Props, ignore_changes: Iterable[str] = ()) -> InputDiff:
    """What changed from the old inputs to the new: `triggers` replaces, the rest updates."""
    news = apply_ignore_changes(news, olds, ignore_changes)
    old, new = _present(olds, COMMAND_FIELDS), _present(news, COMMAND_FIELDS)
    detailed: dict[str, int] = {}
    _value_diff([], old, new, detailed)
    replaces: set[str] = set()
    diffs: set[str] = set()
    for path, kind in list(detailed.items()):
        top = str(parse_path(path)[0])
        diffs.add(top)
        if top in REPLACE_ON_CHANGES:
            detailed[path] = _AS_REPLACE[kind]
            replaces.add(top)
    return InputDiff(detailed=detailed, replaces=sorted(replaces), diffs=sorted(diffs))


# ---------------------------------------------------------------------------------------------
# Running a command


@dataclass(frozen=True)
class RunSpec:
    command: str
    interpreter: tuple[str, ...] = DEFAULT_INTERPRETER
    dir: str | None = None
    environment: Mapping[str, str] = field(default_factory=dict)
    stdin: str | None = None
    log_stdout: bool = True
    log_stderr: bool = True
    timeout: float | None = None

    @property
    def argv(self) -> list[str]:
        return [*self.interpreter, self.command]


def run_spec(command: str, props: Props, timeout: float | None = None) -> RunSpec:
    """How to run `command` given the resource's (plain) properties.

    The previous run's stdout/stderr (in `props`, as in a state) go into the environment unless
    `addPreviousOutputInEnv` is false; empty ones are left out, as the original does.
    """
    environment = dict(props.get("environment") or {})
    if props.get("addPreviousOutputInEnv") is not False:
        for variable, key in ((PREVIOUS_STDOUT, "stdout"), (PREVIOUS_STDERR, "stderr")):
            if props.get(key):
                environment[variable] = props[key]
    logging = props.get("logging") or "stdoutAndStderr"
    return RunSpec(
        command=command,
        interpreter=tuple(props.get("interpreter") or DEFAULT_INTERPRETER),
        dir=props.get("dir") or None,
        environment=environment,
        stdin=props.get("stdin") or None,
        log_stdout=logging in ("stdout", "stdoutAndStderr"),
        log_stderr=logging in ("stderr", "stdoutAndStderr"),
        timeout=timeout or None,
    )


@dataclass(frozen=True)
class RunResult:
    stdout: str
    stderr: str


class CommandFailed(Exception):
    """A command that failed to start, exited non-zero, or was ended; `str()` is the error."""

    def __init__(self, reason: str, command: str, output: str = "") -> None:
        if len(output) > ERROR_OUTPUT_LIMIT:
            elided = len(output) - ERROR_OUTPUT_LIMIT
            output = f"[... {elided} characters elided ...]\n{output[-ERROR_OUTPUT_LIMIT:]}"
        super().__init__(f"{reason}: running {json.dumps(command, ensure_ascii=False)}:\n{output}")
        self.reason = reason
        self.output = output


def trim_newline(text: str) -> str:
    """The output as the original keeps it: one trailing newline removed."""
    return text[:-1] if text.endswith("\n") else text


def exit_reason(returncode: int) -> str:
    if returncode >= 0:
        return f"exit status {returncode}"
    description = signal.strsignal(-returncode) or f"signal {-returncode}"
    return f"signal: {description.lower()}"


def _spawn_reason(error: OSError, spec: RunSpec) -> str:
    if spec.dir is not None and error.filename == spec.dir:
        return f"chdir {spec.dir}: {(error.strerror or str(error)).lower()}"
    return f"exec: {json.dumps(spec.interpreter[0])}: {(error.strerror or str(error)).lower()}"


class _Output:
    """stdout and stderr as captured, and both interleaved in arrival order (for errors)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.streams: dict[str, list[bytes]] = {"stdout": [], "stderr": []}
        self.combined: list[bytes] = []

    def add(self, stream: str, chunk: bytes) -> None:
        with self.lock:
            self.streams[stream].append(chunk)
            self.combined.append(chunk)

    def text(self, stream: str) -> str:
        return b"".join(self.streams[stream]).decode(errors="replace")

    def combined_text(self) -> str:
        return b"".join(self.combined).decode(errors="replace")


def _pump(pipe: IO[bytes], stream: str, output: _Output, log: LogFn | None) -> None:
    with pipe:
        for line in iter(pipe.readline, b""):
            output.add(stream, line)
            if log is not None:
                log(line.decode(errors="replace").rstrip("\r\n"))


def _feed(pipe: IO[bytes], data: bytes) -> None:
    with contextlib.suppress(BrokenPipeError), pipe:
        pipe.write(data)


def signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)


def end_group(process: subprocess.Popen[bytes], grace: float = KILL_GRACE_SECONDS) -> None:
    """SIGTERM the command's process group, then SIGKILL it if it is still there after `grace`."""
    signal_group(process, signal.SIGTERM)
    timer = threading.Timer(grace, signal_group, (process, signal.SIGKILL))
    timer.daemon = True
    timer.start()


class Runner:
    """Runs commands, each in its own process group, and ends them all on cancellation."""

    def __init__(self, base_env: Mapping[str, str] | None = None) -> None:
        self.base_env = dict(os.environ if base_env is None else base_env)
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen[bytes]] = set()
        self._cancelled = False

    def cancel(self) -> None:
        """End every running command; later ones fail at once (the engine is stopping)."""
        with self._lock:
            self._cancelled = True
            running = list(self._running)
        for process in running:
            end_group(process)

    def run(self, spec: RunSpec, log: LogFn | None = None) -> RunResult:
        """Run to completion; raise CommandFailed unless it exits 0."""
        process = self._start(spec)
        output = _Output()
        threads = self._attach(process, spec, output, log)
        ended_by = self._wait(process, spec, threads)
        reason = ended_by or (exit_reason(process.returncode) if process.returncode else None)
        if reason:
            raise CommandFailed(reason, spec.command, output.combined_text())
        return RunResult(trim_newline(output.text("stdout")), trim_newline(output.text("stderr")))

    def _start(self, spec: RunSpec) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._cancelled:
                raise CommandFailed("cancelled by the engine", spec.command)
            try:
                process = subprocess.Popen(
                    spec.argv,
                    cwd=spec.dir,
                    env={**self.base_env, **spec.environment},
                    stdin=subprocess.PIPE if spec.stdin else subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    start_new_session=True,
                )
            except OSError as error:
                raise CommandFailed(_spawn_reason(error, spec), spec.command) from error
            self._running.add(process)
            return process

    @staticmethod
    def _attach(
        process: subprocess.Popen[bytes], spec: RunSpec, output: _Output, log: LogFn | None
    ) -> list[threading.Thread]:
        assert process.stdout is not None and process.stderr is not None
        threads = [
            threading.Thread(
                target=_pump,
                args=(process.stdout, "stdout", output, log if spec.log_stdout else None),
            ),
            threading.Thread(
                target=_pump,
                args=(process.stderr, "stderr", output, log if spec.log_stderr else None),
            ),
        ]
        if spec.stdin and process.stdin is not None:
            threads.append(
                threading.Thread(target=_feed, args=(process.stdin, spec.stdin.encode()))
            )
        for thread in threads:
            thread.daemon = True
            thread.start()
        return threads

    def _wait(
        self, process: subprocess.Popen[bytes], spec: RunSpec, threads: list[threading.Thread]
    ) -> str | None:
        """Wait for the process and its output to end; the reason, if the provider ended it."""
        deadline = None if spec.timeout is None else time.monotonic() + spec.timeout
        ended_by = None
        try:
            process.wait(timeout=spec.timeout)
            for thread in threads:
                thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if any(thread.is_alive() for thread in threads):
                raise subprocess.TimeoutExpired(spec.argv, spec.timeout or 0)
        except subprocess.TimeoutExpired:
            ended_by = f"timed out after {spec.timeout:g}s"
            end_group(process)
            process.wait()
            for thread in threads:
                thread.join()
        finally:
            with self._lock:
                self._running.discard(process)
                cancelled = self._cancelled
        if ended_by is None and cancelled and process.returncode:
            ended_by = "cancelled by the engine"
        return ended_by


# ---------------------------------------------------------------------------------------------
# The gRPC provider


class EngineLog:
    """Sends each output line to the engine as an ephemeral status message of the resource."""

    def __init__(self, address: str | None) -> None:
        self.address = address
        self._stub: engine_pb2_grpc.EngineStub | None = None
        self._lock = threading.Lock()

    def _engine(self) -> engine_pb2_grpc.EngineStub | None:
        with self._lock:
            if self._stub is None and self.address:
                self._stub = engine_pb2_grpc.EngineStub(grpc.insecure_channel(self.address))
            return self._stub

    def for_resource(self, urn: str) -> LogFn:
        def log(line: str) -> None:
            engine = self._engine()
            if engine is None:
                return
            request = engine_pb2.LogRequest(
                severity=engine_pb2.INFO, message=line, urn=urn, ephemeral=True
            )
            with contextlib.suppress(grpc.RpcError):
                engine.Log(request, timeout=10)

        return log


def _copy_fields(source: struct_pb2.Struct, names: Iterable[str]) -> struct_pb2.Struct:
    """The named fields as the engine sent them: secret wrappers and unknowns included."""
    out = struct_pb2.Struct()
    for name in names:
        if name in source.fields:
            out.fields[name].CopyFrom(source.fields[name])
    return out


def outputs(inputs: struct_pb2.Struct, result: RunResult | None = None) -> struct_pb2.Struct:
    """A command's state: its inputs, and the run's stdout/stderr (unknown when not run)."""
    out = _copy_fields(inputs, COMMAND_FIELDS)
    out.fields["stdout"].string_value = rpc.UNKNOWN if result is None else result.stdout
    out.fields["stderr"].string_value = rpc.UNKNOWN if result is None else result.stderr
    return out


def resource_name(urn: str) -> str:
    return urn.rsplit("::", 1)[-1]


def _fail(context: grpc.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
    context.abort(code, message)
    raise AssertionError("unreachable: abort raises")


def _failures(pairs: Iterable[tuple[str, str]]) -> list[provider_pb2.CheckFailure]:
    return [provider_pb2.CheckFailure(property=prop, reason=reason) for prop, reason in pairs]


def _type_of(urn: str) -> str:
    """The resource type of `urn:pulumi:STACK::PROJECT::[PARENT$]TYPE::NAME`."""
    return urn.rsplit("::", 2)[-2].rsplit("$", 1)[-1] if urn.count("::") >= 3 else ""


class CommandProvider(provider_pb2_grpc.ResourceProviderServicer):
    """The ResourceProvider service for `command:local:Command` and `command:local:run`."""

    def __init__(self, engine_address: str | None = None, runner: Runner | None = None) -> None:
        self.runner = runner or Runner()
        self.engine_log = EngineLog(engine_address)

    # -- provider-level

    def Handshake(
        self, request: provider_pb2.ProviderHandshakeRequest, context: grpc.ServicerContext
    ) -> provider_pb2.ProviderHandshakeResponse:
        return provider_pb2.ProviderHandshakeResponse(
            accept_secrets=True, accept_resources=False, accept_outputs=False
        )

    def GetPluginInfo(
        self, request: empty_pb2.Empty, context: grpc.ServicerContext
    ) -> plugin_pb2.PluginInfo:
        return plugin_pb2.PluginInfo(version=PLUGIN_VERSION)

    def CheckConfig(
        self, request: provider_pb2.CheckRequest, context: grpc.ServicerContext
    ) -> provider_pb2.CheckResponse:
        """The settings as given; a marker the official provider left in the old ones is kept
        (it adds `__pulumi-go-provider-version` to its configuration's inputs), so switching
        plugins rewrites nothing."""
        inputs = struct_pb2.Struct()
        inputs.CopyFrom(request.news)
        for key in KEPT_CONFIG_KEYS:
            if key in request.olds.fields and key not in inputs.fields:
                inputs.fields[key].CopyFrom(request.olds.fields[key])
        return provider_pb2.CheckResponse(inputs=inputs)

    def DiffConfig(
        self, request: provider_pb2.DiffRequest, context: grpc.ServicerContext
    ) -> provider_pb2.DiffResponse:
        """The provider has no configuration: only a changed (unused) setting is reported."""

        def settings(props: struct_pb2.Struct) -> dict[str, Any]:
            values = rpc.to_python(props) or {}
            return {k: v for k, v in values.items() if k != "version" and not k.startswith("__")}

        same = settings(request.olds) == settings(request.news)
        return provider_pb2.DiffResponse(changes=_NO_CHANGES if same else _CHANGES)

    def Configure(
        self, request: provider_pb2.ConfigureRequest, context: grpc.ServicerContext
    ) -> provider_pb2.ConfigureResponse:
        return provider_pb2.ConfigureResponse(
            acceptSecrets=True, supportsPreview=True, acceptResources=False, acceptOutputs=False
        )

    def Cancel(self, request: empty_pb2.Empty, context: grpc.ServicerContext) -> empty_pb2.Empty:
        self.runner.cancel()
        return empty_pb2.Empty()

    # -- the resource

    def _require_command_type(self, request: Any, context: grpc.ServicerContext) -> None:
        type_ = request.type or _type_of(request.urn)
        if type_ != COMMAND_TYPE:
            _fail(context, grpc.StatusCode.INVALID_ARGUMENT, f"unknown resource type {type_!r}")

    def _run(
        self, command: str | None, props: Props, urn: str, timeout: float, context: Any
    ) -> RunResult | None:
        """Run `command` (if any) for the resource `urn`; a failure fails the request."""
        if command is None:
            return None
        try:
            return self.runner.run(
                run_spec(command, props, timeout), self.engine_log.for_resource(urn)
            )
        except CommandFailed as failure:
            _fail(context, grpc.StatusCode.UNKNOWN, str(failure))

    def Check(
        self, request: provider_pb2.CheckRequest, context: grpc.ServicerContext
    ) -> provider_pb2.CheckResponse:
        self._require_command_type(request, context)
        failures = check_inputs(rpc.to_python(request.news) or {}, COMMAND_FIELDS)
        return provider_pb2.CheckResponse(inputs=request.news, failures=_failures(failures))

    def Diff(
        self, request: provider_pb2.DiffRequest, context: grpc.ServicerContext
    ) -> provider_pb2.DiffResponse:
        self._require_command_type(request, context)
        olds = request.old_inputs if request.old_inputs.fields else request.olds
        result = diff_inputs(
            rpc.to_python(olds) or {}, rpc.to_python(request.news) or {}, request.ignoreChanges
        )
        return provider_pb2.DiffResponse(
            changes=_CHANGES if result.changed else _NO_CHANGES,
            replaces=result.replaces,
            diffs=result.diffs,
            detailedDiff={
                path: provider_pb2.PropertyDiff(kind=kind, inputDiff=True)
                for path, kind in result.detailed.items()
            },
            hasDetailedDiff=True,
        )

    def Create(
        self, request: provider_pb2.CreateRequest, context: grpc.ServicerContext
    ) -> provider_pb2.CreateResponse:
        self._require_command_type(request, context)
        resource_id = f"{request.name or resource_name(request.urn)}{secrets.token_hex(4)}"
        if request.preview:
            return provider_pb2.CreateResponse(
                id=resource_id, properties=outputs(request.properties)
            )
        props = rpc.to_python(request.properties) or {}
        result = self._run(props.get("create"), props, request.urn, request.timeout, context)
        return provider_pb2.CreateResponse(
            id=resource_id, properties=outputs(request.properties, result or RunResult("", ""))
        )

    def Update(
        self, request: provider_pb2.UpdateRequest, context: grpc.ServicerContext
    ) -> provider_pb2.UpdateResponse:
        self._require_command_type(request, context)
        if request.preview:
            return provider_pb2.UpdateResponse(properties=outputs(request.news))
        olds, news = rpc.to_python(request.olds) or {}, rpc.to_python(request.news) or {}
        previous = RunResult(str(olds.get("stdout") or ""), str(olds.get("stderr") or ""))
        props = {**news, "stdout": previous.stdout, "stderr": previous.stderr}
        command = news["update"] if news.get("update") is not None else news.get("create")
        result = self._run(command, props, request.urn, request.timeout, context)
        return provider_pb2.UpdateResponse(properties=outputs(request.news, result or previous))

    def Delete(
        self, request: provider_pb2.DeleteRequest, context: grpc.ServicerContext
    ) -> empty_pb2.Empty:
        self._require_command_type(request, context)
        state = rpc.to_python(request.properties) or {}
        self._run(state.get("delete"), state, request.urn, request.timeout, context)
        return empty_pb2.Empty()

    def Read(
        self, request: provider_pb2.ReadRequest, context: grpc.ServicerContext
    ) -> provider_pb2.ReadResponse:
        return provider_pb2.ReadResponse(
            id=request.id, properties=request.properties, inputs=request.inputs
        )

    # -- the invoke

    def Invoke(
        self, request: provider_pb2.InvokeRequest, context: grpc.ServicerContext
    ) -> provider_pb2.InvokeResponse:
        """`command:local:run`: runs every time, previews included, as the original does."""
        if request.tok != RUN_TOKEN:
            _fail(context, grpc.StatusCode.INVALID_ARGUMENT, f"unknown function {request.tok!r}")
        args = rpc.to_python(request.args) or {}
        failures = check_inputs(args, RUN_FIELDS)
        if not isinstance(args.get("command"), str):
            failures.append(("command", "missing required property 'command'"))
        if failures:
            return provider_pb2.InvokeResponse(failures=_failures(failures))
        result = self._run(args["command"], args, "", 0, context) or RunResult("", "")
        returned = _copy_fields(request.args, RUN_FIELDS)
        returned.fields["stdout"].string_value = result.stdout
        returned.fields["stderr"].string_value = result.stderr
        return provider_pb2.InvokeResponse(**{"return": returned})


def main(argv: list[str] | None = None) -> None:
    engine = rpc.engine_address(sys.argv[1:] if argv is None else argv)
    provider = CommandProvider(engine)

    def stop(signum: int, frame: Any) -> None:
        provider.runner.cancel()
        os._exit(0)

    # The engine closes its plugins with SIGINT (then SIGKILL): end the running commands first.
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    add = provider_pb2_grpc.add_ResourceProviderServicer_to_server
    rpc.serve(add, provider, workers=128, engine=engine)


if __name__ == "__main__":
    main()
