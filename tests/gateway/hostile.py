"""Hostile documents for the input-bound tests, built in memory: headers that claim huge
images, PDFs whose page trees loop or explode, and worker functions that never return.

Usage::

    huge_png(60000, 60000)        # a valid PNG header claiming 3.6 gigapixels
    looping_pdf()                 # /Pages lists itself among its /Kids
"""

from __future__ import annotations

import struct
import time
import zlib

from tests.gateway.raw_pdf import pdf_from_objects


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def huge_png(width: int, height: int) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\0" * 64)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", ihdr)
        + _png_chunk(b"IDAT", idat)
        + _png_chunk(b"IEND", b"")
    )


def huge_jpeg(width: int, height: int) -> bytes:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    exif = b"\xff\xe1" + struct.pack(">H", 2 + 200) + b"Exif\x00\x00" + b"\xff\xc0" * 97
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return (
        b"\xff\xd8" + app0 + exif + sof + b"\xff\xda\x00\x08\x01\x01\x00\x00\x3f\x00" + b"\0" * 32
    )


def huge_bmp(width: int, height: int) -> bytes:
    header = struct.pack("<IiiHHIIiiII", 40, width, -height, 1, 24, 0, 0, 2835, 2835, 0, 0)
    return b"BM" + struct.pack("<IHHI", 14 + 40 + 64, 0, 0, 54) + header + b"\0" * 64


def _tiff_ifd(width: int, height: int, next_offset: int) -> bytes:
    entries = [(256, 4, 1, width), (257, 4, 1, height), (258, 3, 1, 8), (262, 3, 1, 1)]
    body = struct.pack("<H", len(entries))
    for tag, kind, count, value in entries:
        body += struct.pack("<HHII", tag, kind, count, value)
    return body + struct.pack("<I", next_offset)


def huge_tiff(width: int, height: int) -> bytes:
    return b"II*\x00" + struct.pack("<I", 8) + _tiff_ifd(width, height, 0) + b"\0" * 16


def looping_tiff() -> bytes:
    """Two page directories, each naming the other as the next."""
    first, second = 8, 8 + 2 + 4 * 12 + 4
    return (
        b"II*\x00"
        + struct.pack("<I", first)
        + _tiff_ifd(16, 16, second)
        + _tiff_ifd(16, 16, first)
        + b"\0" * 16
    )


def huge_webp(width: int, height: int) -> bytes:
    vp8x = (
        b"\x00\x00\x00\x00" + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    )
    chunk = b"VP8X" + struct.pack("<I", len(vp8x)) + vp8x
    return b"RIFF" + struct.pack("<I", 4 + len(chunk)) + b"WEBP" + chunk


def looping_pdf() -> bytes:
    """The root /Pages node lists itself among its /Kids."""
    return pdf_from_objects(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [2 0 R 3 0 R] /Count 2 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>",
        ]
    )


def page_tree_bomb(fanout: int = 30) -> bytes:
    """A 1 KB PDF whose shared /Kids expand to fanout**3 pages. Its /Pages nodes carry no
    /Count, so PDFium (PaddleX's engine) counts the tree itself and sees every repetition (a
    /Count it trusts instead: PaddleX would render only that many pages)."""
    kids = lambda ref: b"[" + b" ".join([ref] * fanout) + b"]"  # noqa: E731
    return pdf_from_objects(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids " + kids(b"3 0 R") + b" >>",
            b"<< /Type /Pages /Parent 2 0 R /Kids " + kids(b"4 0 R") + b" >>",
            b"<< /Type /Pages /Parent 3 0 R /Kids " + kids(b"5 0 R") + b" >>",
            b"<< /Type /Page /Parent 4 0 R /MediaBox [0 0 612 792] >>",
        ]
    )


def huge_page_pdf(points: int = 200000) -> bytes:
    """One page of `points` x `points` (the default: 20000 x 20000 pixels even at PaddleX's
    smallest render scale, 0.1, over its 178,956,970-pixel limit)."""
    return pdf_from_objects(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %d %d] >>" % (points, points),
        ]
    )


def spin_forever(payload: bytes) -> None:
    """A worker job that never returns (it sleeps, so a stuck test costs no CPU)."""
    while True:
        time.sleep(1)


def echo_length(payload: bytes, extra: int = 0) -> int:
    return len(payload) + extra


def nap(payload: bytes, seconds: float) -> str:
    """A worker job that holds its process for ``seconds``, then answers its payload."""
    time.sleep(seconds)
    return payload.decode()
