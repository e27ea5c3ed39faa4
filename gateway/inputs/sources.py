"""Where a caller's document comes from: base64, a data URL, a local path or a URL fetch.

Everything here raises :class:`~gateway.errors.InputError` (an HTTP status, a machine code
and a message that says what is wrong); the app turns it into the JSON error body. What a document
is and the bounds it must meet live in :mod:`gateway.inputs.document`; URL fetches go through
:mod:`gateway.wire.urlguard` (no loopback, private, link-local ... destinations, every redirect hop
checked, nothing fetched echoed back in an error).

Usage::

    doc = await resolve_input({"base64": b64}, settings.input, fetch_client, guard, inspector)
    doc.kind        # "pdf" | "image"
    doc.file_type   # 0 for PDF, 1 for images (PaddleX fileType)
    doc.pages       # real page count of a PDF, 1 for an image
"""

from __future__ import annotations

import asyncio
import binascii
import logging
import urllib.parse
from pathlib import Path

import httpx
import pybase64

from gateway.config.settings import InputSettings
from gateway.errors import InputError
from gateway.inputs.document import (
    Document,
    DocumentInspector,
    make_document,
    plain_base64_image,
    sniff_type,
)
from gateway.wire.urlguard import UrlGuard, UrlRefused

log = logging.getLogger("gateway.documents")

SOURCE_FIELDS: tuple[str, ...] = ("base64", "url", "data_url", "local_path")
REDIRECTS = frozenset({301, 302, 303, 307, 308})

__all__ = [
    "SOURCE_FIELDS",
    "Document",
    "InputError",
    "decode_base64",
    "decode_data_url",
    "fetch_url",
    "make_document",
    "make_document_async",
    "resolve_input",
    "resolve_local_path",
    "sniff_type",
]


async def make_document_async(data: bytes, limits: InputSettings | None = None) -> Document:
    """:func:`~gateway.inputs.document.make_document` in a worker thread (PDFium is CPU-bound); the
    gateway itself uses :class:`~gateway.inputs.document.DocumentInspector` (killable processes)."""
    if sniff_type(data) == ("pdf", "application/pdf"):
        return await asyncio.to_thread(make_document, data, limits)
    return make_document(data, limits)


def decode_base64(value: str, field: str = "base64") -> bytes:
    """Strictly decode standard (or URL-safe) base64; whitespace is ignored."""
    compact = "".join(value.split())
    if not compact:
        raise InputError(400, "empty_file", f"{field}: the document is empty")
    if "-" in compact or "_" in compact:
        compact = compact.replace("-", "+").replace("_", "/")
    compact += "=" * (-len(compact) % 4)
    try:
        return pybase64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InputError(400, "invalid_base64", f"{field}: not valid base64 ({exc})") from None


def decode_data_url(value: str) -> bytes:
    """Decode ``data:[<mime>][;base64],<payload>``."""
    if not value.startswith("data:") or "," not in value:
        raise InputError(
            400, "invalid_data_url", "data_url: expected 'data:[<mime>][;base64],<payload>'"
        )
    header, payload = value[5:].split(",", 1)
    if header.split(";")[-1].strip().lower() == "base64":
        return decode_base64(payload, "data_url")
    return urllib.parse.unquote_to_bytes(payload)


def resolve_local_path(value: str, roots: list[str]) -> Path:
    """Map ``local_path`` to a real file below one of ``roots`` (symlinks resolved).

    A relative path is taken relative to each root in turn. With no roots configured the
    feature is off.
    """
    if not roots:
        raise InputError(
            403,
            "local_path_disabled",
            "local_path is disabled on this gateway (no input.local_path_roots configured)",
        )
    if not value or "\x00" in value:
        raise InputError(400, "invalid_local_path", "local_path: empty or invalid path")
    real_roots = [Path(root).resolve() for root in roots]
    raw = Path(value)
    candidates = [raw] if raw.is_absolute() else [root / raw for root in real_roots]
    inside_but_missing = False
    for candidate in candidates:
        real = candidate.resolve()
        if not any(real.is_relative_to(root) for root in real_roots):
            continue
        if real.is_file():
            return real
        inside_but_missing = True
    if inside_but_missing:
        raise InputError(404, "local_path_not_found", f"local_path: no such file: {value}")
    raise InputError(
        403,
        "local_path_forbidden",
        f"local_path: {value} is outside the allowed directories",
    )


def read_local_path(value: str, settings: InputSettings) -> bytes:
    """Read a file allowed by :func:`resolve_local_path`, honouring the size cap."""
    path = resolve_local_path(value, settings.local_path_roots)
    try:
        size = path.stat().st_size
        if size > settings.max_request_bytes:
            raise InputError(
                413,
                "too_large",
                f"local_path: file is {size} bytes, limit is {settings.max_request_bytes}",
            )
        return path.read_bytes()
    except OSError as exc:
        raise InputError(403, "local_path_unreadable", f"local_path: cannot read: {exc}") from None


def _shown(url: str) -> str:
    return url if len(url) <= 200 else url[:200] + "..."


async def fetch_url(
    value: str, settings: InputSettings, client: httpx.AsyncClient, guard: UrlGuard | None = None
) -> bytes:
    """Download ``url`` through the guard: http/https only, every hop checked (at most
    ``url_max_redirects``), ``url_timeout_s`` for the whole fetch, ``url_max_bytes``.

    ``client`` should be a :func:`gateway.wire.urlguard.guarded_client`, whose connections are
    checked after resolving; ``guard`` checks each URL's form and literal address first.
    """
    if not settings.url_fetch_enabled:
        raise InputError(403, "url_disabled", "url input is disabled on this gateway")
    guard = guard or UrlGuard(settings.url_allow)
    try:
        async with asyncio.timeout(settings.url_timeout_s):
            return await _fetch(value, settings, client, guard)
    except TimeoutError:
        raise InputError(
            400,
            "url_fetch_failed",
            f"url: fetching {_shown(value)} timed out after {settings.url_timeout_s:g}s",
        ) from None
    except UrlRefused as exc:
        code = "url_forbidden" if exc.status == 403 else "invalid_url"
        raise InputError(exc.status, code, f"url: {exc.reason}") from None
    except httpx.HTTPError as exc:
        raise InputError(
            400, "url_fetch_failed", f"url: fetching {_shown(value)} failed: {type(exc).__name__}"
        ) from None


async def _fetch(
    value: str, settings: InputSettings, client: httpx.AsyncClient, guard: UrlGuard
) -> bytes:
    url = value
    cap = settings.url_max_bytes
    for hop in range(settings.url_max_redirects + 1):
        try:
            target = guard.parse(url)
        except UrlRefused as exc:
            if hop:
                exc.reason = f"redirect {hop} to {_shown(url)}: {exc.reason}"
            raise
        request = client.build_request("GET", target.url)
        response = await client.send(request, stream=True, follow_redirects=False)
        try:
            location = response.headers.get("location")
            if response.status_code in REDIRECTS and location:
                url = urllib.parse.urljoin(target.url, location)
                continue
            if response.status_code >= 400:
                raise InputError(
                    400,
                    "url_fetch_failed",
                    f"url: fetching {_shown(value)} gave HTTP {response.status_code}",
                )
            declared = response.headers.get("content-length")
            if declared and declared.isascii() and declared.isdigit() and int(declared) > cap:
                raise InputError(
                    413, "too_large", f"url: document is {declared} bytes, limit {cap}"
                )
            chunks: list[bytes] = []
            total = 0
            async for chunk in response.aiter_bytes():
                total += len(chunk)
                if total > cap:
                    raise InputError(413, "too_large", f"url: document exceeds {cap} bytes")
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            await response.aclose()
    raise InputError(
        400,
        "url_fetch_failed",
        f"url: more than {settings.url_max_redirects} redirects (input.url_max_redirects)",
    )


async def resolve_input(
    sources: dict[str, str | None],
    settings: InputSettings,
    client: httpx.AsyncClient,
    guard: UrlGuard | None = None,
    inspector: DocumentInspector | None = None,
    lifted: Document | None = None,
) -> Document:
    """Turn the ``/ocr`` JSON sources (exactly one set) into a :class:`Document`; ``lifted``:
    the ``base64`` source's image, already checked from the body's bytes (``routers.ocr``)."""
    given = [name for name in SOURCE_FIELDS if sources.get(name) is not None]
    if len(given) != 1:
        got = ", ".join(given) if given else "none"
        raise InputError(
            400,
            "invalid_request",
            f"exactly one of {', '.join(SOURCE_FIELDS)} is required (got: {got})",
        )
    name = given[0]
    if name == "base64" and lifted is not None:
        return lifted
    value = sources[name]
    if not isinstance(value, str):
        raise InputError(400, "invalid_request", f"{name}: must be a string")
    if name == "base64" and not value.startswith("data:"):
        fast = plain_base64_image(value, settings)
        if fast is not None:
            return fast
    if name == "base64":
        data = decode_data_url(value) if value.startswith("data:") else decode_base64(value)
    elif name == "data_url":
        data = decode_data_url(value)
    elif name == "url":
        data = await fetch_url(value, settings, client, guard)
    else:
        data = read_local_path(value, settings)
    if len(data) > settings.max_request_bytes:
        raise InputError(
            413, "too_large", f"document is {len(data)} bytes, limit {settings.max_request_bytes}"
        )
    if inspector is not None:
        return await inspector.inspect(data, settings)
    return await make_document_async(data, settings)
