"""Sample documents for gateway tests (built in memory)."""

from __future__ import annotations

import base64
import io

import pypdfium2 as pdfium
from PIL import Image


def png_bytes(
    width: int = 40, height: int = 30, color: str | tuple[int, int, int] = "white"
) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), color).save(buf, format="PNG")
    return buf.getvalue()


def image_bytes(fmt: str) -> bytes:
    """A tiny image in ``fmt`` (PNG, JPEG, BMP, TIFF, WEBP)."""
    buf = io.BytesIO()
    Image.new("RGB", (16, 12), "white").save(buf, format=fmt)
    return buf.getvalue()


def pdf_bytes(pages: int, widths: list[int] | None = None) -> bytes:
    """A PDF of blank 200x300 pages, or of pages as wide as ``widths`` (points)."""
    pdf = pdfium.PdfDocument.new()
    for width in widths or [200] * pages:
        pdf.new_page(width, 300).close()
    buf = io.BytesIO()
    pdf.save(buf)
    pdf.close()
    return buf.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
