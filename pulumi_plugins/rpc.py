"""Serving a Pulumi plugin over gRPC, and converting property structs to plain Python values.

A plugin is started by the engine as `PLUGIN [flags] ENGINE_ADDRESS`; it listens on a loopback
port and prints that port alone on the first line of stdout. Usage::

    from pulumi.runtime.proto import provider_pb2_grpc
    from pulumi_plugins import rpc

    rpc.serve(provider_pb2_grpc.add_ResourceProviderServicer_to_server, MyProvider())
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from concurrent import futures
from typing import Any

import grpc
from google.protobuf import struct_pb2

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


def serve(add_to_server: Callable[[Any, grpc.Server], None], servicer: Any, workers: int = 16):
    """Listen on a free loopback port, announce it on stdout, serve until the engine ends us."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers), options=_OPTIONS)
    add_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    sys.stdout.write(f"{port}\n")
    sys.stdout.flush()
    try:
        server.wait_for_termination()
    except KeyboardInterrupt:  # the engine ends its plugins with SIGINT
        server.stop(grace=None)


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


def to_struct(values: Mapping[str, Any]) -> struct_pb2.Struct:
    """Plain Python values as a protobuf Struct (None values are left out)."""
    out = struct_pb2.Struct()
    out.update({k: v for k, v in values.items() if v is not None})
    return out


def contains_unknown(value: Any) -> bool:
    if isinstance(value, str):
        return value == UNKNOWN
    if isinstance(value, Mapping):
        return any(contains_unknown(v) for v in value.values())
    if isinstance(value, list):
        return any(contains_unknown(v) for v in value)
    return False
