"""gateway.wire.jsonfast: a large escape-free string lifted out of a body, and spliced back."""

from __future__ import annotations

import base64
import json

import pytest

from gateway.wire import jsonfast
from gateway.wire.jsonfast import LIFT_MIN_BYTES, RawString

B64 = base64.b64encode(bytes(range(256)) * (LIFT_MIN_BYTES // 192 + 1)).decode()


def test_a_large_string_is_lifted_as_the_bodys_own_bytes() -> None:
    body = json.dumps({"options": {"a": [1, "x"]}, "base64": B64, "n": 1}).encode()
    payload, raw = jsonfast.loads_lifting(body, "base64")
    assert payload == {"options": {"a": [1, "x"]}, "base64": "", "n": 1}
    assert isinstance(raw, RawString) and raw.data == B64.encode()
    assert isinstance(raw.data, memoryview) and raw.data.obj is body  # a view, not a copy


@pytest.mark.parametrize(
    "value",
    [
        {"base64": B64[:100]},  # short: parsed as usual
        {"base64": B64, "note": "a\\b"},  # an escape somewhere: every string may hold one
        {"file": B64},  # the long string is another key's
        {"base64": "x", "other": B64},
        {"base64": {"nested": B64}},
        {"base64": B64, "b": B64},  # two long strings
        {"base64": B64, "many": ["q"] * 200},  # more quotes than are scanned
    ],
)
def test_anything_else_is_parsed_as_usual(value: dict) -> None:
    body = json.dumps(value).encode()
    assert jsonfast.loads_lifting(body, "base64") == (value, None)


@pytest.mark.parametrize(
    "body",
    [
        b'{"base64": "' + B64.encode() + b'"',  # unterminated object
        b'{"base64": "' + B64.encode() + b'", }',  # trailing comma
        b'{"base64": "' + B64.encode() + b'" "x": 1}',  # missing comma
        b'{"base64": "' + B64.encode(),  # unterminated string
    ],
)
def test_invalid_json_raises_as_loads_does(body: bytes) -> None:
    with pytest.raises(ValueError):
        jsonfast.loads_lifting(body, "base64")


def test_dumps_parts_splices_raw_strings_between_their_quotes() -> None:
    raw = RawString(B64.encode())
    parts = jsonfast.dumps_parts({"file": raw, "fileType": 1, "logId": "r\u00e9"})
    assert any(part is raw.data for part in parts)  # written as it is, not copied
    assert json.loads(b"".join(parts)) == {"file": B64, "fileType": 1, "logId": "r\u00e9"}
    assert jsonfast.dumps_parts({"a": 1}) == [b'{"a":1}']


def test_dumps_parts_with_a_value_that_looks_like_its_mark() -> None:
    parts = jsonfast.dumps_parts({"file": RawString(b"QUJD"), "other": "\x00"})
    assert json.loads(b"".join(parts)) == {"file": "QUJD", "other": "\x00"}
