"""Python client of the OCR gateway, sync and async, with bounded retries.

Usage::

    from fleetctl.client import Client, AsyncClient

    with Client("http://127.0.0.1:9101", token=my_token) as c:  # default: $PADDLEOCR_FLEET_TOKEN
        res = c.ocr("scan.pdf")              # a path: uploaded to POST /ocr-file
        print(res.text, res.pages, res.upstream)
        res = c.ocr(png_bytes)               # bytes: uploaded too
        res = c.ocr(url="https://host/a.png")  # the gateway fetches it (POST /ocr)

    async with AsyncClient("http://127.0.0.1:9101") as c:
        outcomes = await c.ocr_many(["a.png", "b.pdf"], concurrency=8)
        for o in outcomes:
            print(o.source, o.result.text if o.ok else o.error)

Tokens: ``token=`` is sent as ``Authorization: Bearer <token>``; without it the client takes
``PADDLEOCR_FLEET_TOKEN`` (else ``PADDLEOCR_FLEET_ADMIN_TOKEN``) from the environment, and
``token=""`` sends none. A 401/403 raises `AuthError` at once, never retried.

Retries: HTTP 503 and 429 wait for ``Retry-After`` (capped), 502/504 and transport errors back
off exponentially with jitter; every other 4xx/5xx fails at once with `OcrError`. The same
retries serve other routes through ``call(method, path, parse)`` (the job API:
:mod:`fleetctl.jobclient`).
"""

from __future__ import annotations

import asyncio
import email.utils
import os
import random
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import httpx

from fleetctl.auth import REFUSED, bearer, check_token, redact, refusal, resolve

Source = str | os.PathLike[str] | bytes

MAGIC: tuple[tuple[bytes, str, str], ...] = (
    (b"%PDF-", "pdf", "application/pdf"),
    (b"\x89PNG\r\n\x1a\n", "png", "image/png"),
    (b"\xff\xd8\xff", "jpeg", "image/jpeg"),
    (b"II*\x00", "tiff", "image/tiff"),
    (b"MM\x00*", "tiff", "image/tiff"),
    (b"BM", "bmp", "image/bmp"),
)


def sniff(head: bytes) -> tuple[str, str] | None:
    """``(kind, mime)`` of a file from its first bytes, for PDFs and the images PaddleX reads."""
    for magic, kind, mime in MAGIC:
        if head.startswith(magic):
            return kind, mime
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp", "image/webp"
    return None


@dataclass(frozen=True)
class OcrResult:
    """A successful ``/ocr`` answer."""

    text: str
    upstream: str | None = None
    attempts: int | None = None  # gateway-side attempts (upstreams tried)
    pages: int | None = None
    request_id: str | None = None
    elapsed_s: float | None = None
    client_attempts: int = 1  # HTTP requests this client made, retries included
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


class OcrError(Exception):
    """The document failed: an HTTP error answer (``status``) or a transport error (status None)."""

    def __init__(
        self,
        message: str,
        status: int | None = None,
        code: str | None = None,
        request_id: str | None = None,
        attempts: int = 1,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.request_id = request_id
        self.attempts = attempts
        self.job_id: str | None = None  # set when the document went through a job

    def __str__(self) -> str:
        head = f"HTTP {self.status}" if self.status is not None else "transport error"
        code = f" {self.code}" if self.code else ""
        return f"{head}{code}: {self.message}"


class AuthError(OcrError):
    """The gateway refused the request's token (401) or its rights (403); never retried."""


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry. Delays are capped; the attempt count is bounded."""

    max_attempts: int = 6
    backoff_base: float = 0.5
    backoff_max: float = 30.0
    max_retry_after: float = 120.0
    retry_after_statuses: frozenset[int] = frozenset({429, 503})
    backoff_statuses: frozenset[int] = frozenset({502, 504})

    def backoff(self, attempt: int) -> float:
        """Exponential back-off with full jitter for retry number `attempt` (1-based)."""
        cap = min(self.backoff_max, self.backoff_base * 2 ** (attempt - 1))
        return random.uniform(cap / 2, cap)

    def delay_for(self, status: int | None, retry_after: str | None, attempt: int) -> float | None:
        """Seconds to wait before retrying, or None when this outcome is final."""
        if attempt >= self.max_attempts:
            return None
        if status is None or status in self.backoff_statuses:
            return self.backoff(attempt)
        if status in self.retry_after_statuses:
            after = parse_retry_after(retry_after)
            if after is None:
                return self.backoff(attempt)
            return min(after, self.max_retry_after) * random.uniform(1.0, 1.1)
        return None


def parse_retry_after(value: str | None) -> float | None:
    """``Retry-After`` as seconds (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _request(
    source: Source | None,
    url: str | None,
    server_path: str | None,
    data_url: str | None,
    filename: str | None,
) -> tuple[str, dict[str, Any]]:
    given = [x is not None for x in (source, url, server_path, data_url)]
    if sum(given) != 1:
        raise ValueError("give exactly one of: source (path or bytes), url, server_path, data_url")
    if url is not None:
        return "/ocr", {"json": {"url": url}}
    if server_path is not None:
        return "/ocr", {"json": {"local_path": server_path}}
    if data_url is not None:
        return "/ocr", {"json": {"data_url": data_url}}
    if isinstance(source, bytes):
        data, name = source, filename
    else:
        p = Path(source)  # type: ignore[arg-type]
        data, name = p.read_bytes(), filename or p.name
    return "/ocr-file", {"files": {"file": upload_part(data, name)}}


def upload_part(data: bytes, name: str | None) -> tuple[str, bytes, str]:
    """The multipart ``file`` part of a document: (file name, bytes, MIME type from magic)."""
    kind = sniff(data[:16])
    mime = kind[1] if kind else "application/octet-stream"
    return name or f"upload.{kind[0] if kind else 'bin'}", data, mime


def read_ocr(r: httpx.Response, attempts: int, scrub: Callable[[str], str]) -> OcrResult | OcrError:
    """An ``/ocr`` answer: the `OcrResult`, or the `OcrError` (a `Parser` for `call`)."""
    try:
        body = r.json()
    except ValueError:
        body = None
    if r.status_code == 200 and isinstance(body, dict) and isinstance(body.get("text"), str):
        return OcrResult(
            text=body["text"],
            upstream=body.get("upstream"),
            attempts=body.get("attempts"),
            pages=body.get("pages"),
            request_id=body.get("request_id"),
            elapsed_s=body.get("elapsed_s"),
            client_attempts=attempts,
            raw=body,
        )
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        err = body["error"]
        return OcrError(
            scrub(str(err.get("message", ""))),
            r.status_code,
            err.get("code"),
            body.get("request_id"),
            attempts,
        )
    text = scrub(r.text.strip()[:300] or r.reason_phrase)
    if r.status_code == 200:
        return OcrError(f"unexpected answer: {text}", 200, "bad_response", None, attempts)
    return OcrError(text, r.status_code, None, r.headers.get("x-request-id"), attempts)


T = TypeVar("T")
H = TypeVar("H", httpx.Client, httpx.AsyncClient)
Parser = Callable[[httpx.Response, int, Callable[[str], str]], T | OcrError]
"""Reads an answer: ``parse(response, attempt, scrub)`` gives the value, or the `OcrError`
that `_Base._settle` retries or raises (``scrub`` masks the token in messages)."""
OnRetry = Callable[[int, float, str], None]
_LIMITS = httpx.Limits(max_connections=256, max_keepalive_connections=64)


class _Base:
    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        timeout: float = 600.0,
        retry: RetryPolicy | None = None,
        headers: dict[str, str] | None = None,
        on_retry: OnRetry | None = None,
        trust_env: bool = True,
    ) -> None:
        self.url = url.rstrip("/")
        self.trust_env = trust_env  # honour HTTP(S)_PROXY / NO_PROXY like httpx does
        self.retry = retry or RetryPolicy()
        self.timeout = httpx.Timeout(timeout, connect=min(10.0, timeout))
        if token is None:
            self._token = resolve().user
        else:
            self._token = check_token(token.strip(), "token=") if token.strip() else None
        given = {
            k: v
            for k, v in (headers or {}).items()
            if not (self._token and k.lower() == "authorization")
        }
        self.headers = given  # the token goes to httpx only, whose Headers repr masks it
        self._send_headers = {**given, **bearer(self._token)}
        self.on_retry = on_retry

    def _open(self, kind: type[H]) -> H:
        """The `httpx.Client` or `httpx.AsyncClient` this client sends with: its timeout,
        headers (the token's among them), connection limits and proxy settings."""
        return kind(
            timeout=self.timeout,
            headers=self._send_headers,
            limits=_LIMITS,
            trust_env=self.trust_env,
        )

    def _scrub(self, text: str) -> str:
        return redact(text, (self._token,) if self._token else ())

    def _settle(
        self,
        answer: httpx.Response | httpx.TransportError,
        attempt: int,
        parse: Parser[T],
        retry: RetryPolicy,
    ) -> T | _Wait:
        """What attempt number `attempt` came to: the parsed value, or how long to wait before
        the next attempt; raises `OcrError` when the failure is final."""
        if isinstance(answer, httpx.TransportError):
            outcome: T | OcrError = OcrError(
                self._scrub(f"{type(answer).__name__}: {answer}"), None, "transport", None, attempt
            )
            retry_after = None
        else:
            outcome = parse(answer, attempt, self._scrub)
            retry_after = answer.headers.get("retry-after")
        if not isinstance(outcome, OcrError):
            return outcome
        if outcome.status in REFUSED:
            raise AuthError(
                refusal(outcome.status, outcome.message, sent=self._token is not None),
                outcome.status,
                outcome.code,
                outcome.request_id,
                attempt,
            )
        delay = retry.delay_for(outcome.status, retry_after, attempt)
        if delay is None:
            raise outcome
        if self.on_retry:
            self.on_retry(attempt, delay, str(outcome))
        return _Wait(delay)

    def _target(self, path: str) -> str:
        return path if path.startswith(("http://", "https://")) else self.url + path

    def _request_of(
        self,
        http: httpx.Client | httpx.AsyncClient,
        method: str,
        path: str,
        auth: bool,
        kw: dict[str, Any],
    ) -> httpx.Request:
        """The request `call` sends (without ``Authorization`` when not ``auth``)."""
        request = http.build_request(method, self._target(path), **kw)
        if not auth:
            request.headers.pop("authorization", None)
        return request


@dataclass(frozen=True)
class _Wait:
    seconds: float


@dataclass(frozen=True)
class OcrOutcome:
    """One entry of `ocr_many`: the source and either a result or an error."""

    source: Source
    result: OcrResult | None = None
    error: Exception | None = None

    @property
    def ok(self) -> bool:
        return self.result is not None


class Client(_Base):
    """Blocking client; thread-safe, so `ocr_many` runs it from a thread pool."""

    def __init__(self, url: str, **kw: Any) -> None:
        super().__init__(url, **kw)
        self._http = self._open(httpx.Client)

    def ocr(
        self,
        source: Source | None = None,
        *,
        url: str | None = None,
        server_path: str | None = None,
        data_url: str | None = None,
        filename: str | None = None,
    ) -> OcrResult:
        """OCR one document; raises `OcrError` when it failed after the allowed retries."""
        path, kw = _request(source, url, server_path, data_url, filename)
        return self.call("POST", path, read_ocr, **kw)

    def call(
        self,
        method: str,
        path: str,
        parse: Parser[T],
        *,
        auth: bool = True,
        retry: RetryPolicy | None = None,
        **kw: Any,
    ) -> T:
        """One request (`path` relative to the gateway, or a whole URL) with this client's
        retries; `parse` reads each answer. ``auth=False`` sends no ``Authorization``."""
        policy = retry or self.retry
        attempt = 0
        while True:
            attempt += 1
            try:
                request = self._request_of(self._http, method, path, auth, kw)
                answer: httpx.Response | httpx.TransportError = self._http.send(request)
            except httpx.TransportError as e:
                answer = e
            settled = self._settle(answer, attempt, parse, policy)
            if not isinstance(settled, _Wait):
                return settled
            time.sleep(settled.seconds)

    def ocr_many(self, sources: Iterable[Source], concurrency: int = 8) -> list[OcrOutcome]:
        """OCR many documents with at most `concurrency` in flight; results in input order."""

        def one(src: Source) -> OcrOutcome:
            try:
                return OcrOutcome(src, result=self.ocr(src))
            except (OcrError, OSError, ValueError) as e:
                return OcrOutcome(src, error=e)

        with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
            return list(pool.map(one, list(sources)))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient(_Base):
    """Asyncio client with the same behaviour as `Client`."""

    def __init__(self, url: str, **kw: Any) -> None:
        super().__init__(url, **kw)
        self._http = self._open(httpx.AsyncClient)

    async def ocr(
        self,
        source: Source | None = None,
        *,
        url: str | None = None,
        server_path: str | None = None,
        data_url: str | None = None,
        filename: str | None = None,
    ) -> OcrResult:
        """OCR one document; raises `OcrError` when it failed after the allowed retries."""
        if source is not None and not isinstance(source, bytes):
            data = await asyncio.to_thread(Path(source).read_bytes)
            source, filename = data, filename or Path(source).name
        path, kw = _request(source, url, server_path, data_url, filename)
        return await self.call("POST", path, read_ocr, **kw)

    async def call(
        self,
        method: str,
        path: str,
        parse: Parser[T],
        *,
        auth: bool = True,
        retry: RetryPolicy | None = None,
        **kw: Any,
    ) -> T:
        """One request (`path` relative to the gateway, or a whole URL) with this client's
        retries; `parse` reads each answer. ``auth=False`` sends no ``Authorization``.

        Usage::

            data = await client.call("GET", "/api/v2/ocr/jobs/" + job_id, read_envelope)
        """
        policy = retry or self.retry
        attempt = 0
        while True:
            attempt += 1
            try:
                request = self._request_of(self._http, method, path, auth, kw)
                answer: httpx.Response | httpx.TransportError = await self._http.send(request)
            except httpx.TransportError as e:
                answer = e
            settled = self._settle(answer, attempt, parse, policy)
            if not isinstance(settled, _Wait):
                return settled
            await asyncio.sleep(settled.seconds)

    async def ocr_many(
        self,
        sources: Iterable[Source],
        concurrency: int = 8,
        on_done: Callable[[OcrOutcome], None] | None = None,
    ) -> list[OcrOutcome]:
        """OCR many documents with at most `concurrency` in flight; results in input order.

        `on_done` is called as each document finishes (e.g. to advance a progress bar).
        """
        sem = asyncio.Semaphore(max(1, concurrency))

        async def one(src: Source) -> OcrOutcome:
            async with sem:
                try:
                    out = OcrOutcome(src, result=await self.ocr(src))
                except (OcrError, OSError, ValueError) as e:
                    out = OcrOutcome(src, error=e)
            if on_done:
                on_done(out)
            return out

        return list(await asyncio.gather(*(one(s) for s in sources)))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
