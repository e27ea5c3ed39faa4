"""Page-level fan-out of long PDFs: slices to several instances at once, one restructure.

A PDF of more than ``fanout.threshold_pages`` pages is cut into slices of consecutive pages by
PDFium in the document workers (:meth:`gateway.inputs.document.DocumentInspector.cut`: PaddleX's own
engine, so a slice of a PDF that PDFium had to repair is a valid PDF). The slice size adapts to
the fleet's free capacity (:func:`free_capacity`): on an idle fleet a document spreads over
every free instance, under load slices grow up to ``fanout.max_slice_pages`` so that
per-request overhead does not waste the fleet. Each slice is
one ``/layout-parsing`` with failover (:meth:`gateway.upstream.proxy.Proxy.run`); the pages come
back in document order (each ``prunedResult.page_index`` is its position in the whole document) and
one ``/restructure-pages`` over all of them merges tables and levels titles across slices as if one
instance had parsed the whole document.

The job runner (:mod:`gateway.jobs.runner`) dispatches slices from its store; the synchronous
``/ocr`` and ``/ocr-file`` use :func:`ocr_pdf_fanned_out`.

Usage::

    if fanout.should_fan_out(settings, doc):
        result = await fanout.ocr_pdf_fanned_out(
            proxy, settings, doc, request_id, options, inspector=runtime.inspector
        )
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Awaitable, Callable
from typing import Any

import pybase64

from gateway.config.settings import Settings
from gateway.dispatch.pool import UpstreamPool
from gateway.dispatch.upstreams import Upstream
from gateway.errors import GatewayError, UpstreamFailure
from gateway.inputs.document import Document, DocumentInspector
from gateway.upstream.attempts import Attempt
from gateway.upstream.keeper_client import post_slice
from gateway.upstream.paddlex_api import (
    TRUNCATION_HINT,
    layout_body,
    markdown_text,
    parsing_results,
    restructure_body,
    restructured,
)
from gateway.upstream.proxy import OcrResult, Proxy
from gateway.wire import paddlex_routes
from gateway.wire.upstream_http import Reply, UpstreamClient

Work = Callable[[UpstreamClient, Upstream, float], Awaitable[Any]]


def plan_slices(count: int, threshold: int, max_slice: int, free: int) -> list[tuple[int, int]]:
    """(first position, count) slices of a document of ``count`` pages: one slice up to
    ``threshold`` pages; else spread over ``free`` instances, at most ``max_slice`` each.

    >>> plan_slices(40, 8, 16, 4)
    [(0, 10), (10, 10), (20, 10), (30, 10)]
    """
    if count <= threshold:
        return [(0, count)]
    size = spread_size(count, max_slice, free)
    return [(first, min(size, count - first)) for first in range(0, count, size)]


def spread_size(count: int, max_slice: int, free: int) -> int:
    """The size of the first slice :func:`plan_slices` cuts from ``count`` pages (above the
    threshold), without listing them: a job runner asks it for a backlog of many thousand
    pages at every lease.

    >>> spread_size(40, 16, 4), spread_size(200_000, 16, 48), spread_size(3, 16, 48)
    (10, 16, 1)
    """
    return max(1, min(max_slice, math.ceil(count / max(1, free)), count))


def free_capacity(pool: UpstreamPool, settings: Settings) -> int:
    """Upstream slots free now (eligible upstreams below ``upstream_concurrency``), less the
    interactive requests already waiting for one; 0 when the fleet is busy. With several
    gateway workers the attempts in flight are those of every worker (``pool.in_flight``)."""
    eligible, _ = pool.eligible()
    limit = settings.load_balance.upstream_concurrency
    count = pool.in_flight
    free = sum(max(0, limit - count(u)) for u in eligible)
    return max(0, free - pool.queue.interactive_waiting)


def pages_label(doc_pages: list[int]) -> str:
    """``page 7`` or ``pages 3-9`` of 0-based document positions (shown 1-based)."""
    if len(doc_pages) == 1:
        return f"page {doc_pages[0] + 1}"
    return f"pages {doc_pages[0] + 1}-{doc_pages[-1] + 1}"


def slice_work(
    body: dict[str, Any], positions: list[int], is_pdf: bool, key: str | None = None
) -> Work:
    """One ``/layout-parsing`` of a slice whose pages are the document's ``positions``
    (checked by :func:`slice_pages`); a job slice has an idempotency ``key`` and goes through
    its instance's keeper (:mod:`gateway.keeper`)."""

    async def work(client: UpstreamClient, upstream: Upstream, timeout: float) -> Any:
        if key is None:
            url = upstream.url + paddlex_routes.LAYOUT_PARSING
            response = await client.post(url, json=body, timeout=timeout)
        else:
            response = await post_slice(client, upstream, body, key, timeout)
        return slice_pages(response, positions, is_pdf)

    return work


def slice_pages(response: Reply, positions: list[int], is_pdf: bool) -> list[Any]:
    """The pages of a slice's answer: it must hold exactly ``len(positions)`` pages (fewer:
    the instance truncated the PDF, which no other instance with the same config does better);
    each PDF page's ``prunedResult.page_index`` becomes its position in the whole document."""
    pages = parsing_results(response)
    if len(pages) != len(positions):
        raise UpstreamFailure(
            "truncated",
            f"{len(pages)} of {len(positions)} pages came back; {TRUNCATION_HINT}",
            502,
            retryable=False,
        )
    for position, page in zip(positions, pages, strict=True):
        pruned = page.get("prunedResult") if isinstance(page, dict) else None
        if not isinstance(pruned, dict):
            raise UpstreamFailure("protocol_error", "page without prunedResult", 200)
        if is_pdf:
            pruned["page_index"] = position
    return pages


def should_fan_out(settings: Settings, doc: Document) -> bool:
    """Whether a synchronous request for ``doc`` is split into page slices."""
    fanout = settings.fanout
    return (
        fanout.sync
        and doc.kind == "pdf"
        and doc.pages is not None
        and doc.pages > fanout.threshold_pages
    )


async def _run_slice(
    proxy: Proxy,
    settings: Settings,
    data: bytes,
    positions: list[int],
    options: dict[str, Any] | None,
    log_id: str,
    tenant: str | None,
    attempts: list[Attempt],
) -> list[dict[str, Any]]:
    """One ``/layout-parsing`` of the slice ``data`` (a PDF of the document's ``positions``)."""
    body = layout_body(pybase64.b64encode_as_string(data), True, log_id, options)
    work = slice_work(body, positions, True)
    pages: list[dict[str, Any]]
    try:
        pages, _, tried = await proxy.run(settings, work, tenant=tenant)
    except GatewayError as exc:
        attempts.extend(exc.details.get("attempts", []))
        raise
    attempts.extend(tried)
    return pages


async def _slice_or_pages(
    proxy: Proxy,
    settings: Settings,
    doc: Document,
    part: bytes,
    positions: list[int],
    options: dict[str, Any] | None,
    request_id: str,
    tenant: str | None,
    attempts: list[Attempt],
    inspector: DocumentInspector,
) -> list[dict[str, Any]]:
    """A slice (``part``, the PDF of ``positions``); when it fails on every upstream, its
    pages one by one, so that the error names the page that fails everywhere."""
    log_id = f"{request_id}-p{positions[0] + 1}"
    try:
        return await _run_slice(proxy, settings, part, positions, options, log_id, tenant, attempts)
    except GatewayError as exc:
        if exc.code != "all_upstreams_failed" or len(positions) == 1:
            raise _named(exc, positions) from None
    singles = await inspector.cut(doc.data, [[p] for p in positions], settings.input)
    pages: list[dict[str, Any]] = []
    for position, single in zip(positions, singles, strict=True):
        try:
            pages.extend(
                await _run_slice(
                    proxy,
                    settings,
                    single,
                    [position],
                    options,
                    f"{request_id}-p{position + 1}",
                    tenant,
                    attempts,
                )
            )
        except GatewayError as exc:
            raise _named(exc, [position]) from None
    return pages


def _named(exc: GatewayError, positions: list[int]) -> GatewayError:
    """``exc`` with the pages it concerns in front of its message."""
    named = GatewayError(
        exc.status,
        exc.code,
        f"{pages_label(positions)}: {exc.message}",
        details=exc.details,
        headers=exc.headers,
    )
    named.details["pages"] = [p + 1 for p in positions]
    return named


async def ocr_pdf_fanned_out(
    proxy: Proxy,
    settings: Settings,
    doc: Document,
    request_id: str,
    options: dict[str, Any] | None = None,
    tenant: str | None = None,
    *,
    inspector: DocumentInspector,
) -> OcrResult:
    """OCR a long PDF as page slices on several upstreams at once, then one concatenating
    ``/restructure-pages``; the markdown is that of one instance parsing the whole PDF.
    The slices are cut by ``inspector``'s workers, the document opened once for all of them.
    A failure of any slice cancels the others."""
    assert doc.pages is not None
    fanout = settings.fanout
    slices = plan_slices(
        doc.pages,
        fanout.threshold_pages,
        fanout.max_slice_pages,
        free_capacity(proxy.pool, settings),
    )
    if len(slices) == 1:  # no instance free to share it with: both steps on one
        return await proxy.ocr(settings, doc, request_id, options, tenant)
    attempts: list[Attempt] = []
    positions = [list(range(first, first + count)) for first, count in slices]
    parts = await inspector.cut(doc.data, positions, settings.input)
    tasks = [
        asyncio.ensure_future(
            _slice_or_pages(
                proxy,
                settings,
                doc,
                part,
                slice_positions,
                options,
                request_id,
                tenant,
                attempts,
                inspector,
            )
        )
        for part, slice_positions in zip(parts, positions, strict=True)
    ]
    try:
        results = await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        raise
    pages = [page for result in results for page in result]
    body = restructure_body(pages, concatenatePages=True, logId=request_id)

    async def restructure(client: UpstreamClient, upstream: Upstream, timeout: float) -> str:
        response = await client.post(
            upstream.url + paddlex_routes.RESTRUCTURE_PAGES, json=body, timeout=timeout
        )
        return markdown_text(restructured(response))

    try:
        text, upstream, tried = await proxy.run(
            settings, restructure, bypass_limit=True, tenant=tenant
        )
    except GatewayError as exc:
        exc.details["attempts"] = attempts + list(exc.details.get("attempts", []))
        raise
    attempts.extend(tried)
    return OcrResult(
        text=text,
        pages=len(pages),
        log_id=request_id,
        upstream=upstream.url,
        attempts=attempts,
        slices=len(slices),
    )
