"""uvicorn's server with a shutdown that lets keep-alive clients leave without an error.

uvicorn's graceful shutdown stops accepting, lets the requests in flight finish and closes every
idle keep-alive connection at once. A client that sends its next request on such a connection
just then gets a reset instead of an answer. When a gateway hands its listening sockets to the
one that replaces it (:mod:`gateway.server.listeners`) the port never closes, so the only errors a
client could still see are those. :class:`GatewayServer` drains first:

1. it stops accepting (the sockets stay open wherever they were handed to) and calls
   ``on_shutdown`` (the handover offer stops);
2. every request in flight, and every request that starts on a kept-alive connection from now
   on, is answered with ``Connection: close`` (:mod:`gateway.server.connections`), so the client
   opens its next connection, which the successor accepts;
3. after at most :data:`DRAIN_IDLE_S`, or as soon as no connection is idle, uvicorn's own
   shutdown runs (what still runs finishes; the connections left idle are closed).

:func:`serve_on_port` runs one such server on the sockets of the process it replaces (the
gateway with one worker, and the slice keeper): it takes them over, serves, offers them to its
own successor and keeps the serving file (:class:`gateway.server.listeners.ServingFile`) that the
deployment's readiness check reads.

Usage::

    server = GatewayServer(uvicorn.Config(app, ...), on_shutdown=offer.close)
    await server.serve(sockets=sockets)

    status = serve_on_port(app, Handover("0.0.0.0", 9101, "/run/gw/handover.sock",
                                         "/run/gateway.serving"), log_level="info")
"""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import uvicorn

from gateway.server.listeners import Offer, ServingFile, obtain, start_offer
from gateway.wire.uvicorn_adapter import (
    close_after_response,
    is_idle,
    mark_draining,
    open_connections,
    stop_accepting,
)

DRAIN_IDLE_S = 1.5
"""How long idle keep-alive connections get to carry one more request before they are closed."""


class GatewayServer(uvicorn.Server):
    """See module doc."""

    def __init__(
        self,
        config: uvicorn.Config,
        on_shutdown: Callable[[], None] | None = None,
        drain_idle_s: float = DRAIN_IDLE_S,
    ) -> None:
        super().__init__(config)
        self.on_shutdown = on_shutdown
        self.drain_idle_s = drain_idle_s

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        stop_accepting(self)
        if self.on_shutdown is not None:
            self.on_shutdown()
        mark_draining(self)
        for connection in open_connections(self):
            if not is_idle(connection):
                close_after_response(connection)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.drain_idle_s
        while loop.time() < deadline and not self.force_exit:
            if not any(is_idle(c) for c in open_connections(self)):
                break
            await asyncio.sleep(0.05)
        await super().shutdown(sockets)


@dataclass(frozen=True)
class Handover:
    """Where a server listens, and how it takes its sockets over from its predecessor."""

    host: str
    port: int
    path: str | None = None
    """The handover's unix socket (:mod:`gateway.server.listeners`); None: sockets of its own."""
    serving_file: str | None = None
    """The :class:`~gateway.server.listeners.ServingFile`; None: none is written."""


def serve_on_port(app: Any, where: Handover, log_level: str, **options: Any) -> int:
    """Serve ``app`` as one uvicorn process (``options``: more ``uvicorn.Config`` settings) on
    the sockets of the process answering at ``where.path``, or its own; once it serves, offer
    them to its successor and say so in the serving file. 0 after a shutdown, 3 when it could
    not listen or start."""
    serving = ServingFile(where.serving_file)
    try:
        sockets, inherited = obtain(where.host, where.port, 1, where.path, serving.waiting)
    except OSError as exc:
        print(f"cannot listen on {where.host}:{where.port}: {exc}", file=sys.stderr)
        return 3
    offer = Offer(where.path, sockets) if where.path else None

    def stop_offering() -> None:
        serving.remove()
        if offer is not None:
            offer.close()

    config = uvicorn.Config(
        app, host=where.host, port=where.port, log_level=log_level.lower(), **options
    )
    server = GatewayServer(config, on_shutdown=stop_offering)

    async def serve() -> None:
        task = asyncio.ensure_future(server.serve(sockets=sockets))
        while not server.started and not task.done():
            await asyncio.sleep(0.01)
        if server.started:
            # uvicorn says where it listens only for sockets it bound itself
            bound_host, bound_port = sockets[0].getsockname()[:2]
            shown = f"[{bound_host}]" if ":" in bound_host else bound_host
            logging.getLogger("uvicorn.error").info(
                "Uvicorn running on http://%s:%d (Press CTRL+C to quit)", shown, bound_port
            )
            if offer is not None:
                start_offer(offer)
            serving.serving(inherited)
        await task

    try:
        with asyncio.Runner(loop_factory=config.get_loop_factory()) as runner:
            runner.run(serve())
    finally:
        stop_offering()
        for sock in sockets:
            sock.close()
    return 0 if server.started else 3
