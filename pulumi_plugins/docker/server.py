"""The `docker` resource provider's gRPC servicer: configuration, then Check/Diff/Create/Read/
Update/Delete dispatched to the resource modules by type token.

    rpc.serve(provider_pb2_grpc.add_ResourceProviderServicer_to_server, DockerProvider(address))

Like pulumi-docker's hybrid provider it answers Configure with supportsPreview (Create/Update
are called in previews too, and must not touch Docker then) and without acceptSecrets (the
engine strips secrets on the way in and re-marks them on the way out).
"""

from __future__ import annotations

import functools
import json
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from google.protobuf import any_pb2, empty_pb2
from google.rpc import status_pb2
from pulumi.runtime.proto import (
    engine_pb2,
    engine_pb2_grpc,
    plugin_pb2,
    provider_pb2,
    provider_pb2_grpc,
)

from pulumi_plugins import rpc
from pulumi_plugins.docker import VERSION, container, image, remote_image
from pulumi_plugins.docker.config import ConfigError, ProviderConfig, check_config, scratch_dir
from pulumi_plugins.docker.engine import Engine, EngineError
from pulumi_plugins.docker.ops import DEFAULT_TIMEOUT, DockerError, InitError, Op
from pulumi_plugins.docker.props import DiffResult, Failure

KINDS = dict(provider_pb2.PropertyDiff.Kind.items())
SEVERITY = {
    "debug": engine_pb2.DEBUG,
    "info": engine_pb2.INFO,
    "warning": engine_pb2.WARNING,
    "error": engine_pb2.ERROR,
}
BRIDGED = {container.TYPE, remote_image.TYPE}
CREATE: dict[str, Callable[[Op, dict[str, Any]], tuple[str, dict[str, Any]]]] = {
    container.TYPE: container.create,
    remote_image.TYPE: remote_image.create,
    image.TYPE: image.build,
}
"""How each type is created: (id, state) of (op, inputs)."""
S = TypeVar("S")
Q = TypeVar("Q")
R = TypeVar("R")


@dataclass
class _Status(grpc.Status):
    code: grpc.StatusCode
    details: str
    trailing_metadata: tuple[tuple[str, bytes], ...]


def urn_type_and_name(urn: str) -> tuple[str, str]:
    """`urn:pulumi:stack::project::parent$type::name` -> (type, name)."""
    parts = urn.split("::")
    return parts[2].split("$")[-1], parts[-1]


def _failures(failures: list[Failure]) -> list[provider_pb2.CheckFailure]:
    return [provider_pb2.CheckFailure(property=f.property, reason=f.reason) for f in failures]


def _guard(context: grpc.ServicerContext, call: Callable[[], R]) -> R:
    """Runs `call`, turning its failures into the gRPC errors the engine reports."""
    try:
        return call()
    except InitError as err:
        detail = provider_pb2.ErrorResourceInitFailed(
            id=err.id, properties=rpc.to_struct(err.state), reasons=err.reasons
        )
        packed = any_pb2.Any()
        packed.Pack(detail)
        status = status_pb2.Status(code=grpc.StatusCode.UNKNOWN.value[0], message=str(err))
        status.details.append(packed)
        metadata = (("grpc-status-details-bin", status.SerializeToString()),)
        context.abort_with_status(_Status(grpc.StatusCode.UNKNOWN, str(err), metadata))
    except (DockerError, EngineError, ConfigError, ValueError) as err:
        context.abort(grpc.StatusCode.UNKNOWN, str(err))


def _guarded(
    method: Callable[[S, Q, grpc.ServicerContext], R],
) -> Callable[[S, Q, grpc.ServicerContext], R]:
    """A servicer method run through `_guard`."""

    @functools.wraps(method)
    def guarded(self: S, request: Q, context: grpc.ServicerContext) -> R:
        return _guard(context, lambda: method(self, request, context))

    return guarded


class DockerProvider(provider_pb2_grpc.ResourceProviderServicer):
    def __init__(self, engine_address: str | None) -> None:
        self._engine_address = engine_address
        self._log_stub: engine_pb2_grpc.EngineStub | None = None
        self._config = ProviderConfig(environ=dict(os.environ))
        self._engines: dict[str, Engine] = {}
        self._lock = threading.Lock()
        self._scratch = scratch_dir()

    # -- plumbing ----------------------------------------------------------------------------
    def _log(self, urn: str, severity: str, message: str, ephemeral: bool = False) -> None:
        if not self._engine_address:
            return
        try:
            if self._log_stub is None:
                channel = grpc.insecure_channel(self._engine_address)
                self._log_stub = engine_pb2_grpc.EngineStub(channel)
            request = engine_pb2.LogRequest(
                severity=SEVERITY[severity], message=message, urn=urn, ephemeral=ephemeral
            )
            self._log_stub.Log(request, timeout=10)
        except grpc.RpcError:
            pass

    def _engine(self, bridged: bool) -> Engine:
        endpoint = self._config.endpoint(bridged)
        with self._lock:
            if endpoint not in self._engines:
                env = self._config.cli_env(endpoint, self._scratch)
                self._engines[endpoint] = Engine(endpoint, env, self._config.daemon_check)
            return self._engines[endpoint]

    def _op(self, urn: str, type_: str, preview: bool, timeout: float) -> Op:
        def log(severity: str, message: str, ephemeral: bool) -> None:
            self._log(urn, severity, message, ephemeral)

        engine = self._engine(bridged=type_ in BRIDGED)
        return Op(engine, urn, preview, timeout or DEFAULT_TIMEOUT, log)

    @staticmethod
    def _type(req: Any) -> tuple[str, str]:
        type_, name = urn_type_and_name(req.urn)
        if type_ not in (container.TYPE, image.TYPE, remote_image.TYPE):
            raise DockerError(
                f"unrecognized resource type: {type_} (this provider implements "
                "docker.Container, docker.Image and docker.RemoteImage)"
            )
        return type_, name

    # -- provider ----------------------------------------------------------------------------
    def GetPluginInfo(
        self, request: empty_pb2.Empty, context: grpc.ServicerContext
    ) -> plugin_pb2.PluginInfo:
        return plugin_pb2.PluginInfo(version=VERSION)

    def GetSchema(
        self, request: provider_pb2.GetSchemaRequest, context: grpc.ServicerContext
    ) -> provider_pb2.GetSchemaResponse:
        resources = {
            module.TYPE: {"inputProperties": {k: {} for k in sorted(module_inputs)}}
            for module, module_inputs in (
                (container, container.SCHEMA),
                (remote_image, remote_image.SCHEMA),
                (image, image.TOP_FIELDS),
            )
        }
        schema = {"name": "docker", "version": VERSION, "resources": resources}
        return provider_pb2.GetSchemaResponse(schema=json.dumps(schema))

    def CheckConfig(
        self, request: provider_pb2.CheckRequest, context: grpc.ServicerContext
    ) -> provider_pb2.CheckResponse:
        news = rpc.to_python(request.news)
        return provider_pb2.CheckResponse(
            inputs=request.news, failures=_failures(check_config(news))
        )

    def DiffConfig(
        self, request: provider_pb2.DiffRequest, context: grpc.ServicerContext
    ) -> provider_pb2.DiffResponse:
        olds = rpc.to_python(request.old_inputs) or rpc.to_python(request.olds)
        news = rpc.to_python(request.news)
        changed = sorted(
            k for k in set(olds) | set(news) if k != "version" and olds.get(k) != news.get(k)
        )
        if not changed:
            return provider_pb2.DiffResponse(changes=provider_pb2.DiffResponse.DIFF_NONE)
        detailed = {
            k: provider_pb2.PropertyDiff(kind=KINDS["UPDATE"], inputDiff=True) for k in changed
        }
        return provider_pb2.DiffResponse(
            changes=provider_pb2.DiffResponse.DIFF_SOME,
            diffs=changed,
            detailedDiff=detailed,
            hasDetailedDiff=True,
        )

    def Configure(
        self, request: provider_pb2.ConfigureRequest, context: grpc.ServicerContext
    ) -> provider_pb2.ConfigureResponse:
        inputs = (
            rpc.to_python(request.args)
            if request.HasField("args")
            else {k.split(":config:", 1)[-1]: v for k, v in request.variables.items()}
        )

        def configure() -> provider_pb2.ConfigureResponse:
            self._config = ProviderConfig.from_inputs(inputs, environ=dict(os.environ))
            with self._lock:
                self._engines.clear()
            if warning := self._config.context_overrides_host():
                self._log("", "warning", warning)
            native = self._config.endpoint(bridged=False)
            if not native.startswith("ssh://"):
                try:
                    self._engine(bridged=False).version()
                except EngineError as err:
                    raise DockerError(f"failed to connect to any docker daemon: {err}") from None
            return provider_pb2.ConfigureResponse(
                acceptSecrets=False,
                supportsPreview=True,
                acceptResources=False,
                supports_autonaming_configuration=True,
            )

        return _guard(context, configure)

    def Cancel(self, request: empty_pb2.Empty, context: grpc.ServicerContext) -> empty_pb2.Empty:
        with self._lock:
            engines = list(self._engines.values())
        for engine in engines:
            engine.cancel()
        return empty_pb2.Empty()

    def Invoke(
        self, request: provider_pb2.InvokeRequest, context: grpc.ServicerContext
    ) -> provider_pb2.InvokeResponse:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, f"unknown Invoke token '{request.tok}'")

    # -- resources ---------------------------------------------------------------------------
    @_guarded
    def Check(
        self, request: provider_pb2.CheckRequest, context: grpc.ServicerContext
    ) -> provider_pb2.CheckResponse:
        type_, name = self._type(request)
        news = rpc.to_python(request.news)
        olds = rpc.to_python(request.olds) or None
        if type_ == container.TYPE:
            auto = request.autonaming if request.HasField("autonaming") else None
            inputs, failures = container.check(
                news,
                olds,
                name,
                bytes(request.randomSeed),
                auto.proposed_name if auto else None,
                autonaming_disabled=bool(
                    auto and auto.mode == provider_pb2.CheckRequest.AutonamingOptions.DISABLE
                ),
            )
        elif type_ == remote_image.TYPE:
            inputs, failures = remote_image.check(news, olds)
        else:
            inputs, failures = image.check(news, self._op(request.urn, type_, True, 0))
        return provider_pb2.CheckResponse(
            inputs=rpc.to_struct(inputs), failures=_failures(failures)
        )

    @_guarded
    def Diff(
        self, request: provider_pb2.DiffRequest, context: grpc.ServicerContext
    ) -> provider_pb2.DiffResponse:
        type_, _ = self._type(request)
        olds, news = rpc.to_python(request.olds), rpc.to_python(request.news)
        ignore = list(request.ignoreChanges)
        if type_ == image.TYPE:
            changes = image.diff(olds, news)
            result = DiffResult(updates=sorted(changes), detailed=changes)
        elif type_ == container.TYPE:
            result = container.diff(olds, news, ignore)
        else:
            result = remote_image.diff(olds, news, ignore)
        if not result.changed:
            return provider_pb2.DiffResponse(changes=provider_pb2.DiffResponse.DIFF_NONE)
        detailed = {
            k: provider_pb2.PropertyDiff(kind=KINDS[v], inputDiff=True)
            for k, v in result.detailed.items()
        }
        return provider_pb2.DiffResponse(
            changes=provider_pb2.DiffResponse.DIFF_SOME,
            replaces=sorted(result.replaces),
            stables=sorted(result.stables),
            # The bridge sets DeleteBeforeReplace for docker_container (pulumi-docker
            # resources.go); the others leave it to the program's option.
            deleteBeforeReplace=bool(result.replaces) and type_ == container.TYPE,
            diffs=sorted(result.detailed),
            detailedDiff=detailed,
            hasDetailedDiff=True,
        )

    @_guarded
    def Create(
        self, request: provider_pb2.CreateRequest, context: grpc.ServicerContext
    ) -> provider_pb2.CreateResponse:
        type_, _ = self._type(request)
        op = self._op(request.urn, type_, request.preview, request.timeout)
        rid, state = CREATE[type_](op, rpc.to_python(request.properties))
        return provider_pb2.CreateResponse(id=rid, properties=rpc.to_struct(state))

    @_guarded
    def Read(
        self, request: provider_pb2.ReadRequest, context: grpc.ServicerContext
    ) -> provider_pb2.ReadResponse:
        type_, _ = self._type(request)
        if type_ == image.TYPE:
            return provider_pb2.ReadResponse(
                id=request.id, properties=request.properties, inputs=request.inputs
            )
        op = self._op(request.urn, type_, False, request.timeout)
        state, inputs = rpc.to_python(request.properties), rpc.to_python(request.inputs)
        if type_ == container.TYPE:
            found = container.read(op, request.id, state, inputs)
            if found is None:
                return provider_pb2.ReadResponse()
            rid, fresh, fresh_inputs = found
        else:
            refreshed = remote_image.read(op, state or {**inputs, "name": inputs.get("name")})
            if refreshed is None:
                return provider_pb2.ReadResponse()
            (rid, fresh), fresh_inputs = refreshed, inputs
        # The nulls of a state the official provider wrote (its every unset property) stay.
        return provider_pb2.ReadResponse(
            id=rid,
            properties=rpc.to_struct(fresh, keep_null=True),
            inputs=rpc.to_struct(fresh_inputs),
        )

    @_guarded
    def Update(
        self, request: provider_pb2.UpdateRequest, context: grpc.ServicerContext
    ) -> provider_pb2.UpdateResponse:
        type_, _ = self._type(request)
        op = self._op(request.urn, type_, request.preview, request.timeout)
        olds, news = rpc.to_python(request.olds), rpc.to_python(request.news)
        if type_ == container.TYPE:
            state = container.update(op, request.id, olds, news)
        elif type_ == remote_image.TYPE:
            state = remote_image.update(op, olds, news)
        else:
            _, state = image.build(op, news)
        return provider_pb2.UpdateResponse(properties=rpc.to_struct(state, keep_null=True))

    @_guarded
    def Delete(
        self, request: provider_pb2.DeleteRequest, context: grpc.ServicerContext
    ) -> empty_pb2.Empty:
        type_, _ = self._type(request)
        if type_ == image.TYPE:
            return empty_pb2.Empty()
        op = self._op(request.urn, type_, False, request.timeout)
        state = rpc.to_python(request.properties)
        if type_ == container.TYPE:
            container.delete(op, request.id, state)
        else:
            remote_image.delete(op, state)
        return empty_pb2.Empty()
