"""A minimal PNG encoder (no Pillow): 8-bit gray or RGB pixels, optional tEXt chunks.

Usage::

    rows = [bytes([255] * 16) for _ in range(16)]  # 16 x 16 white, gray
    data = encode_png(16, 16, rows, rgb=False, text={b"note": b"hello"})
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Mapping

SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _chunk(kind: bytes, body: bytes) -> bytes:
    crc = zlib.crc32(kind + body) & 0xFFFFFFFF
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)


def encode_png(
    width: int,
    height: int,
    rows: Iterable[bytes],
    *,
    rgb: bool,
    text: Mapping[bytes, bytes] | None = None,
    level: int = 6,
) -> bytes:
    """A PNG of ``height`` scanlines (``width`` pixels of 1 byte gray or 3 bytes RGB each)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2 if rgb else 0, 0, 0, 0)
    raw = b"".join(b"\x00" + row for row in rows)  # filter type 0 on every scanline
    texts = b"".join(_chunk(b"tEXt", key + b"\x00" + value) for key, value in (text or {}).items())
    return (
        SIGNATURE
        + _chunk(b"IHDR", ihdr)
        + texts
        + _chunk(b"IDAT", zlib.compress(raw, level))
        + _chunk(b"IEND", b"")
    )
