"""uvicorn's and Starlette's private internals, behind one door.

The gateway's connection bounds (:mod:`gateway.server.connections`) and its fast path
(:mod:`gateway.server.hot_path`: the document routes served straight from uvicorn's request cycle)
reach below uvicorn's public API: they subclass its HTTP protocols, replace its private
``_start_asgi_task``, call ``_unset_keepalive_if_required`` and ``_should_upgrade``, and read and
write its request cycle's fields; :func:`remember_body` sets Starlette's ``Request._body``.
This module is the only one that names those internals. It was written for
:data:`WRITTEN_FOR` (the versions pinned in pyproject.toml); every hook it relies on is listed in
:data:`HOOKS` and checked at start by :func:`check` (methods present with the expected
parameters, attributes set by uvicorn's protocol and cycle when they should be, seen on a real
request fed to each protocol over a fake transport).

Two tiers, so that a mismatch costs only what it must:

- ``bounds``: the protocols' callbacks and state the connection bounds need. If any is
  missing, :func:`serving_plan` serves with uvicorn's stock protocols (no header deadline,
  no connection caps) and logs an error naming each one.
- ``fast``: the request-cycle internals of the fast path. If any is missing, or when
  ``GATEWAY_FAST_PATH=0`` (:data:`FAST_PATH_ENV`), the gateway serves every route, the
  document routes included, through FastAPI's routing and uvicorn's own cycle: slower,
  correct. A warning names what failed.

Usage::

    plan = serving_plan()                       # once, at app creation
    if plan.fast: ...                           # HttpToolsBase subclasses claim requests
    exchange.write_whole(head_parts, body)      # the hot path's whole answer
    remember_body(request, body)                # request.form() parses what was read
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import os
import threading
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from importlib.metadata import version
from typing import Any

from starlette.requests import Request
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle as HttpToolsCycle
from uvicorn.protocols.utils import get_remote_addr
from uvicorn.server import Server, ServerState

log = logging.getLogger("gateway.wire.uvicorn_adapter")

WRITTEN_FOR = {"uvicorn": "0.54.0", "starlette": "1.10.0", "h11": "0.16.0"}
"""The versions this adapter was written against (pinned in pyproject.toml)."""

FAST_PATH_ENV = "GATEWAY_FAST_PATH"
"""``GATEWAY_FAST_PATH=0`` serves every route through FastAPI's routing (see module doc)."""


# ---------------------------------------------------------------------------- the hooks
@dataclass(frozen=True)
class Hook:
    """One private name the adapter relies on. ``params``: a method's parameters after
    ``self`` (None: an attribute, seen on a live instance by the probe)."""

    owner: str
    name: str
    tier: str  # "bounds" or "fast"
    params: tuple[str, ...] | None = None

    def __str__(self) -> str:
        kind = "attribute" if self.params is None else f"method({', '.join(self.params)})"
        return f"{self.owner}.{self.name} ({kind}, {self.tier})"


def _methods(owner: str, tier: str, **params: tuple[str, ...]) -> list[Hook]:
    return [Hook(owner, name, tier, p) for name, p in params.items()]


def _attributes(owner: str, tier: str, *names: str) -> list[Hook]:
    return [Hook(owner, name, tier) for name in names]


_CALLBACKS = {
    "connection_made": ("transport",),
    "connection_lost": ("exc",),
    "data_received": ("data",),
    "eof_received": (),
    "on_response_complete": (),
    "send_400_response": ("msg",),
    "_unset_keepalive_if_required": (),
}

HOOKS: tuple[Hook, ...] = (
    *_methods("HttpToolsProtocol", "bounds", **_CALLBACKS),
    *_methods(
        "HttpToolsProtocol",
        "bounds",
        on_headers_complete=(),
        on_body=("body",),
        on_message_complete=(),
    ),
    *_attributes(
        "HttpToolsProtocol", "bounds", "connections", "server_state", "cycle", "transport", "loop"
    ),
    *_methods("HttpToolsProtocol", "fast", _start_asgi_task=("cycle", "app"), _should_upgrade=()),
    *_attributes("HttpToolsProtocol", "fast", "parser", "flow", "tasks", "config"),
    *_methods("H11Protocol", "bounds", **_CALLBACKS),
    *_attributes(
        "H11Protocol", "bounds", "connections", "server_state", "cycle", "transport", "loop"
    ),
    *_attributes("H11Protocol", "bounds", "conn", "config"),
    *_attributes("RequestResponseCycle", "bounds", "keep_alive", "response_complete"),
    *_methods("RequestResponseCycle", "fast", receive=(), send=("message",)),
    *_attributes(
        "RequestResponseCycle",
        "fast",
        "scope",
        "transport",
        "default_headers",
        "message_event",
        "on_response",
        "disconnected",
        "waiting_for_100_continue",
        "response_started",
        "body",
    ),
    *_attributes("Config", "fast", "reset_contextvars", "h11_max_incomplete_event_size"),
    *_methods("Server", "bounds", shutdown=("sockets",)),
    *_attributes("Server", "bounds", "server_state", "force_exit"),
    *_attributes("Request", "fast", "_body"),
)
"""Every private hook of uvicorn and Starlette the gateway relies on, with its tier."""


class AdapterMismatch(RuntimeError):
    """The installed uvicorn or Starlette lacks hooks the adapter needs (named, one a line)."""

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems = tuple(problems)
        super().__init__(
            f"uvicorn adapter (written for {_versions(WRITTEN_FOR)}, installed "
            f"{_versions(installed_versions())}): " + "; ".join(self.problems)
        )


def _versions(versions: dict[str, str]) -> str:
    return ", ".join(f"{name} {v}" for name, v in versions.items())


def installed_versions() -> dict[str, str]:
    return {name: version(name) for name in WRITTEN_FOR}


# ---------------------------------------------------------------------------- the check
@dataclass
class Classes:
    """The classes checked (the installed ones unless a test substitutes one)."""

    HttpToolsProtocol: type = HttpToolsProtocol
    H11Protocol: type = H11Protocol
    RequestResponseCycle: type = HttpToolsCycle
    Config: type = Config
    Server: type = Server
    Request: type = Request


def check(classes: Classes | None = None) -> dict[str, list[str]]:
    """The problems per tier (``{"bounds": [...], "fast": [...]}``, empty lists: all well),
    each naming the hook and what is wrong with it."""
    classes = classes or Classes()
    problems: dict[str, list[str]] = {"bounds": [], "fast": []}
    for hook in HOOKS:
        if hook.params is not None:
            problem = _method_problem(getattr(classes, hook.owner), hook)
            if problem:
                problems[hook.tier].append(problem)
    seen = _probe(classes)
    for hook in HOOKS:
        if hook.params is None and hook.name not in seen.get(hook.owner, set()):
            problems[hook.tier].append(f"{hook}: not found on a live instance")
    if problems["bounds"]:  # the fast path is built on the bounded protocols
        problems["fast"] = [*problems["bounds"], *problems["fast"]]
    return problems


def _method_problem(owner: type, hook: Hook) -> str | None:
    method = getattr(owner, hook.name, None)
    if not callable(method):
        return f"{hook}: missing"
    try:
        names = tuple(inspect.signature(method).parameters)[1:]
    except (TypeError, ValueError):
        return None  # a C method: no signature to compare
    if names != hook.params:
        return f"{hook}: its parameters are now ({', '.join(names)})"
    return None


class _ProbeTransport(asyncio.Transport):
    """A transport that keeps what is written."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 1), "sockname": ("127.0.0.1", 2)}.get(name, default)


_PROBE_REQUEST = b"POST /probe HTTP/1.1\r\nHost: probe\r\nContent-Length: 5\r\n\r\nprobe"


def _probe(classes: Classes) -> dict[str, set[str]]:
    """The attributes each owner has at the moments the gateway reads them, seen on one
    request served by each protocol (its own loop, in a thread: the caller may be in one)."""
    seen: dict[str, set[str]] = {}
    errors: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(_probe_protocols(classes, seen))
        except BaseException as exc:  # reported as the hooks it could not see
            errors.append(exc)

    thread = threading.Thread(target=run, name="uvicorn-adapter-probe")
    thread.start()
    thread.join()
    if errors:
        log.debug("uvicorn adapter probe failed", exc_info=errors[0])
    return seen


def _names(obj: Any, hooks_of: str) -> set[str]:
    return {h.name for h in HOOKS if h.owner == hooks_of and hasattr(obj, h.name)}


async def _probe_protocols(classes: Classes, seen: dict[str, set[str]]) -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    config = classes.Config(app, log_config=None, lifespan="off")
    config.load()
    seen["Config"] = _names(config, "Config")
    for owner in ("HttpToolsProtocol", "H11Protocol"):
        try:
            await _probe_one(getattr(classes, owner), owner, config, seen)
        except Exception as exc:  # what it saw before failing still counts
            log.debug("uvicorn adapter probe of %s failed", owner, exc_info=exc)
    seen["Server"] = _names(classes.Server(config), "Server")
    request = classes.Request({"type": "http", "headers": []})
    remember_body(request, b"probe")
    body = request.body()
    try:
        body.send(None)
    except StopIteration as done:  # answered from _body, without receiving
        if done.value == b"probe":
            seen["Request"] = {"_body"}
    except Exception:
        pass
    else:
        body.close()


async def _probe_one(base: type, owner: str, config: Any, seen: dict[str, set[str]]) -> None:
    """One request through ``base``: its attributes once connected, its cycle's once the
    request's head is in, both again once answered."""
    protocol = base(config=config, server_state=ServerState(), app_state={})
    transport = _ProbeTransport()
    try:
        protocol.connection_made(transport)
        seen[owner] = _names(protocol, owner)
        protocol.data_received(_PROBE_REQUEST)
        cycle = getattr(protocol, "cycle", None)
        if cycle is not None and owner == "HttpToolsProtocol":
            seen["RequestResponseCycle"] = _names(cycle, "RequestResponseCycle")
        for _ in range(50):
            await asyncio.sleep(0)
            if getattr(cycle, "response_complete", False):
                break
    finally:
        protocol.connection_lost(None)


# ---------------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class ServingPlan:
    """What the gateway may use: ``bounds`` (the bounded protocols) and ``fast`` (the fast
    path); ``reasons`` says why something is off."""

    bounds: bool
    fast: bool
    reasons: tuple[str, ...] = field(default=())


_checked: dict[str, list[str]] | None = None
_logged: set[str] = set()


_TIERS_OFF = (
    ("bounds", logging.ERROR, "connection bounds", "serving with uvicorn's stock protocols"),
    ("fast", logging.WARNING, "fast path", "every route is served through FastAPI's routing"),
)
"""Per tier: how loud its failure is logged, what it is called, what serves instead."""


def serving_plan(classes: Classes | None = None) -> ServingPlan:
    """The plan for an app created now: the installed classes are checked once per process
    (each failure logged once); :data:`FAST_PATH_ENV` is read at every call."""
    global _checked
    if classes is not None:
        problems = check(classes)
    else:
        if _checked is None:
            _checked = check()
        problems = _checked
    written = f"written for {_versions(WRITTEN_FOR)}, installed {_versions(installed_versions())}"
    reasons: list[str] = []
    for tier, level, what, instead in _TIERS_OFF:
        if problems[tier]:
            listed = "; ".join(problems[tier])
            reasons.append(f"{what} off: {listed}")
            _log_once(
                level, f"uvicorn adapter cannot attach the {what} ({written}): {listed}; {instead}"
            )
    fast = not problems["fast"]
    if os.environ.get(FAST_PATH_ENV, "1").strip() == "0":
        fast = False
        reasons.append(f"fast path off: {FAST_PATH_ENV}=0")
        _log_once(
            logging.WARNING, f"{FAST_PATH_ENV}=0: every route is served through FastAPI's routing"
        )
    return ServingPlan(not problems["bounds"], fast, tuple(reasons))


def _log_once(level: int, message: str) -> None:
    if message not in _logged:
        _logged.add(message)
        log.log(level, message)


def require(classes: Classes | None = None) -> None:
    """Raise :class:`AdapterMismatch` naming every hook that changed (tests, CI)."""
    problems = check(classes)
    names = dict.fromkeys([*problems["bounds"], *problems["fast"]])
    if names:
        raise AdapterMismatch(names)


# ---------------------------------------------------------------------------- the surface
class Exchange:
    """One request served by the fast path: uvicorn's request cycle, seen through what the
    hot path needs."""

    __slots__ = ("_cycle", "default_headers", "receive", "scope", "send", "transport")

    def __init__(self, cycle: Any, transport: asyncio.Transport) -> None:
        self._cycle = cycle
        self.transport = transport  # the connection's own (not the cycle's head-with-body one)
        # fixed for the cycle's life: plain attributes (no call per read on the hot path)
        self.scope: Any = cycle.scope
        self.receive: Callable[[], Coroutine[Any, Any, Any]] = cycle.receive
        self.send: Callable[[Any], Coroutine[Any, Any, None]] = cycle.send
        self.default_headers: list[tuple[bytes, bytes]] = cycle.default_headers

    @property
    def disconnected(self) -> bool:
        return bool(self._cycle.disconnected)

    @property
    def started(self) -> bool:
        return bool(self._cycle.response_started)

    @property
    def keep_alive(self) -> bool:
        return bool(self._cycle.keep_alive)

    def close_after(self) -> None:
        """The connection closes after this answer."""
        self._cycle.keep_alive = False

    def write_whole(self, head: bytes, body: bytes | memoryview) -> None:
        """Write a whole response (``head`` ends with its blank line) in one ``writev`` and
        finish the cycle as uvicorn's ``send`` would (closing unless kept alive)."""
        cycle = self._cycle
        cycle.response_started = True
        cycle.waiting_for_100_continue = False
        self.transport.writelines((head, body))
        cycle.response_complete = True
        cycle.message_event.set()
        if not cycle.keep_alive:
            self.transport.close()
        cycle.on_response()


def arrival_event(receive: Any) -> asyncio.Event | None:
    """The event uvicorn's cycle sets when a message waits for ``receive`` (None: another
    server's ``receive``): a body deadline needs no timer while it is set."""
    return getattr(getattr(receive, "__self__", None), "message_event", None)


def close_after_response(connection: Any) -> None:
    """The request in progress on ``connection`` (a uvicorn protocol) gets ``Connection:
    close``."""
    cycle = getattr(connection, "cycle", None)
    if cycle is not None:
        cycle.keep_alive = False


def is_idle(connection: Any) -> bool:
    """A kept-alive connection between two requests (or one that has not sent any yet)."""
    cycle = getattr(connection, "cycle", None)
    return cycle is None or bool(cycle.response_complete)


def peer_address(transport: asyncio.BaseTransport) -> tuple[str, int] | None:
    """The client's address as uvicorn records it on its protocols (``open_clients``)."""
    return get_remote_addr(transport)  # type: ignore[arg-type]


def stop_accepting(server: Server) -> None:
    """Close ``server``'s listeners (the sockets stay open wherever they were handed to)."""
    for listener in getattr(server, "servers", ()):  # set by startup; uvicorn closes them anyway
        listener.close()


def open_connections(server: Server) -> list[Any]:
    """The protocols of ``server``'s open connections."""
    return list(server.server_state.connections)


def mark_draining(server: Server) -> None:
    """Tell ``server``'s protocols the server drains (``close_after_response_if_draining``)."""
    server.server_state.draining = True  # type: ignore[attr-defined]


def remember_body(request: Request, body: bytes) -> None:
    """Make ``request.body()``/``form()`` answer ``body`` (already read from the stream)."""
    request._body = body


class _PublicHooks:
    """The private hooks both uvicorn HTTP protocols share, under public names (a mixin placed
    before the protocol in the bases)."""

    # provided by the uvicorn protocol the subclass also derives from
    connections: set[Any]
    server_state: ServerState
    _unset_keepalive_if_required: Callable[[], None]

    def stop_keepalive_timer(self) -> None:
        self._unset_keepalive_if_required()

    def open_clients(self) -> list[tuple[str, int] | None]:
        return [getattr(c, "client", None) for c in self.connections]

    def close_after_response_if_draining(self) -> None:
        """While the server drains (``mark_draining``), the request in progress gets
        ``Connection: close``."""
        if getattr(self.server_state, "draining", False):
            close_after_response(self)


class H11Base(_PublicHooks, H11Protocol):
    """uvicorn's h11 protocol with its private hooks under public names."""

    def configured_head_limit(self) -> int | None:
        return self.config.h11_max_incomplete_event_size

    def h11(self) -> Any:
        """The connection's ``h11.Connection`` (its ``their_state``, ``trailing_data``)."""
        return self.conn


class HttpToolsBase(_PublicHooks, HttpToolsProtocol):
    """uvicorn's httptools protocol with its private hooks under public names; a subclass
    serves a request itself by returning a coroutine from :meth:`claim`."""

    def body_unwanted(self) -> bool:
        """Body bytes arriving now go nowhere: the answer is complete, or uvicorn upgrades
        the connection to a WebSocket."""
        if self.cycle.response_complete:
            return True
        return bool(self.parser.should_upgrade() and self._should_upgrade())

    def hand_over_body(self, data: bytes) -> None:
        """Give ``data`` to the current request's ``receive`` (and wake it)."""
        cycle = self.cycle
        # the first chunk kept as it came (no copy); uvicorn only reads and appends to it
        cycle.body = data if not cycle.body else cycle.body + data  # type: ignore[assignment]
        cycle.message_event.set()

    def pause_input(self) -> None:
        """Stop reading from the client until the current request's answer is sent."""
        self.flow.pause_reading()

    head_writer: Callable[[asyncio.Transport], Any] | None = None
    """When set, each new request cycle writes through ``head_writer(transport)`` (set
    before its task runs), e.g. to send the response head with the first body bytes."""

    def on_headers_complete(self) -> None:
        previous = self.cycle
        super().on_headers_complete()
        cycle = self.cycle
        if self.head_writer is not None and cycle is not None and cycle is not previous:
            cycle.transport = self.head_writer(self.transport)

    def claim(self, exchange: Exchange) -> Coroutine[Any, Any, None] | None:
        """Override: a coroutine that serves this request instead of the ASGI app, or None."""
        return None

    def _start_asgi_task(self, cycle: Any, app: Any) -> None:
        serve = self.claim(Exchange(cycle, self.transport))
        if serve is None:
            super()._start_asgi_task(cycle, app)
            return
        # as uvicorn 0.54 starts its own: in a fresh context under reset_contextvars, and
        # tracked in the server's tasks (graceful shutdown waits for them)
        if self.config.reset_contextvars:
            task = self.loop.create_task(serve, context=contextvars.Context())
        else:
            task = self.loop.create_task(serve)
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)
