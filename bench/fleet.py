"""A fast, protocol-correct simulated PaddleX fleet in one asyncio process.

Each instance behaves like ``paddlex --serve`` for what the gateway reads, its answers built by
:mod:`doubles.paddlex` (the protocol the tests' PaddleX double speaks too):

- ``POST /layout-parsing`` runs ONE inference at a time; the rest wait in an unbounded FIFO with no
  deadline.  The service time of an image is the document's *work* (read from the PNG, see
  ``workload.py``) times the instance's mean service time (slow instances have a 3-5x mean).  A
  PDF (``fileType`` 0) costs ``request_s + pages * page_s`` times the instance's slowness
  factor (pages read with PDFium, as PaddleX reads them) and answers one result per page, each
  ``prunedResult`` ``width``/``height`` being twice its MediaBox (PaddleX renders at scale 2),
  so a benchmark can tell which page of which document came back.  Every parse that ran to its
  end (even for a caller that went away, as PaddleX does) is logged: ``{"instance", "logId",
  "pages": [[width, height], ...], "start", "end"}`` (wall clock), read with ``/_admin/log``.
- ``POST /restructure-pages`` and ``GET /health`` are cheap and do not wait in that queue.
- 422 for base64 input without ``fileType``. An image's answer has 8 x 8 pages (the PNG is not
  decoded: this process serves 48 instances on a core it shares with the gateway).

Fault injection (admin port): ``refuse`` closes the listening socket and resets every open
connection (a crashed process: connections are refused); ``hang`` keeps accepting but never
answers anything again, ``/health`` included (a wedged process).  ``reset`` revives everything,
drops all queued work and zeroes the counters and the parse log; ``log`` (body ``{"clear":
true}`` to empty it after reading) returns the parse log of every instance.

Run: ``python -m bench.fleet --spec '<FleetSpec json>'`` prints one JSON line
``{"admin": port, "ports": [...], ...}`` once every port listens, then serves until SIGTERM or
until its parent exits.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import json
import os
import random
import signal
import sys
import time
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Any

from bench.minihttp import DropConnection, HttpRequest, HttpResponse, MiniServer
from bench.workload import FleetSpec, InstanceSpec, parse_work
from doubles import paddlex as protocol
from gateway.wire import paddlex_routes

ROUTES = {
    paddlex_routes.HEALTH: "GET",
    paddlex_routes.LAYOUT_PARSING: "POST",
    paddlex_routes.RESTRUCTURE_PAGES: "POST",
}
"""The method of each path an instance serves."""


def _err(status: int, msg: str) -> HttpResponse:
    return HttpResponse.json(status, protocol.error(status, msg))


def layout_answer(text: str, n_pages: int, file_type: int | None, log_id: str) -> dict[str, Any]:
    """A ``/layout-parsing`` success envelope: ``n_pages`` 8 x 8 pages of one text block each."""
    pdf = file_type == 0
    pages = [
        protocol.page_result([f"{text} page {p}"], (8, 8), (p, n_pages) if pdf else None)
        for p in range(n_pages)
    ]
    return protocol.success(protocol.layout_result(pages, [(8, 8)] * n_pages, pdf), log_id)


class Aborted(DropConnection):
    """The instance crashed or was reset: drop the connection without an answer."""


@dataclass
class Job:
    service_s: float
    fut: asyncio.Future
    entry: dict[str, Any] | None = None  # logged once the parse has run to its end


class Instance:
    def __init__(self, spec: InstanceSpec, fleet: FleetSpec):
        self.spec = spec
        self.fleet = fleet
        self.rng = random.Random(fleet.seed * 1000003 + spec.index)
        self.server = MiniServer(self.handle)
        self.queue: deque[Job] = deque()
        self.wake = asyncio.Event()
        self.state = "up"  # up | refuse | hang
        self.worker: asyncio.Task | None = None
        self.hang_forever: asyncio.Future | None = None
        self.reset_stats()

    def reset_stats(self) -> None:
        self.received = 0
        self.served = 0
        self.max_depth = 0
        self.busy_s = 0.0
        self.unmarked = 0
        self.pages = 0
        self.log: list[dict[str, Any]] = []

    @property
    def port(self) -> int:
        return self.server.port

    async def start(self, port: int = 0) -> None:
        await self.server.start(port)
        self._start_worker()

    def _start_worker(self) -> None:
        if self.worker is None or self.worker.done():
            self.worker = asyncio.create_task(self._work())

    async def _work(self) -> None:
        while True:
            while not self.queue:
                self.wake.clear()
                await self.wake.wait()
            job = self.queue[0]
            started = time.time()
            if job.service_s > 0:
                await asyncio.sleep(job.service_s)
            self.queue.popleft()
            self.busy_s += job.service_s
            self.served += 1
            if job.entry is not None:
                self.pages += len(job.entry["pages"])
                self.log.append({**job.entry, "start": started, "end": time.time()})
            if not job.fut.done():
                job.fut.set_result(None)

    # ------------------------------------------------------------------ faults
    async def kill(self, mode: str) -> None:
        if mode == "refuse":
            self.state = "refuse"
            await self.server.stop_listening()
            self._drop_work()
            self.server.abort_connections()
        elif mode == "hang":
            self.state = "hang"
            if self.worker is not None:
                self.worker.cancel()  # the inference in progress never finishes
        else:
            raise ValueError(mode)

    def _drop_work(self) -> None:
        if self.worker is not None:
            self.worker.cancel()
            self.worker = None
        while self.queue:
            job = self.queue.popleft()
            if not job.fut.done():
                job.fut.set_exception(Aborted())

    async def reset(self) -> None:
        self._drop_work()
        self.server.abort_connections()
        if self.hang_forever is not None and not self.hang_forever.done():
            self.hang_forever.set_exception(Aborted())
        self.hang_forever = None
        if self.server.server is None:
            await self.server.start(self.server.port)
        self.state = "up"
        self.reset_stats()
        self._start_worker()

    async def _hang(self) -> HttpResponse:
        if self.hang_forever is None or self.hang_forever.done():
            self.hang_forever = asyncio.get_running_loop().create_future()
        await asyncio.shield(self.hang_forever)
        raise Aborted

    async def _queued(self, service_s: float, entry: dict[str, Any] | None = None) -> None:
        """Wait in the FIFO until this request's inference of ``service_s`` has run; an
        instance hung meanwhile never answers (:meth:`_hang`)."""
        self.received += 1
        job = Job(service_s, asyncio.get_running_loop().create_future(), entry)
        self.queue.append(job)
        self.max_depth = max(self.max_depth, len(self.queue))
        self.wake.set()
        await job.fut
        if self.state == "hang":
            await self._hang()

    # ------------------------------------------------------------------ protocol
    async def handle(self, req: HttpRequest) -> HttpResponse:
        if self.state == "hang":
            return await self._hang()
        method = ROUTES.get(req.path)
        if method is None:
            return _err(404, "Not Found")
        if req.method != method:
            return _err(405, "Method Not Allowed")
        if req.path == paddlex_routes.HEALTH:
            return HttpResponse.json(200, protocol.healthy())
        if req.path == paddlex_routes.LAYOUT_PARSING:
            return await self._layout_parsing(req)
        return self._restructure(req)

    def _draw_work(self) -> float:
        sigma = self.fleet.sigma
        return self.rng.lognormvariate(-0.5 * sigma * sigma, sigma) if sigma > 0 else 1.0

    async def _layout_parsing(self, req: HttpRequest) -> HttpResponse:
        try:
            body = req.json()
        except ValueError:
            return _err(422, json.dumps([{"type": "json_invalid", "msg": "JSON decode error"}]))
        if not isinstance(body, dict) or not isinstance(body.get("file"), str):
            return _err(422, json.dumps([{"type": "missing", "loc": ["body", "file"]}]))
        file = body["file"]
        file_type = body.get("fileType")
        if file_type not in (None, 0, 1):
            return _err(422, json.dumps([{"type": "literal_error", "loc": ["body", "fileType"]}]))
        is_url = file.startswith(("http://", "https://"))
        if file_type is None and not is_url:
            return _err(422, "File type cannot be determined")
        work_id = None
        raw = b""
        if not is_url:
            try:
                raw = base64.b64decode(file, validate=False)
            except (binascii.Error, ValueError):
                return _err(500, "Internal server error")
            work_id = parse_work(raw)
        if file_type == 0 and raw.startswith(b"%PDF"):
            return await self._pdf(body, raw)
        if work_id is None:
            self.unmarked += 1
            work, doc_id = self._draw_work(), -1
        else:
            work, doc_id = work_id
        await self._queued(work * self.spec.mean_s)
        n_pages = 1 if file_type == 1 or is_url else 2
        text = f"bench document {doc_id} served by instance {self.spec.index}"
        return HttpResponse.json(
            200, layout_answer(text, n_pages, file_type, body.get("logId") or str(uuid.uuid4()))
        )

    async def _pdf(self, body: dict[str, Any], raw: bytes) -> HttpResponse:
        """A PDF under the cost model: ``request_s + pages * page_s`` (times the factor)."""
        try:  # each page's rendered (width, height), read with PDFium as PaddleX does
            sizes = await asyncio.to_thread(protocol.pdf_page_sizes, raw)
        except Exception:  # a PDF PDFium cannot read: PaddleX fails it
            sizes = []
        if not sizes:
            return _err(500, "Internal server error")
        log_id = body.get("logId") or str(uuid.uuid4())
        service = self.fleet.pdf_seconds(len(sizes), self.spec.factor)
        entry = {"instance": self.spec.index, "logId": log_id, "pages": [list(s) for s in sizes]}
        await self._queued(service, entry)
        n = len(sizes)
        pages = [
            protocol.page_result([f"page {w}x{h}"], (w, h), (i, n))
            for i, (w, h) in enumerate(sizes)
        ]
        return HttpResponse.json(
            200, protocol.success(protocol.layout_result(pages, sizes, pdf=True), log_id)
        )

    def _restructure(self, req: HttpRequest) -> HttpResponse:
        try:
            body = req.json()
        except ValueError:
            return _err(422, "[]")
        pages = body.get("pages") if isinstance(body, dict) else None
        if not isinstance(pages, list) or not all(
            isinstance(p, dict) and isinstance(p.get("prunedResult"), dict) for p in pages
        ):
            return _err(422, json.dumps([{"type": "missing", "loc": ["body", "pages"]}]))
        try:
            result = protocol.restructure_result(pages, bool(body.get("concatenatePages")))
        except TypeError:  # the real server's dict.update(None)
            return _err(500, "Internal server error")
        return HttpResponse.json(200, protocol.success(result, body.get("logId")))

    def stats(self) -> dict:
        return {
            "index": self.spec.index,
            "port": self.port,
            "mean_s": self.spec.mean_s,
            "slow": self.spec.slow,
            "state": self.state,
            "received": self.received,
            "served": self.served,
            "queued": len(self.queue),
            "max_depth": self.max_depth,
            "busy_s": round(self.busy_s, 3),
            "unmarked": self.unmarked,
            "pages": self.pages,
        }


class Fleet:
    def __init__(self, spec: FleetSpec):
        self.spec = spec
        self.instances = [Instance(s, spec) for s in spec.instances()]
        self.admin = MiniServer(self._admin)

    async def start(self) -> dict:
        for inst in self.instances:
            await inst.start()
        await self.admin.start()
        return self.describe()

    def describe(self) -> dict:
        return {
            "admin": self.admin.port,
            "ports": [i.port for i in self.instances],
            "means": [i.spec.mean_s for i in self.instances],
            "slow": [i.spec.index for i in self.instances if i.spec.slow],
            "capacity_rps": self.spec.capacity_rps(),
        }

    async def _admin(self, req: HttpRequest) -> HttpResponse:
        body = req.json() if req.body else {}
        if req.path == "/_admin/kill":
            for i in body["ids"]:
                await self.instances[i].kill(body.get("mode", "refuse"))
            return HttpResponse.json(200, {"killed": body["ids"], "mode": body.get("mode")})
        if req.path == "/_admin/reset":
            for inst in self.instances:
                await inst.reset()
            return HttpResponse.json(200, {"reset": len(self.instances)})
        if req.path == "/_admin/stats":
            return HttpResponse.json(200, {"instances": [i.stats() for i in self.instances]})
        if req.path == "/_admin/log":
            entries = sorted((e for i in self.instances for e in i.log), key=lambda e: e["end"])
            if body.get("clear"):
                for inst in self.instances:
                    inst.log = []
            return HttpResponse.json(200, {"log": entries})
        return HttpResponse.json(404, {"error": "unknown admin path"})


async def _main(spec: FleetSpec) -> None:
    fleet = Fleet(spec)
    info = await fleet.start()
    sys.stdout.write(json.dumps(info) + "\n")
    sys.stdout.flush()
    loop = asyncio.get_running_loop()
    stop = loop.create_future()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: stop.done() or stop.set_result(None))

    parent = os.getppid()

    async def watch_parent() -> None:  # never outlive the benchmark that started us
        while not stop.done():
            await asyncio.sleep(1.0)
            if os.getppid() != parent and not stop.done():
                stop.set_result(None)

    watcher = asyncio.create_task(watch_parent())
    await stop
    watcher.cancel()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--spec", default="{}", help="FleetSpec fields as JSON")
    args = ap.parse_args(argv)
    d = json.loads(args.spec)
    if "slow_factors" in d:
        d["slow_factors"] = tuple(d["slow_factors"])
    asyncio.run(_main(FleetSpec(**d)))


if __name__ == "__main__":
    main()
