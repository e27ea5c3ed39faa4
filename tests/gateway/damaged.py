"""A corpus of damaged documents: broken the ways real scans and downloads are, each either
recoverable by PaddleX's decoders (PDFium, OpenCV) or not. The tests ask the engines
themselves (:func:`pdfium_pages`, :func:`cv2_decodes`) which is which.

Usage::

    for name, data in recoverable_pdfs().items(): ...   # PDFium opens each, 5 pages
    for name, (data, words) in unreadable_pdfs().items(): ...
"""

from __future__ import annotations

import io
import re
import struct

import cv2
import numpy as np
import pikepdf
import pypdfium2 as pdfium
from PIL import Image, ImageDraw

from gateway.inputs.pdf import PDFIUM_LOCK
from tests.gateway.raw_pdf import BINARY_MARKER, HEADER, pdf_from_objects

PAGES = 5
WIDTHS = [100 + i for i in range(PAGES)]  # page i is 100 + i points wide: its order is visible


def classic_pdf(widths: list[int] = WIDTHS) -> bytes:
    """A PDF written the classic way (:func:`pdf_from_objects`), one content stream per page."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b""]
    kids = []
    for width in widths:
        content = b"BT /F1 12 Tf 10 10 Td (page %d) Tj ET" % width
        objects.append(b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream")
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %d 300] /Contents %d 0 R >>"
            % (width, len(objects))
        )
        kids.append(b"%d 0 R" % len(objects))
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(kids), len(kids))
    return pdf_from_objects(objects, header=HEADER + BINARY_MARKER)


def _without_xref(data: bytes) -> bytes:
    """No cross-reference table and no startxref: only the objects and the trailer."""
    start, trailer = data.rindex(b"xref\n0 "), data.rindex(b"trailer")
    return data[:start] + data[trailer : data.rindex(b"startxref")]


def recoverable_pdfs() -> dict[str, bytes]:
    """Damaged PDFs that PDFium repairs (the tests check that it does)."""
    good = classic_pdf()
    return {
        "no cross-reference table": _without_xref(good),
        "wrong startxref offset": re.sub(rb"startxref\n\d+", b"startxref\n999999", good),
        "startxref pointing into an object": re.sub(rb"startxref\n\d+", b"startxref\n40", good),
        "truncated trailer (no startxref, no %%EOF)": good[: good.rindex(b"startxref")],
        "cut before %%EOF": good[: good.rindex(b"%%EOF")],
        "garbage before the header": b"\x00\x01 junk from a mail gateway\r\n" * 20 + good,
        "header at offset 1024": b"x" * 1024 + good,
        "wrong stream /Length": re.sub(rb"/Length \d+", b"/Length 7", good, count=2),
        "xref offsets all wrong": re.sub(rb"\d{10} 00000 n", b"0000000003 00000 n", good),
    }


def unreadable_pdfs() -> dict[str, tuple[bytes, int, str, str]]:
    """PDFs that PaddleX cannot read either: (data, status, code, words in the message)."""
    good = classic_pdf()
    missing_page = good.replace(b"/Kids [4 0 R", b"/Kids [40 0 R")
    encrypted = io.BytesIO()
    with pikepdf.open(io.BytesIO(good)) as pdf:
        pdf.save(encrypted, encryption=pikepdf.Encryption(owner="o", user="secret"))
    return {
        "objects only (no trailer, no xref)": (
            good[: good.rindex(b"xref\n0 ")],
            422,
            "unreadable_pdf",
            "cannot be read",
        ),
        "a header and garbage": (b"%PDF-1.7\n garbage", 422, "unreadable_pdf", "cannot be read"),
        "a page that does not exist": (missing_page, 422, "unreadable_pdf", "page 1"),
        "encrypted with a password": (
            encrypted.getvalue(),
            422,
            "unreadable_pdf",
            "password",
        ),
        "header past PDFium's first KiB": (
            b"x" * 1025 + good,
            415,
            "unsupported_type",
            "expected a PDF",
        ),
    }


def pdfium_pages(data: bytes) -> int | None:
    """How many pages PDFium (PaddleX's engine) reads, every one loaded; None if it fails."""
    with PDFIUM_LOCK:
        try:
            doc = pdfium.PdfDocument(data)
        except pdfium.PdfiumError:
            return None
        try:
            for index in range(len(doc)):
                doc[index].close()
            return len(doc)
        except pdfium.PdfiumError:
            return None
        finally:
            doc.close()


def cv2_decodes(data: bytes) -> bool:
    """Whether OpenCV (PaddleX's ``image_bytes_to_array``) decodes the image."""
    return cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR) is not None


def _photo(fmt: str, **options: object) -> bytes:
    image = Image.new("RGB", (320, 240), "white")
    draw = ImageDraw.Draw(image)
    for line in range(20):
        draw.text((8, line * 12), f"line {line} of a scanned page", fill=(0, 0, 0))
    buf = io.BytesIO()
    image.save(buf, format=fmt, **options)
    return buf.getvalue()


def _chunk_at(data: bytes, kind: bytes) -> tuple[int, int]:
    """(offset of the chunk's type, its data length) of the first ``kind`` chunk."""
    at = data.index(kind)
    (length,) = struct.unpack(">I", data[at - 4 : at])
    return at, length


def _bad_crc(data: bytes, kind: bytes) -> bytes:
    at, length = _chunk_at(data, kind)
    crc = at + 4 + length
    return data[:crc] + bytes([data[crc] ^ 0xFF]) + data[crc + 1 :]


def _with_text_chunk(png: bytes) -> bytes:
    """``png`` with a tEXt chunk (ancillary) after IHDR."""
    body = b"tEXtComment\x00scanned"
    chunk = struct.pack(">I", len(body) - 4) + body + struct.pack(">I", 0)  # CRC left wrong
    return png[:33] + chunk + png[33:]


def images() -> dict[str, bytes]:
    """Damaged images; which of them PaddleX decodes is :func:`cv2_decodes`'s to say."""
    jpeg, png = _photo("JPEG", quality=85), _photo("PNG")
    progressive = _photo("JPEG", quality=85, progressive=True)
    scan = jpeg.index(b"\xff\xda")
    return {
        "truncated JPEG (half its scan)": jpeg[: (scan + len(jpeg)) // 2],
        "JPEG without its end marker": jpeg[:-2],
        "PNG with a bad CRC on an ancillary chunk": _with_text_chunk(png),
        "PNG with a bad CRC on IDAT": _bad_crc(png, b"IDAT"),
        "PNG with a bad CRC on IEND": _bad_crc(png, b"IEND"),
        "PNG cut inside IDAT": png[: _chunk_at(png, b"IDAT")[0] + 20],
        "PNG without IEND": png[:-12],
        "JPEG cut before its scan": jpeg[: scan + 4],
        "progressive JPEG truncated": progressive[: len(progressive) * 3 // 4],
    }
