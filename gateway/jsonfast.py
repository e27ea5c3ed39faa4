"""JSON on the hot path: orjson (a C library, several times faster than ``json`` on the large
base64 strings of documents), with the standard library's semantics where they differ.

``dumps`` returns UTF-8 bytes; non-ASCII text stays unescaped (as ``ensure_ascii=False``).
``loads`` accepts bytes or str. Both raise ``ValueError`` subclasses on bad input, as ``json``
does.

Usage::

    body = jsonfast.dumps({"file": b64, "fileType": 1})
    data = jsonfast.loads(reply.content)
"""

from __future__ import annotations

import json
from typing import Any

import orjson

JSONDecodeError = orjson.JSONDecodeError


def dumps(value: Any) -> bytes:
    """``value`` as compact JSON bytes; what orjson refuses (integers beyond 64 bits, non-string
    keys) is encoded by the standard library instead."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse JSON; ``ValueError`` (``JSONDecodeError``) when it is not."""
    return orjson.loads(data)
