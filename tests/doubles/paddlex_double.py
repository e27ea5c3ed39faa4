"""A protocol-accurate test double of one ``paddlex --serve`` PaddleOCR-VL instance.

Speaks the wire protocol of docs/paddlex-protocol.md, its answers built by
:mod:`doubles.paddlex` (which the benchmarks' simulated fleet, ``bench/fleet.py``, uses too):

- ``GET /health`` -> ``{"logId", "errorCode": 0, "errorMsg": "Healthy"}``.
- ``POST /layout-parsing``: success envelope ``{"logId", "result", "errorCode": 0,
  "errorMsg": "Success"}``; ``result.layoutParsingResults`` (one per processed page, with
  ``prunedResult`` and ``markdown: {text, images}``) and ``dataInfo``; ``outputImages`` and
  ``inputImage`` only when ``visualize`` is true or absent (the server default is true).
  PDFs are "rendered" as PaddleX reads them, with PDFium (``pypdfium2``: its page count and
  page sizes), images decoded with OpenCV's ``cv2.imdecode`` (what PaddleX's decoders refuse is
  422 "Invalid input file"), and pages beyond ``max_num_input_imgs`` (default 10, like the
  real server) are silently dropped.
- Validation errors: 422 with ``errorMsg`` a JSON *string* of the pydantic error list; base64
  without ``fileType``: 422 "File type cannot be determined"; undecodable file: 422 "Invalid
  input file"; any other exception: 500 "Internal server error" (and, as with uvicorn 0.54,
  the keep-alive connection is reset afterwards). Error logIds are fresh uuid4s.
- ``POST /restructure-pages``: ``concatenatePages`` true gives one result whose markdown is
  the whole document; a null ``markdownImages`` with ``concatenatePages`` true is a 500 (the
  real server's ``dict.update(None)`` pitfall).
- One ``/layout-parsing`` inference at a time (an asyncio lock, like the real worker thread);
  ``/health`` and ``/restructure-pages`` stay responsive meanwhile.

Each page's markdown names the instance (``name``, default ``double-<port>``), so tests can see
which upstream served a document.

Knobs (:class:`Knobs`, mutable at any time, e.g. ``double.knobs.fail_next = 2``):

- ``service_time_s`` / ``per_page_s``: simulated inference time per call / per page; or
  ``service_time_fn(pages) -> seconds`` to draw it from a distribution.
- ``max_num_input_imgs``: page limit (None: unlimited).
- ``fail_next``: the next N ``/layout-parsing`` calls raise (500); ``always_500``: all do.
- ``fail_restructure_next``: the next N ``/restructure-pages`` calls raise (500).
- ``poison_width``: a document with a page of this rendered width (twice the PDF points) makes
  ``/layout-parsing`` raise (500), like a page that crashes the pipeline.
- ``drop_next`` / ``always_drop``: ``/layout-parsing`` closes the connection without answering.
- ``health_status``: status of ``/health`` (200 by default).
- ``hang``: a wedged process: every request that arrives while it is set, ``/health``
  included, is accepted and never answered (until ``hang`` is cleared again); ``stats.hung``
  counts them.
- ``extra_markdown``: appended as an extra block to every page (e.g. image tags, "回回回").
- ``markdown_images``: ``markdown.images`` of every page (default ``{}``).

Usage::

    with DoubleFleet(3, service_time_s=0.05) as fleet:
        fleet.urls                    # ["http://127.0.0.1:PORT", ...]
        fleet[0].knobs.always_500 = True
        fleet[1].requests             # RecordedRequest list
        fleet[2].stop(); fleet[2].start()   # same port again
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from doubles import paddlex as protocol
from gateway.wire import paddlex_routes
from tests.doubles.servers import ServerThread

IMAGE_EXTS = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp")


@dataclass
class Knobs:
    """Behaviour switches of one double (see module doc)."""

    service_time_s: float = 0.0
    per_page_s: float = 0.0
    service_time_fn: Callable[[int], float] | None = None
    max_num_input_imgs: int | None = 10
    fail_next: int = 0
    always_500: bool = False
    fail_restructure_next: int = 0
    poison_width: int | None = None
    drop_next: int = 0
    always_drop: bool = False
    health_status: int = 200
    hang: bool = False
    extra_markdown: str = ""
    markdown_images: dict[str, str] = field(default_factory=dict)
    name: str | None = None


@dataclass
class RecordedRequest:
    path: str
    body: Any
    at: float


@dataclass
class Stats:
    layout_calls: int = 0
    layout_served: int = 0
    restructure_calls: int = 0
    pending: int = 0
    max_pending: int = 0
    hung: int = 0


def _envelope_error(status: int, message: str) -> JSONResponse:
    return JSONResponse(protocol.error(status, message), status_code=status)


class InferRequest(BaseModel):
    """The fields of PaddleX's InferRequest the double looks at (extra fields ignored)."""

    file: str
    fileType: Literal[0, 1] | None = None
    visualize: bool | None = None
    logId: str | None = None
    prettifyMarkdown: bool = True
    restructurePages: bool = False


class RestructurePage(BaseModel):
    prunedResult: dict[str, Any]
    markdownImages: dict[str, str] | None = None


class RestructureRequest(BaseModel):
    pages: list[RestructurePage]
    mergeTables: bool = True
    relevelTitles: bool = True
    concatenatePages: bool = False
    prettifyMarkdown: bool = True
    showFormulaNumber: bool = False
    logId: str | None = None


def create_double_app(knobs: Knobs, record: list[RecordedRequest], stats: Stats) -> FastAPI:
    """The FastAPI app of one double (state lives in the passed objects)."""
    app = FastAPI(title="paddlex double")
    lock = asyncio.Lock()  # one inference at a time, like PaddleX's single worker thread

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _envelope_error(422, json.dumps(jsonable_encoder(exc.errors())))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _envelope_error(exc.status_code, str(exc.detail))

    @app.exception_handler(Exception)
    async def _unhandled(request: Request, exc: Exception) -> JSONResponse:
        return _envelope_error(500, "Internal server error")

    def name_of(request: Request) -> str:
        if knobs.name:
            return knobs.name
        server = request.scope.get("server") or ("127.0.0.1", 0)
        return f"double-{server[1]}"

    @app.get(paddlex_routes.HEALTH)
    async def health() -> JSONResponse:
        if knobs.health_status != 200:
            return _envelope_error(knobs.health_status, "Unhealthy")
        return JSONResponse(protocol.healthy())

    async def load_file(req: InferRequest) -> tuple[bytes, int]:
        if req.file.startswith(("http://", "https://")):
            file_type = req.fileType
            if file_type is None:
                path = req.file.split("?", 1)[0].lower()
                if path.endswith(".pdf"):
                    file_type = 0
                elif path.endswith(IMAGE_EXTS):
                    file_type = 1
                else:
                    raise StarletteHTTPException(422, "Unsupported file type")
            async with httpx.AsyncClient(trust_env=False) as client:
                response = await client.get(req.file, timeout=30)
            return response.content, file_type
        if req.fileType is None:
            raise StarletteHTTPException(422, "File type cannot be determined")
        try:
            return base64.b64decode(req.file), req.fileType
        except (binascii.Error, ValueError):
            raise StarletteHTTPException(422, "Invalid input file") from None

    def render(data: bytes, file_type: int) -> list[tuple[int, int]]:
        """The page sizes the real server would process."""
        try:
            if file_type == 1:
                return [protocol.image_size(data)]
            sizes = protocol.pdf_page_sizes(data)
        except Exception:
            raise StarletteHTTPException(422, "Invalid input file") from None
        if knobs.max_num_input_imgs is not None:
            sizes = sizes[: knobs.max_num_input_imgs]  # silent truncation, HTTP 200
        return sizes

    @app.post(paddlex_routes.LAYOUT_PARSING, response_model_exclude_none=True)
    async def layout_parsing(req: InferRequest, request: Request) -> JSONResponse:
        record.append(RecordedRequest(paddlex_routes.LAYOUT_PARSING, req.model_dump(), time.time()))
        stats.layout_calls += 1
        data, file_type = await load_file(req)
        sizes = render(data, file_type)
        name = name_of(request)
        stats.pending += 1
        stats.max_pending = max(stats.max_pending, stats.pending)
        try:
            async with lock:
                delay = (
                    knobs.service_time_fn(len(sizes))
                    if knobs.service_time_fn
                    else knobs.service_time_s + knobs.per_page_s * len(sizes)
                )
                if delay > 0:
                    await asyncio.sleep(delay)
                if knobs.always_500:
                    raise RuntimeError("injected failure (always_500)")
                if knobs.fail_next > 0:
                    knobs.fail_next -= 1
                    raise RuntimeError("injected failure (fail_next)")
                if knobs.poison_width is not None and any(
                    w == knobs.poison_width for w, _ in sizes
                ):
                    raise RuntimeError("injected failure (poison_width)")
        finally:
            stats.pending -= 1
        pdf, n = file_type == 0, len(sizes)
        extra = [knobs.extra_markdown] if knobs.extra_markdown else []
        pages = [
            protocol.page_result(
                [f"{name} page {i + 1}/{n}", *extra],
                size,
                (i, n) if pdf else None,
                knobs.markdown_images,
                visualize=req.visualize is not False,  # the server's default is visualize: true
            )
            for i, size in enumerate(sizes)
        ]
        stats.layout_served += 1
        return JSONResponse(protocol.success(protocol.layout_result(pages, sizes, pdf), req.logId))

    @app.post(paddlex_routes.RESTRUCTURE_PAGES)
    async def restructure_pages(req: RestructureRequest) -> JSONResponse:
        record.append(
            RecordedRequest(paddlex_routes.RESTRUCTURE_PAGES, req.model_dump(), time.time())
        )
        stats.restructure_calls += 1
        if knobs.fail_restructure_next > 0:
            knobs.fail_restructure_next -= 1
            raise RuntimeError("injected failure (fail_restructure_next)")
        pages = [p.model_dump() for p in req.pages]
        result = protocol.restructure_result(pages, req.concatenatePages)
        return JSONResponse(protocol.success(jsonable_encoder(result), req.logId))

    return app


class _DropMiddleware:
    """Closes the TCP connection without an answer when ``drop_next``/``always_drop`` say so,
    and holds every request while ``hang`` is set."""

    def __init__(self, app: Any, knobs: Knobs, stats: Stats) -> None:
        self.app = app
        self.knobs = knobs
        self.stats = stats

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and self.knobs.hang:
            self.stats.hung += 1
            while self.knobs.hang:
                await asyncio.sleep(0.02)
        if (
            scope["type"] == "http"
            and scope["path"] == paddlex_routes.LAYOUT_PARSING
            and (self.knobs.always_drop or self.knobs.drop_next > 0)
        ):
            if self.knobs.drop_next > 0:
                self.knobs.drop_next -= 1
            cycle = getattr(receive, "__self__", None)
            transport = getattr(cycle, "transport", None)
            if transport is not None:
                transport.abort()
                await asyncio.sleep(0.01)  # let uvicorn notice the disconnect
                return
        await self.app(scope, receive, send)


class PaddlexDouble:
    """One double on a loopback port (uvicorn in a thread)."""

    def __init__(self, knobs: Knobs | None = None, port: int = 0) -> None:
        self.knobs = knobs or Knobs()
        self.requests: list[RecordedRequest] = []
        self.stats = Stats()
        self._lock = threading.Lock()
        self._server = ServerThread(self._build_app(), port=port)
        self.port = self._server.port
        self.url = self._server.url
        self.running = False

    def _build_app(self) -> Any:
        return _DropMiddleware(
            create_double_app(self.knobs, self.requests, self.stats), self.knobs, self.stats
        )

    def start(self) -> PaddlexDouble:
        if not self.running:
            if self._server._thread is None and self._server.server.started:
                self._server = ServerThread(self._build_app(), port=self.port)
            self._server.start()
            self.running = True
        return self

    def stop(self) -> None:
        if self.running:
            self._server.stop()
            self.running = False

    def layout_requests(self) -> list[RecordedRequest]:
        return [r for r in list(self.requests) if r.path == paddlex_routes.LAYOUT_PARSING]

    def restructure_requests(self) -> list[RecordedRequest]:
        return [r for r in list(self.requests) if r.path == paddlex_routes.RESTRUCTURE_PAGES]


class DoubleFleet:
    """N doubles; a context manager that starts and stops them all."""

    def __init__(self, n: int, **knobs: Any) -> None:
        self.doubles = [PaddlexDouble(Knobs(**knobs)) for _ in range(n)]

    @property
    def urls(self) -> list[str]:
        return [d.url for d in self.doubles]

    def __getitem__(self, index: int) -> PaddlexDouble:
        return self.doubles[index]

    def __len__(self) -> int:
        return len(self.doubles)

    def by_url(self, url: str) -> PaddlexDouble:
        return next(d for d in self.doubles if d.url == url)

    def start(self) -> DoubleFleet:
        for double in self.doubles:
            double.start()
        return self

    def stop(self) -> None:
        for double in self.doubles:  # signal all first: shutdowns overlap
            if double.running:
                double._server.request_stop()
        for double in self.doubles:
            double.stop()

    def __enter__(self) -> DoubleFleet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
