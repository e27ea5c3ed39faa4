"""Serving a Pulumi plugin over gRPC, and converting property structs to plain Python values.

A plugin is started by the engine as `PLUGIN [flags] ENGINE_ADDRESS`; it listens on a loopback
port and prints that port alone on the first line of stdout. Usage::

    from pulumi.runtime.proto import provider_pb2_grpc
    from pulumi_plugins import rpc

    rpc.serve(provider_pb2_grpc.add_ResourceProviderServicer_to_server, MyProvider(), engine=addr)

With an engine address the plugin watches the engine and ends itself when it is gone (a `pulumi`
killed with SIGKILL never sends the SIGINT that normally ends its plugins), as the official
plugins do: their `rpcutil.Healthcheck` (pulumi sdk/go/common/util/rpcutil/health.go, started by
`provider.Main` and each language host's main) calls the engine's gRPC health service
periodically and cancels the server on any error but UNIMPLEMENTED. They check every 5 minutes;
ours check every `ENGINE_CHECK_SECONDS`, so nothing outlives the CLI by more than a moment.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Mapping
from concurrent import futures
from typing import Any

import grpc
from google.protobuf import empty_pb2, struct_pb2

UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
"""The engine's marker of a value not known until apply (only seen during preview)."""
SIG_KEY = "4dabf18193072939515e22adb298388d"
SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"

_OPTIONS = [
    ("grpc.max_receive_message_length", 400 * 1024 * 1024),
    ("grpc.max_send_message_length", 400 * 1024 * 1024),
]


def engine_address(argv: list[str]) -> str | None:
    """The engine's address: the last argument that is not a flag (`-v=9 127.0.0.1:4000`)."""
    positional = [a for a in argv if not a.startswith("-")]
    return positional[-1] if positional else None


ENGINE_CHECK_SECONDS = 1.0
"""How often a plugin checks that its engine is still there."""
_HEALTH_CHECK = "/grpc.health.v1.Health/Check"
_ALIVE = (grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.DEADLINE_EXCEEDED)
"""Answers that do not mean "gone": a server without the health service (the official check
accepts that too), and a busy engine that is slow to answer."""


def watch_engine(
    address: str, on_gone: Callable[[str], None], interval: float = ENGINE_CHECK_SECONDS
) -> threading.Thread:
    """Call `on_gone(reason)` once the engine at `address` stops answering its health check.

    A daemon thread asks `grpc.health.v1.Health/Check` every `interval` seconds; a connection
    refused (the engine's process is gone) ends the watch. The request is the empty
    HealthCheckRequest (all services) and the answer's status is not read, as the official
    check does, so no health-checking package is needed."""
    channel = grpc.insecure_channel(address)
    check = channel.unary_unary(
        _HEALTH_CHECK,
        request_serializer=lambda _: b"",
        response_deserializer=lambda raw: raw,
    )

    def run() -> None:
        stop = threading.Event()
        while not stop.wait(interval):
            try:
                check(None, timeout=max(5.0, 5 * interval))
            except grpc.RpcError as err:
                code = err.code()  # type: ignore[attr-defined]
                if code not in _ALIVE:
                    on_gone(f"{code.name}: {err.details()}")  # type: ignore[attr-defined]
                    return

    thread = threading.Thread(target=run, name="engine-watch", daemon=True)
    thread.start()
    return thread


def serve(
    add_to_server: Callable[[Any, grpc.Server], None],
    servicer: Any,
    workers: int = 16,
    engine: str | None = None,
) -> None:
    """Listen on a free loopback port, announce it on stdout, serve until the engine ends us.

    With `engine` (its address), the plugin also ends when that engine is gone: the servicer's
    `Cancel` ends the work it runs (commands, docker CLI calls, the program), then the process
    exits at once, since worker threads stuck in that work would keep a normal exit waiting."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers), options=_OPTIONS)
    add_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    sys.stdout.write(f"{port}\n")
    sys.stdout.flush()
    if engine:
        watch_engine(engine, lambda reason: _engine_gone(servicer, engine, reason))
    try:
        server.wait_for_termination()
    except KeyboardInterrupt:  # the engine ends its plugins with SIGINT
        server.stop(grace=None)


def _engine_gone(servicer: Any, engine: str, reason: str) -> None:
    name = type(servicer).__name__
    try:
        sys.stderr.write(f"{name}: the engine at {engine} is gone ({reason}); exiting\n")
        sys.stderr.flush()
    except OSError:  # its stderr pipe went with the engine
        pass
    try:
        if cancel := getattr(servicer, "Cancel", None):
            cancel(empty_pb2.Empty(), None)
    finally:
        os._exit(0)


def to_python(value: struct_pb2.Value | struct_pb2.Struct | None) -> Any:
    """A protobuf Struct/Value as plain Python: dicts, lists, str, float, bool, None.

    Secret wrappers are unwrapped (`is_secret` tells whether any were present); the unknown
    marker stays the string `UNKNOWN`.
    """
    if value is None:
        return None
    if isinstance(value, struct_pb2.Struct):
        return {k: to_python(v) for k, v in value.fields.items()}
    kind = value.WhichOneof("kind")
    if kind == "struct_value":
        obj = {k: to_python(v) for k, v in value.struct_value.fields.items()}
        if obj.get(SIG_KEY) == SECRET_SIG:
            return obj.get("value")
        return obj
    if kind == "list_value":
        return [to_python(v) for v in value.list_value.values]
    if kind == "number_value":
        number = value.number_value
        return int(number) if number.is_integer() else number
    if kind == "string_value":
        return value.string_value
    if kind == "bool_value":
        return value.bool_value
    return None


def to_struct(values: Mapping[str, Any], keep_null: bool = False) -> struct_pb2.Struct:
    """Plain Python values as a protobuf Struct (None values are left out, unless `keep_null`:
    a state that had nulls keeps them)."""
    out = struct_pb2.Struct()
    out.update({k: v for k, v in values.items() if keep_null or v is not None})
    return out


def contains_unknown(value: Any) -> bool:
    if isinstance(value, str):
        return value == UNKNOWN
    if isinstance(value, Mapping):
        return any(contains_unknown(v) for v in value.values())
    if isinstance(value, list):
        return any(contains_unknown(v) for v in value)
    return False
