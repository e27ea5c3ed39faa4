"""Describe an image from a chat message without decoding it (stdlib only).

The simulator answers with the image's format, size and a digest, so a caller can tell
which page it sent.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import struct

_JPEG_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


def image_size(data: bytes) -> tuple[str, int, int] | None:
    """Return (format, width, height) for PNG or JPEG bytes, None for anything else."""
    if data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) >= 24:
        width, height = struct.unpack(">II", data[16:24])
        return "png", width, height
    if data.startswith(b"\xff\xd8"):
        i = 2
        while i + 9 < len(data):
            if data[i] != 0xFF:
                i += 1
                continue
            marker = data[i + 1]
            if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7 or marker == 0xFF:
                i += 1 if marker == 0xFF else 2
                continue
            (length,) = struct.unpack(">H", data[i + 2 : i + 4])
            if marker in _JPEG_SOF:
                height, width = struct.unpack(">HH", data[i + 5 : i + 9])
                return "jpeg", width, height
            i += 2 + length
    return None


def describe_image_url(url: str) -> str:
    """`data:image/jpeg;base64,...` -> `jpeg 1224x1584 sha256:0123abcd4567`."""
    if not url.startswith("data:"):
        return f"url {url[:120]}"
    _, _, payload = url.partition(",")
    try:
        data = base64.b64decode(payload, validate=False)
    except (binascii.Error, ValueError):
        return "undecodable image"
    digest = hashlib.sha256(data).hexdigest()[:12]
    size = image_size(data)
    if size is None:
        return f"image {len(data)}B sha256:{digest}"
    kind, width, height = size
    return f"{kind} {width}x{height} sha256:{digest}"
