"""Caller input: decode, validate and type-sniff the document bytes.

Everything here raises :class:`InputError` (an HTTP status, a machine code and a message that
says what is wrong); the app turns it into the JSON error body.

Usage::

    doc = await resolve_input(OcrInput(base64=b64), settings.input, client)
    doc.kind        # "pdf" | "image"
    doc.file_type   # 0 for PDF, 1 for images (PaddleX fileType)
    doc.pages       # real page count of a PDF (pypdf), 1 for an image, None if unknown
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
import logging
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import httpx

from gateway.settings import InputSettings

log = logging.getLogger("gateway.documents")

SOURCE_FIELDS: tuple[str, ...] = ("base64", "url", "data_url", "local_path")


class InputError(Exception):
    """A problem with what the caller sent; carries the HTTP status to answer with."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Document:
    """A validated document ready to send to PaddleX."""

    data: bytes
    kind: str  # "pdf" or "image"
    mime: str
    pages: int | None  # real page count (PDF via pypdf), 1 for an image, None if unknown

    @property
    def file_type(self) -> int:
        """PaddleX ``fileType``: 0 for PDF, 1 for images."""
        return 0 if self.kind == "pdf" else 1

    def b64(self) -> str:
        """Raw standard base64 (no ``data:`` prefix), as PaddleX expects."""
        return base64.b64encode(self.data).decode("ascii")


def sniff_type(data: bytes) -> tuple[str, str] | None:
    """Return ``(kind, mime)`` from magic bytes, or None for an unsupported type."""
    head = data[:16]
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image", "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image", "image/jpeg"
    if head.startswith(b"BM") and len(data) >= 26:
        return "image", "image/bmp"
    if head.startswith((b"II*\x00", b"MM\x00*")):
        return "image", "image/tiff"
    if head.startswith(b"RIFF") and data[8:12] == b"WEBP":
        return "image", "image/webp"
    # PDF readers accept the header anywhere in the first KiB
    if b"%PDF-" in data[:1024]:
        return "pdf", "application/pdf"
    return None


def count_pdf_pages(data: bytes) -> int | None:
    """Real page count of a PDF with pypdf, or None when pypdf cannot read it."""
    try:
        from pypdf import PdfReader

        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            reader.decrypt("")
        return len(reader.pages)
    except Exception as exc:  # pypdf raises many types on damaged files
        log.warning("cannot count PDF pages (%s): %s", type(exc).__name__, exc)
        return None


def make_document(data: bytes) -> Document:
    """Validate raw bytes: non-empty, a supported type; count PDF pages."""
    if not data:
        raise InputError(400, "empty_file", "the document is empty (0 bytes)")
    sniffed = sniff_type(data)
    if sniffed is None:
        raise InputError(
            415,
            "unsupported_type",
            "unsupported document type: expected a PDF or a PNG, JPEG, BMP, TIFF or WebP image "
            f"(first bytes {data[:8]!r})",
        )
    kind, mime = sniffed
    pages = count_pdf_pages(data) if kind == "pdf" else 1
    return Document(data=data, kind=kind, mime=mime, pages=pages)


async def make_document_async(data: bytes) -> Document:
    """:func:`make_document`, counting PDF pages in a worker thread (pypdf is CPU-bound)."""
    if sniff_type(data) == ("pdf", "application/pdf"):
        return await asyncio.to_thread(make_document, data)
    return make_document(data)


def decode_base64(value: str, field: str = "base64") -> bytes:
    """Strictly decode standard (or URL-safe) base64; whitespace is ignored."""
    compact = "".join(value.split())
    if not compact:
        raise InputError(400, "empty_file", f"{field}: the document is empty")
    if "-" in compact or "_" in compact:
        compact = compact.replace("-", "+").replace("_", "/")
    compact += "=" * (-len(compact) % 4)
    try:
        return base64.b64decode(compact, validate=True)
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


async def fetch_url(value: str, settings: InputSettings, client: httpx.AsyncClient) -> bytes:
    """Download ``url`` (http/https only) with a timeout and a size cap."""
    if not settings.url_fetch_enabled:
        raise InputError(403, "url_disabled", "url input is disabled on this gateway")
    parsed = urllib.parse.urlsplit(value)
    if parsed.scheme.lower() not in ("http", "https") or not parsed.hostname:
        raise InputError(400, "invalid_url", f"url: only http:// and https:// URLs, got {value!r}")
    cap = settings.url_max_bytes
    try:
        async with client.stream(
            "GET", value, timeout=settings.url_timeout_s, follow_redirects=True
        ) as response:
            if response.status_code >= 400:
                raise InputError(
                    400,
                    "url_fetch_failed",
                    f"url: fetching {value} gave HTTP {response.status_code}",
                )
            declared = response.headers.get("content-length")
            if declared and declared.isdigit() and int(declared) > cap:
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
    except httpx.TimeoutException:
        raise InputError(
            400,
            "url_fetch_failed",
            f"url: fetching {value} timed out after {settings.url_timeout_s}s",
        ) from None
    except httpx.HTTPError as exc:
        raise InputError(
            400, "url_fetch_failed", f"url: fetching {value} failed: {type(exc).__name__}: {exc}"
        ) from None


async def resolve_input(
    sources: dict[str, str | None], settings: InputSettings, client: httpx.AsyncClient
) -> Document:
    """Turn the ``/ocr`` JSON sources (exactly one set) into a :class:`Document`."""
    given = [name for name in SOURCE_FIELDS if sources.get(name) is not None]
    if len(given) != 1:
        got = ", ".join(given) if given else "none"
        raise InputError(
            400,
            "invalid_request",
            f"exactly one of {', '.join(SOURCE_FIELDS)} is required (got: {got})",
        )
    name = given[0]
    value = sources[name]
    if not isinstance(value, str):
        raise InputError(400, "invalid_request", f"{name}: must be a string")
    if name == "base64":
        data = decode_data_url(value) if value.startswith("data:") else decode_base64(value)
    elif name == "data_url":
        data = decode_data_url(value)
    elif name == "url":
        data = await fetch_url(value, settings, client)
    else:
        data = read_local_path(value, settings)
    if len(data) > settings.max_request_bytes:
        raise InputError(
            413, "too_large", f"document is {len(data)} bytes, limit {settings.max_request_bytes}"
        )
    return await make_document_async(data)
