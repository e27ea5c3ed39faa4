"""A stand-in for the engine's gRPC server, for plugins started outside `pulumi`.

Our plugins check that their engine is alive (pulumi_plugins.rpc.watch_engine) and exit when it
is gone, so a test that starts one by hand gives it a live address::

    with FakeEngine() as engine:
        subprocess.Popen([sys.executable, "-m", "pulumi_plugins.docker", engine.address])

It serves no service at all: the health check then answers UNIMPLEMENTED, which a plugin takes
as alive (as the official plugins do); `stop()` makes the address refuse connections, as a
killed engine's does.
"""

from __future__ import annotations

from concurrent import futures
from types import TracebackType

import grpc


class FakeEngine:
    def __init__(self) -> None:
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        port = self._server.add_insecure_port("127.0.0.1:0")
        self.address = f"127.0.0.1:{port}"
        self._server.start()

    def stop(self) -> None:
        self._server.stop(grace=None).wait()

    def __enter__(self) -> FakeEngine:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()
