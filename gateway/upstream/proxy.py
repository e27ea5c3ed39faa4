"""Talking to PaddleX: the attempt loop with failover, the two-step OCR call and pass-through.

The loop leases an upstream from the pool, runs one attempt under the per-attempt timeout and
the request deadline, and on a connect error, timeout, reset or 5xx moves on to the next
*distinct* upstream (never the same one twice), within ``load_balance.max_attempts`` and the
retry budget. A retry after a connect error (the request never reached the upstream) or after an
attempt cancelled because its upstream is stuck (:meth:`gateway.dispatch.outlier.PoolHealth.rescue`)
is free: it moves work away from a dead instance and adds none, so the retry budget does not
refuse it. So is a retry after a reset when the upstream's port then refuses connections too
(the process died with the request in it). An upstream 4xx is not retried. When everything
fails the caller gets 502 with each tried upstream and its reason.

No capacity is a wait: when no upstream can take the request (all drained or unreachable), it
waits in the central queue for one to come back, up to ``load_balance.queue_timeout_s``, then
gets 503 ``no_capacity`` with ``Retry-After`` and the reason. An upstream whose port refused
the connect (marked unreachable, health checks on) is not counted as tried: the request never
reached it, and it may take it once it is back.

Usage::

    proxy = Proxy(pool, client_getter=lambda: client)
    result = await proxy.ocr(settings, document, request_id="abc", tenant="team-a")
    status, ctype, body, upstream, attempts = await proxy.passthrough(
        settings, "/layout-parsing", raw_body, content_type, "abc", tenant="team-a")
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

from gateway.config.settings import Settings
from gateway.dispatch.pool import UpstreamPool
from gateway.dispatch.upstreams import Lease, Upstream
from gateway.errors import (
    GatewayError,
    NoUpstreamAvailable,
    QueueFull,
    QueueTimeout,
    UpstreamClientError,
    UpstreamFailure,
)
from gateway.inputs.document import Document
from gateway.upstream.attempts import (
    Attempt,
    classify_transport_error,
    raise_for_upstream_status,
    refuses_connections,
)
from gateway.upstream.paddlex_api import (
    TRUNCATION_HINT,
    envelope,
    layout_body,
    markdown_text,
    restructure_body,
    restructured,
)
from gateway.wire import paddlex_routes
from gateway.wire.upstream_http import UpstreamClient

T = TypeVar("T")


@dataclass
class OcrResult:
    text: str
    pages: int
    log_id: str | None
    upstream: str = ""
    attempts: list[Attempt] = field(default_factory=list)
    slices: int = 1  # page slices the PDF was parsed in (gateway.upstream.fanout)


class Proxy:
    """Failover loop plus the PaddleX calls, over one shared upstream client."""

    def __init__(self, pool: UpstreamPool, client_getter: Callable[[], UpstreamClient]) -> None:
        self.pool = pool
        self._client_getter = client_getter

    # ------------------------------------------------------------------ the loop
    async def run(
        self,
        settings: Settings,
        work: Callable[[UpstreamClient, Upstream, float], Awaitable[T]],
        *,
        bypass_limit: bool = False,
        tenant: str | None = None,
        background: bool = False,
        exclude: frozenset[str] = frozenset(),
    ) -> tuple[T, Upstream, list[Attempt]]:
        """Run ``work(client, upstream, attempt_timeout)`` with failover; see module doc.
        ``tenant`` (the caller's token name) is what the central queue is fair among;
        ``background`` (job slices) queues behind interactive requests; ``exclude``: upstreams
        not to try (a job slice that failed there before)."""
        loop = asyncio.get_running_loop()
        client = self._client_getter()
        pool = self.pool
        deadline = loop.time() + settings.http.request_deadline_s
        attempts: list[Attempt] = []
        tried: set[str] = set(exclude)
        stop_reason: str | None = None
        free_retry = False  # the previous attempt never reached a live upstream
        pool.begin_request()
        try:
            for number in range(1, settings.load_balance.max_attempts + 1):
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise self._deadline_exceeded(settings, attempts)
                is_retry = number > 1
                charged = is_retry and not free_retry
                if charged and not pool.try_begin_retry():
                    stop_reason = (
                        f"retry budget exhausted ({pool.retries_in_flight} retries in flight, "
                        f"allowance {pool.retry_allowance()})"
                    )
                    break
                try:
                    try:
                        lease = await pool.acquire(
                            tried,
                            min(settings.load_balance.queue_timeout_s, remaining),
                            retry=is_retry,
                            bypass_limit=bypass_limit,
                            tenant=tenant,
                            background=background,
                        )
                    except NoUpstreamAvailable as exc:
                        if not attempts:
                            raise GatewayError(503, "no_upstream", str(exc)) from None
                        stop_reason = str(exc)
                        break
                    except (QueueFull, QueueTimeout) as exc:
                        code = "queue_full" if isinstance(exc, QueueFull) else "queue_timeout"
                        why = str(exc)
                        if code == "queue_timeout" and (problem := pool.capacity_problem()):
                            code, why = "no_capacity", f"{problem} ({why})"
                        raise self._failed(
                            503,
                            code,
                            why,
                            attempts,
                            headers={"Retry-After": str(exc.retry_after)},
                        ) from None
                    result = await self._attempt(settings, client, lease, work, deadline, attempts)
                    if result is not _FAILED:
                        return result, lease.upstream, attempts
                    free_retry = lease.free_retry
                    if attempts[-1].outcome == "reset" and not free_retry:
                        free_retry = await self._gone_after_reset(settings, lease.upstream)
                finally:
                    if charged:
                        pool.end_retry()
                if not lease.upstream.unreachable:
                    # one whose port refused the connect never saw the request: once it is
                    # back (a probe passes) it may take it, so a request waits for it
                    tried.add(lease.upstream.url)
            else:
                stop_reason = (
                    f"load_balance.max_attempts={settings.load_balance.max_attempts} reached"
                )
            if loop.time() >= deadline:
                raise self._deadline_exceeded(settings, attempts)
            raise self._failed(502, "all_upstreams_failed", stop_reason or "", attempts)
        finally:
            pool.end_request()

    async def _attempt(
        self,
        settings: Settings,
        client: UpstreamClient,
        lease: Lease,
        work: Callable[[UpstreamClient, Upstream, float], Awaitable[T]],
        deadline: float,
        attempts: list[Attempt],
    ) -> Any:
        loop = asyncio.get_running_loop()
        upstream: Upstream = lease.upstream
        started = loop.time()
        timeout = max(0.001, min(settings.http.timeout_s, deadline - started))
        outcome, reason, status = "cancelled", None, None
        try:
            async with asyncio.timeout(timeout) as scope:
                # the pool cancels the attempt when the upstream is found stuck
                lease.cancel = lambda: scope.reschedule(loop.time())
                if lease.rescued is not None:  # stuck before the attempt began
                    scope.reschedule(loop.time())
                result = await work(client, upstream, timeout)
            outcome = "success"
            return result
        except UpstreamClientError as exc:
            outcome, reason, status = "client_error", exc.message, exc.status
            raise
        except UpstreamFailure as exc:
            outcome, reason, status = exc.outcome, exc.reason, exc.status
            if not exc.retryable:
                raise GatewayError(
                    502,
                    f"upstream_{outcome}",
                    f"{upstream.url}: {reason}",
                    details={"upstream": upstream.url, "attempts": attempts},
                ) from None
            return _FAILED
        except TimeoutError:
            outcome, reason = "timeout", f"timeout after {timeout:.1f}s"
            if lease.rescued is not None:
                reason = f"cancelled after {loop.time() - started:.1f}s: {lease.rescued}"
                lease.free_retry = True
            return _FAILED
        except httpx.HTTPError as exc:
            outcome, reason = classify_transport_error(exc)
            lease.free_retry = outcome == "connect_error"  # never sent: retrying is free
            return _FAILED
        finally:
            lease.cancel = None
            elapsed = loop.time() - started
            self.pool.release(lease, outcome, elapsed, reason)
            attempts.append(
                Attempt(
                    upstream.url,
                    outcome,
                    reason,
                    200 if outcome == "success" else status,
                    round(elapsed, 3),
                )
            )

    async def _gone_after_reset(self, settings: Settings, upstream: Upstream) -> bool:
        """After a reset: if the upstream's port refuses connections too, the process died
        (it took the request with it); mark it down and make the retry free."""
        why = await refuses_connections(upstream.url, settings.http.connect_timeout_s)
        if why is None:
            return False
        self.pool.mark_down(upstream, f"connect error after a reset: {why}")
        return True

    @staticmethod
    def _failed(
        status: int,
        code: str,
        why: str,
        attempts: list[Attempt],
        headers: dict[str, str] | None = None,
    ) -> GatewayError:
        listing = "; ".join(f"{a.upstream}: {a.reason or a.outcome}" for a in attempts)
        if code == "all_upstreams_failed":
            message = f"all {len(attempts)} upstream attempts failed: {listing}"
            if why:
                message += f" (stopped: {why})"
        else:
            message = why + (f"; attempts: {listing}" if listing else "")
        return GatewayError(status, code, message, details={"attempts": attempts}, headers=headers)

    @classmethod
    def _deadline_exceeded(cls, settings: Settings, attempts: list[Attempt]) -> GatewayError:
        why = f"request deadline of {settings.http.request_deadline_s}s exceeded"
        return cls._failed(504, "deadline_exceeded", why, attempts)

    # ------------------------------------------------------------------ PaddleX calls
    async def ocr(
        self,
        settings: Settings,
        doc: Document,
        request_id: str,
        options: dict[str, Any] | None = None,
        tenant: str | None = None,
    ) -> OcrResult:
        """Both PaddleX steps for one document on the same upstream, with failover."""

        async def work(client: UpstreamClient, upstream: Upstream, timeout: float) -> OcrResult:
            body = layout_body(
                doc.b64_wire(),
                doc.kind == "pdf",
                request_id,
                {**(options or {}), "visualize": False},
            )
            reply = await client.post(
                upstream.url + paddlex_routes.LAYOUT_PARSING, json=body, timeout=timeout
            )
            parsed = envelope(reply)
            result = parsed["result"]
            pages = result.get("layoutParsingResults")
            if not isinstance(pages, list) or not pages:
                raise UpstreamFailure(
                    "protocol_error", "no layoutParsingResults in the result", 200
                )
            data_info = result.get("dataInfo") if isinstance(result.get("dataInfo"), dict) else {}
            num_pages = data_info.get("numPages")
            if (
                doc.kind == "pdf"
                and doc.pages is not None
                and (len(pages) != doc.pages or (num_pages is not None and num_pages != doc.pages))
            ):
                raise UpstreamFailure(
                    "truncated",
                    f"the upstream truncated the PDF: it processed {len(pages)} of {doc.pages} "
                    f"pages (dataInfo.numPages={num_pages}); {TRUNCATION_HINT}",
                    502,
                    retryable=False,
                )
            body2 = restructure_body(pages, concatenatePages=True, logId=request_id)
            reply = await client.post(
                upstream.url + paddlex_routes.RESTRUCTURE_PAGES, json=body2, timeout=timeout
            )
            text = markdown_text(restructured(reply))
            return OcrResult(text=str(text), pages=len(pages), log_id=parsed.get("logId"))

        result, upstream, attempts = await self.run(settings, work, tenant=tenant)
        result.upstream = upstream.url
        result.attempts = attempts
        return result

    async def passthrough(
        self,
        settings: Settings,
        path: str,
        body: bytes,
        content_type: str | None,
        request_id: str,
        tenant: str | None = None,
    ) -> tuple[int, str | None, bytes, str, list[Attempt]]:
        """Forward a PaddleX-native POST unchanged; returns (status, content type, body,
        upstream, attempts). 4xx answers come back as they are; 5xx fail over."""

        async def work(
            client: UpstreamClient, upstream: Upstream, timeout: float
        ) -> tuple[int, str | None, bytes]:
            response = await client.post(
                upstream.url + path,
                content=body,
                headers={
                    "content-type": content_type or "application/json",
                    "x-request-id": request_id,
                },
                timeout=timeout,
            )
            raise_for_upstream_status(response)
            return response.status_code, response.headers.get("content-type"), response.content

        (status, ctype, content), upstream, attempts = await self.run(
            settings, work, bypass_limit=(path == paddlex_routes.RESTRUCTURE_PAGES), tenant=tenant
        )
        return status, ctype, content, upstream.url, attempts


_FAILED: Any = object()
