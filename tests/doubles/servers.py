"""Run an ASGI app under a real uvicorn server on a loopback port, in a background thread.

Usage::

    with ServerThread(app) as server:
        httpx.get(server.url + "/health")
    # or: server = ServerThread(app).start(); ...; server.stop()
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import uvicorn


def bind_loopback(port: int = 0) -> socket.socket:
    """A listening-ready TCP socket on 127.0.0.1 (port 0: a free port)."""
    # proto IPPROTO_TCP so asyncio sets TCP_NODELAY on accepted connections (else ~40 ms
    # delayed-ACK stalls on keep-alive connections)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    return sock


class ServerThread:
    """uvicorn.Server in a daemon thread; ``port``/``url`` are known before it starts.

    ``sock``: serve on this bound socket (e.g. one from :func:`bind_loopback` that the test
    held, not listening, so that connections were refused until now) instead of ``port``.
    """

    def __init__(
        self,
        app: Any,
        port: int = 0,
        log_level: str = "critical",
        sock: socket.socket | None = None,
        **config: Any,
    ) -> None:
        self.app = app
        self._sock = sock if sock is not None else bind_loopback(port)
        self.port: int = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config.setdefault("timeout_graceful_shutdown", 2)
        self.server = uvicorn.Server(
            uvicorn.Config(app, log_level=log_level, access_log=False, lifespan="on", **config)
        )
        self._thread: threading.Thread | None = None

    def start(self, timeout: float = 10.0) -> ServerThread:
        self._thread = threading.Thread(
            target=self.server.run,
            kwargs={"sockets": [self._sock]},
            daemon=True,
            name=f"uvicorn-{self.port}",
        )
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self._thread.is_alive():
                raise RuntimeError(f"server on port {self.port} failed to start")
            if time.monotonic() > deadline:
                raise TimeoutError(f"server on port {self.port} did not start")
            time.sleep(0.005)
        return self

    def request_stop(self) -> None:
        """Ask the server to exit without waiting (see :meth:`stop`)."""
        self.server.should_exit = True

    def stop(self, timeout: float = 10.0) -> None:
        if self._thread is None:
            return
        self.server.should_exit = True
        self._thread.join(timeout)
        self._thread = None
        self._sock.close()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
