"""JSON on the hot path: orjson (a C library, several times faster than ``json`` on the large
base64 strings of documents), with the standard library's semantics where they differ.

``dumps`` returns UTF-8 bytes; non-ASCII text stays unescaped (as ``ensure_ascii=False``).
``loads`` accepts bytes or str. Both raise ``ValueError`` subclasses on bad input, as ``json``
does.

A document's base64 is most of a request's bytes, and neither its way in nor its way out needs
it as a Python ``str``: :func:`loads_lifting` leaves a large escape-free string where it is in
the body (:class:`RawString`, a view: about 0.6 ms per MB less than parsing it, and no copy),
and :func:`dumps_parts` puts a :class:`RawString` back between its quotes without copying it
into the output.

Usage::

    body = jsonfast.dumps({"file": b64, "fileType": 1})
    data = jsonfast.loads(reply.content)
    payload, raw = jsonfast.loads_lifting(body, "base64")   # raw: RawString | None
    transport.writelines(jsonfast.dumps_parts({"file": raw, "fileType": 1}))
"""

from __future__ import annotations

import json
from typing import Any

import orjson

JSONDecodeError = orjson.JSONDecodeError

LIFT_MIN_BYTES = 1 << 16  # strings shorter than this are parsed as usual
_MAX_QUOTES = 256  # a body with more quotes than this is parsed as usual
_MARK = "\x00"  # stands in for a lifted string; never in an escape-free body, whose strings
_MARK_JSON = b'"\\u0000"'  # cannot hold a NUL; orjson writes it so


class RawString:
    """A JSON string's content as it is on the wire (``data``, without its quotes): characters
    that need no escaping (base64, say). :func:`dumps_parts` writes it as it is. ``data`` may
    be a view into the body it came from (no copy of a megabyte string)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes | memoryview) -> None:
        self.data = data

    def __repr__(self) -> str:
        return f"RawString(<{len(self.data)} bytes>)"


def wire_text(value: str | RawString) -> str | bytes | memoryview:
    """A JSON string's characters as held: the ``str``, or a :class:`RawString`'s bytes."""
    return value.data if isinstance(value, RawString) else value


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


def loads_lifting(body: bytes, key: str) -> tuple[Any, RawString | None]:
    """``loads(body)``; but when ``body`` is an object whose top-level ``key`` holds a string of
    at least :data:`LIFT_MIN_BYTES` and the body has no backslash (so no string has an escape,
    and each runs from one quote to the next), that string is not parsed: it comes back as the
    second item, a view of those bytes of the body, and the object holds ``""`` in its place. Its
    content is not checked as JSON text: the caller checks it (or parses ``body`` whole)."""
    if len(body) < LIFT_MIN_BYTES or body.find(b"\\") >= 0:
        return loads(body), None
    quotes: list[int] = []
    at = body.find(b'"')
    while at >= 0:
        if len(quotes) == _MAX_QUOTES:
            return loads(body), None
        quotes.append(at)
        at = body.find(b'"', at + 1)
    if len(quotes) % 2:
        return loads(body), None
    pairs = zip(quotes[::2], quotes[1::2], strict=True)
    spans = [(a, b) for a, b in pairs if b - a > LIFT_MIN_BYTES]
    if len(spans) != 1:
        return loads(body), None
    start, end = spans[0]
    skeleton = b"%s\\u0000%s" % (body[: start + 1], body[end:])
    try:
        payload = loads(skeleton)
    except ValueError:
        return loads(body), None  # the caller gets the body's own error
    if not isinstance(payload, dict) or payload.get(key) != _MARK:
        return loads(body), None  # the long string is another field's, or not at the top level
    payload[key] = ""
    return payload, RawString(memoryview(body)[start + 1 : end])


def dumps_parts(value: dict[str, Any]) -> list[bytes | memoryview]:
    """``dumps(value)`` in pieces (for ``transport.writelines``): each top-level
    :class:`RawString` value between its quotes, the rest as :func:`dumps` writes it."""
    raw = [v for v in value.values() if isinstance(v, RawString)]
    if not raw:
        return [dumps(value)]
    text = dumps({k: _MARK if isinstance(v, RawString) else v for k, v in value.items()})
    pieces = text.split(_MARK_JSON)
    if len(pieces) != len(raw) + 1:  # another value was the mark itself
        return [dumps({k: _text(v) for k, v in value.items()})]
    out: list[bytes | memoryview] = [pieces[0]]
    for string, after in zip(raw, pieces[1:], strict=True):
        out += (b'"', string.data, b'"' + after)
    return out


def _text(value: Any) -> Any:
    return str(value.data, "utf-8") if isinstance(value, RawString) else value
