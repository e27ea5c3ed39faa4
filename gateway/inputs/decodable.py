"""Damage in an image that PaddleX's decoder refuses, found without decoding the pixels.

PaddleX decodes a caller's image with OpenCV (``cv2.imdecode``: libpng, libjpeg-turbo) and
fails the request when that returns nothing. A full decode in the gateway would cost as much
CPU as the upstream's own, so what the decoders refuse is told from the file's structure:

- PNG: libpng stops on a critical chunk (IHDR, PLTE, IDAT, IEND: upper-case first letter)
  whose CRC is wrong, and OpenCV reads through IEND, so a file cut before its IEND chunk is
  refused too. A damaged ancillary chunk is only a warning for libpng, and is let through.
- JPEG: libjpeg fills the missing rest of a truncated baseline scan with grey (the image
  decodes), but it needs the scan header (SOS) whole; OpenCV gives nothing for a progressive
  JPEG whose end-of-image marker is missing.

Anything subtler (a corrupt deflate stream inside a well-formed IDAT) reaches PaddleX, whose
refusal the gateway passes back. The tests check each verdict against ``cv2.imdecode``.

Usage::

    why = png_damage(data) or None     # "chunk IDAT has a bad CRC" ...
    why = jpeg_damage(data)
"""

from __future__ import annotations

import struct
import zlib

_PNG_SIGNATURE = 8
_PROGRESSIVE_SOF = {0xC2, 0xC6, 0xCA, 0xCE}
_NO_LENGTH = {0x01, *range(0xD0, 0xD9)}  # TEM, RSTn, SOI
_MAX_SEGMENTS = 4096


def png_damage(data: bytes) -> str | None:
    """Why libpng (as OpenCV drives it) refuses this PNG, or None."""
    at, end = _PNG_SIGNATURE, len(data)
    view = memoryview(data)
    while at + 8 <= end:
        (length,) = struct.unpack_from(">I", data, at)
        kind = bytes(view[at + 4 : at + 8])
        name = kind.decode("latin-1")
        if at + 12 + length > end:
            return f"the file is truncated inside its {name} chunk"
        critical = kind[:1].isupper()
        if critical:
            (stored,) = struct.unpack_from(">I", data, at + 8 + length)
            if zlib.crc32(view[at + 4 : at + 8 + length]) != stored:
                return f"its {name} chunk has a bad CRC"
        if kind == b"IEND":
            return None
        at += 12 + length
    return "the file is truncated: it ends before its IEND chunk"


def jpeg_damage(data: bytes) -> str | None:
    """Why OpenCV's JPEG decoder refuses this JPEG, or None."""
    at, end = 2, len(data)
    progressive = False
    for _ in range(_MAX_SEGMENTS):
        at = data.find(b"\xff", at)  # libjpeg skips stray bytes before a marker
        if at < 0:
            break
        while at < end and data[at] == 0xFF:  # the marker's fill bytes
            at += 1
        if at >= end:
            break
        marker = data[at]
        at += 1
        if marker in _NO_LENGTH:
            continue
        if marker == 0xD9 or at + 2 > end:
            break
        (length,) = struct.unpack_from(">H", data, at)
        if marker in _PROGRESSIVE_SOF:
            progressive = True
        if marker == 0xDA:
            if at + length > end:
                break
            if progressive and data.rfind(b"\xff\xd9") < at + length:
                return "the progressive JPEG is truncated (no end-of-image marker)"
            return None
        if length < 2:
            break
        at += length
    return "the file ends before its image data (no complete SOS segment)"
