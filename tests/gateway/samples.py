"""Sample documents for gateway tests (built in memory)."""

from __future__ import annotations

import base64
import io

from PIL import Image
from pypdf import PdfWriter


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
    writer = PdfWriter()
    for width in widths or [200] * pages:
        writer.add_blank_page(width=width, height=300)
    buf = io.BytesIO()
    writer.write(buf)
    return buf.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
