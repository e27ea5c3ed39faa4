"""What a document is, and the bounds it must meet before anything reaches an upstream.

The type comes from the bytes (PDF, PNG, JPEG, BMP, TIFF, WebP). An image's dimensions are
read from its header (no decoding); over ``input.max_image_pixels`` it is a 413 naming the
limit. A PDF is read as PaddleX reads it, with PDFium (:mod:`gateway.inputs.pdf`), in a killable
worker process (:mod:`gateway.inputs.workers`): over ``input.max_pages`` pages, or with a page that
would render (at PaddleX's 144 dpi) to more than ``input.max_image_pixels``, it is a 413; a PDF
PDFium cannot open, one of whose pages it cannot find, or whose reading takes longer than
``input.pdf_timeout_s`` is a 422. The same workers cut the fan-out's page slices
(:meth:`DocumentInspector.cut`).

Usage::

    inspector = DocumentInspector(workers=2)
    doc = await inspector.inspect(data, settings.input)   # Document or InputError
    parts = await inspector.cut(doc.data, [[0, 1], [2]], settings.input)  # two PDFs
    doc = make_document(data)          # the same checks in-process (tests, tools)
    width, height = image_size(png, "image/png")
"""

from __future__ import annotations

import binascii
import logging
import struct
from typing import Any

import pybase64

from gateway.config.settings import InputSettings
from gateway.errors import InputError
from gateway.inputs.decodable import jpeg_damage, png_damage
from gateway.inputs.pdf import inspect_pdf, is_pdf
from gateway.inputs.workers import ProcessWorkers, WorkerCrashed, WorkerTimeout
from gateway.wire.jsonfast import RawString, wire_text

log = logging.getLogger("gateway.inputs")

_JPEG_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
_MAX_JPEG_SEGMENTS = 4096
_MAX_TIFF_ENTRIES = 100_000
_DAMAGE = {"image/png": png_damage, "image/jpeg": jpeg_damage}


class Document:
    """A validated document ready to send to PaddleX: its bytes, or the caller's plain base64
    of them (:func:`plain_base64_image`: a ``str``, or the body's own bytes when
    :func:`gateway.wire.jsonfast.loads_lifting` left them unparsed), each derived from the other
    only when asked for."""

    __slots__ = ("_data", "_encoded", "kind", "mime", "pages")

    def __init__(
        self,
        data: bytes | None = None,
        kind: str = "image",
        mime: str = "",
        pages: int | None = None,
        encoded: str | RawString | None = None,
    ) -> None:
        if data is None and encoded is None:
            raise ValueError("a Document needs its data or its base64")
        self._data = data
        self._encoded = encoded
        self.kind = kind  # "pdf" or "image"
        self.mime = mime
        self.pages = pages  # real page count (PDF as PDFium counts), 1 for an image

    @property
    def data(self) -> bytes:
        if self._data is None:
            encoded = self._encoded
            assert encoded is not None
            self._data = pybase64.b64decode(wire_text(encoded), validate=True)
        return self._data

    @property
    def file_type(self) -> int:
        """PaddleX ``fileType``: 0 for PDF, 1 for images."""
        return 0 if self.kind == "pdf" else 1

    def b64(self) -> str:
        """Raw standard base64 (no ``data:`` prefix), as PaddleX expects."""
        encoded = self.b64_wire()
        return str(encoded.data, "ascii") if isinstance(encoded, RawString) else encoded

    def b64_wire(self) -> str | RawString:
        """:meth:`b64` for a JSON body: the caller's own bytes when it sent them so
        (:func:`gateway.wire.jsonfast.dumps_parts` writes them as they are)."""
        if self._encoded is None:
            self._encoded = pybase64.b64encode_as_string(self.data)
        return self._encoded

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Document):
            return NotImplemented
        return (self.data, self.kind, self.mime, self.pages) == (
            other.data,
            other.kind,
            other.mime,
            other.pages,
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        encoded = wire_text(self._encoded) if self._encoded is not None else ""
        size = len(self._data) if self._data is not None else f"~{len(encoded) * 3 // 4}"
        return f"Document(kind={self.kind!r}, mime={self.mime!r}, pages={self.pages}, bytes={size})"


HEAD_B64_CHARS = 4096  # decoded first, for the type


def plain_base64_image(value: str | RawString, limits: InputSettings) -> Document | None:
    """The image whose plain, canonical base64 ``value`` is, checked and passed on as it came:
    the type from a decoded head; over ``input.max_request_bytes`` decoded, a 413 before
    anything else is decoded; then one strict decode of the whole text (SIMD, about 0.1 ms per
    MB: the alphabet and the padding) for the dimensions. None when it is anything else (a
    PDF, a TIFF, whitespace, URL-safe or damaged base64, an unreadable header): the caller then
    decodes it whole and words the problem."""
    text = wire_text(value)
    if len(text) % 4 or len(text) <= 4:
        return None
    try:
        head = pybase64.b64decode(text[:HEAD_B64_CHARS], validate=True)
    except (binascii.Error, ValueError):
        return None
    sniffed = sniff_type(head)
    if sniffed is None or sniffed[0] != "image" or sniffed[1] == "image/tiff":
        return None
    size, cap = len(text) // 4 * 3, limits.max_request_bytes
    if size > cap:
        raise InputError(413, "too_large", f"document is about {size} bytes, limit {cap}")
    data = head
    if len(text) > HEAD_B64_CHARS:
        try:
            data = pybase64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            return None
    try:
        check_image(data, sniffed[1], limits)
    except InputError as exc:
        if exc.status == 413:
            raise
        return None
    return Document(kind="image", mime=sniffed[1], pages=1, encoded=value)


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
    if is_pdf(data):  # the header anywhere in the first KiB, as PDFium takes it
        return "pdf", "application/pdf"
    return None


def _unreadable(kind: str, why: str) -> InputError:
    return InputError(422, "unreadable_image", f"cannot read the {kind} header: {why}")


def _png_size(data: bytes) -> tuple[int, int]:
    if len(data) < 24 or data[12:16] != b"IHDR":
        raise _unreadable("PNG", "no IHDR chunk first")
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def _jpeg_size(data: bytes) -> tuple[int, int]:
    i, n = 2, len(data)
    for _ in range(_MAX_JPEG_SEGMENTS):
        if i >= n or data[i] != 0xFF:
            break
        while i < n and data[i] == 0xFF:  # fill bytes
            i += 1
        if i >= n:
            break
        marker = data[i]
        i += 1
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:  # no length field
            continue
        if marker in (0xD9, 0xDA):  # end of image, start of scan: no frame header before
            break
        if i + 2 > n:
            break
        (length,) = struct.unpack(">H", data[i : i + 2])
        if marker in _JPEG_SOF:
            if i + 7 > n:
                break
            height, width = struct.unpack(">HH", data[i + 3 : i + 7])
            if height == 0:
                raise _unreadable("JPEG", "the height is left to a later DNL segment")
            return width, height
        if length < 2:
            break
        i += length
    raise _unreadable("JPEG", "no frame header (SOF) found")


def _bmp_size(data: bytes) -> tuple[int, int]:
    (header,) = struct.unpack("<I", data[14:18])
    if header == 12:
        width, height = struct.unpack("<HH", data[18:22])
    else:
        width, height = struct.unpack("<ii", data[18:26])
    return width, abs(height)


def _tiff_sizes(data: bytes, max_pages: int) -> list[tuple[int, int]]:
    """Width and height of every page (IFD) of a TIFF; loops and truncation are errors."""
    order = "<" if data[:2] == b"II" else ">"
    n = len(data)
    offset = struct.unpack(order + "I", data[4:8])[0]
    seen: set[int] = set()
    pages: list[tuple[int, int]] = []
    entries_read = 0
    while offset:
        if offset in seen:
            raise _unreadable("TIFF", "its list of pages loops")
        if len(pages) >= max_pages:
            raise InputError(
                413, "too_many_pages", f"TIFF has more than {max_pages} pages (input.max_pages)"
            )
        seen.add(offset)
        if offset + 2 > n:
            raise _unreadable("TIFF", "a page directory lies outside the file")
        (count,) = struct.unpack(order + "H", data[offset : offset + 2])
        entries_read += count
        if entries_read > _MAX_TIFF_ENTRIES or offset + 2 + 12 * count + 4 > n:
            raise _unreadable("TIFF", "a page directory is truncated or too large")
        width = height = None
        for k in range(count):
            at = offset + 2 + 12 * k
            tag, kind = struct.unpack(order + "HH", data[at : at + 4])
            if tag in (256, 257) and kind in (3, 4):
                fmt = order + ("H" if kind == 3 else "I")
                (value,) = struct.unpack_from(fmt, data, at + 8)
                if tag == 256:
                    width = value
                else:
                    height = value
        if width is None or height is None:
            raise _unreadable("TIFF", "a page has no ImageWidth/ImageLength")
        pages.append((width, height))
        (offset,) = struct.unpack(order + "I", data[offset + 2 + 12 * count :][:4])
    if not pages:
        raise _unreadable("TIFF", "no page directory")
    return pages


def _webp_size(data: bytes) -> tuple[int, int]:
    chunk, payload = data[12:16], data[20:40]
    if chunk == b"VP8 " and payload[3:6] == b"\x9d\x01\x2a" and len(payload) >= 10:
        width, height = struct.unpack("<HH", payload[6:10])
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L" and payload[:1] == b"\x2f" and len(payload) >= 5:
        (bits,) = struct.unpack("<I", payload[1:5])
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X" and len(payload) >= 10:
        width = int.from_bytes(payload[4:7], "little") + 1
        height = int.from_bytes(payload[7:10], "little") + 1
        return width, height
    raise _unreadable("WebP", f"unknown first chunk {chunk!r}")


def image_sizes(data: bytes, mime: str, max_pages: int = 1000) -> list[tuple[int, int]]:
    """``(width, height)`` of each page of an image (several only for a TIFF), read from
    the header; InputError(422) when the header cannot be read."""
    try:
        if mime == "image/tiff":
            return _tiff_sizes(data, max_pages)
        reader = {
            "image/png": _png_size,
            "image/jpeg": _jpeg_size,
            "image/bmp": _bmp_size,
            "image/webp": _webp_size,
        }[mime]
        return [reader(data)]
    except struct.error:
        raise _unreadable(mime.split("/")[1].upper(), "the file is truncated") from None


def image_size(data: bytes, mime: str) -> tuple[int, int]:
    """The first page's ``(width, height)``; see :func:`image_sizes`."""
    return image_sizes(data, mime)[0]


def check_image(data: bytes, mime: str, limits: InputSettings) -> None:
    """InputError 422 for an unreadable header, a zero side or damage that PaddleX's decoder
    refuses (:mod:`gateway.inputs.decodable`), 413 over the pixel cap."""
    for width, height in image_sizes(data, mime, limits.max_pages):
        if width <= 0 or height <= 0:
            raise _unreadable(mime.split("/")[1].upper(), f"it claims {width} x {height} pixels")
        if width * height > limits.max_image_pixels:
            raise InputError(
                413,
                "image_too_large",
                f"the image is {width} x {height} = {width * height} pixels, the limit is "
                f"{limits.max_image_pixels} pixels (input.max_image_pixels)",
            )
    damage = _DAMAGE.get(mime)
    why = damage(data) if damage is not None else None
    if why is not None:
        kind = mime.split("/")[1].upper()
        raise InputError(
            422, "unreadable_image", f"the {kind} cannot be decoded (as PaddleX decodes it): {why}"
        )


def _sniff(data: bytes) -> tuple[str, str]:
    if not data:
        raise InputError(400, "empty_file", "the document is empty (0 bytes)")
    sniffed = sniff_type(data)
    if sniffed is None:
        raise InputError(
            415,
            "unsupported_type",
            f"unsupported document type ({len(data)} bytes): expected a PDF or a PNG, JPEG, "
            "BMP, TIFF or WebP image",
        )
    return sniffed


def _pdf_document(data: bytes, result: dict[str, Any]) -> Document:
    if "pages" not in result:
        raise InputError(result["status"], result["code"], result["message"])
    return Document(data=data, kind="pdf", mime="application/pdf", pages=result["pages"])


def make_document(data: bytes, limits: InputSettings | None = None) -> Document:
    """Validate raw bytes in-process, without the PDF time bound (tests, tools); the gateway
    uses :meth:`DocumentInspector.inspect`."""
    limits = limits or InputSettings()
    kind, mime = _sniff(data)
    if kind == "image":
        check_image(data, mime, limits)
        return Document(data=data, kind=kind, mime=mime, pages=1)
    return _pdf_document(data, inspect_pdf(data, limits.max_pages, limits.max_image_pixels))


class DocumentInspector:
    """:func:`make_document` with PDFs read in killable worker processes, which also cut
    the page slices of a fanned-out PDF."""

    def __init__(self, workers: int = 2) -> None:
        self.workers = ProcessWorkers("gateway.inputs.pdf:work", size=workers)

    async def inspect(self, data: bytes, limits: InputSettings) -> Document:
        kind, mime = _sniff(data)
        if kind == "image":
            check_image(data, mime, limits)
            return Document(data=data, kind=kind, mime=mime, pages=1)
        self.workers.size = limits.pdf_workers
        try:
            result = await self.workers.run(
                data,
                ("inspect", limits.max_pages, limits.max_image_pixels),
                limits.pdf_timeout_s,
                urgent=True,
            )
        except WorkerTimeout:
            raise InputError(
                422,
                "pdf_timeout",
                f"reading the PDF took longer than {limits.pdf_timeout_s:g}s "
                "(input.pdf_timeout_s); its structure is too complex or loops",
            ) from None
        except WorkerCrashed as exc:
            log.warning("PDF worker failed: %s", exc)
            raise InputError(422, "unreadable_pdf", "the PDF cannot be read") from None
        return _pdf_document(data, result)

    async def cut(self, data: bytes, slices: list[list[int]], limits: InputSettings) -> list[bytes]:
        """One PDF per list of ``slices`` (0-based pages) of an inspected PDF, cut by PDFium
        in a worker (:func:`gateway.inputs.pdf.cut_slices`); RuntimeError when that fails or takes
        longer than ``input.pdf_timeout_s``."""
        self.workers.size = limits.pdf_workers
        try:
            parts = await self.workers.run(data, ("cut", slices), limits.pdf_timeout_s)
        except (WorkerTimeout, WorkerCrashed) as exc:
            raise RuntimeError(f"cutting the PDF into page slices failed: {exc}") from None
        return list(parts)

    async def close(self) -> None:
        await self.workers.close()
