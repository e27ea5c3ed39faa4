"""uvicorn's server with a shutdown that lets keep-alive clients leave without an error.

uvicorn's graceful shutdown stops accepting, lets the requests in flight finish and closes every
idle keep-alive connection at once. A client that sends its next request on such a connection
just then gets a reset instead of an answer. When a gateway hands its listening sockets to the
one that replaces it (:mod:`gateway.listeners`) the port never closes, so the only errors a
client could still see are those. :class:`GatewayServer` drains first:

1. it stops accepting (the sockets stay open wherever they were handed to) and calls
   ``on_shutdown`` (the handover offer stops);
2. every request in flight, and every request that starts on a kept-alive connection from now
   on, is answered with ``Connection: close`` (:mod:`gateway.connections`), so the client opens
   its next connection, which the successor accepts;
3. after at most :data:`DRAIN_IDLE_S`, or as soon as no connection is idle, uvicorn's own
   shutdown runs (what still runs finishes; the connections left idle are closed).

Usage::

    server = GatewayServer(uvicorn.Config(app, ...), on_shutdown=offer.close)
    await server.serve(sockets=sockets)
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

import uvicorn

from gateway.uvicorn_adapter import (
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
