"""A caller's plain base64 image is checked (one strict SIMD decode) and passed on as it is;
anything else takes the decoding path, with the same answers as before."""

from __future__ import annotations

import base64
import io
import struct
import zlib

import pytest
from PIL import Image

from gateway.config.settings import InputSettings
from gateway.errors import InputError
from gateway.inputs.document import plain_base64_image
from gateway.inputs.sources import resolve_input
from gateway.wire.jsonfast import RawString
from tests.gateway.conftest import gateway_config
from tests.gateway.samples import b64, image_bytes, pdf_bytes, png_bytes

LIMITS = InputSettings()


def png_header(width: int, height: int) -> bytes:
    """A PNG signature and IHDR claiming ``width`` x ``height`` (no pixels)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    return (
        b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + chunk + struct.pack(">I", zlib.crc32(chunk))
    )


def jpeg_with_big_app_segments(count: int = 1) -> bytes:
    """A JPEG whose frame header comes after ``count`` APP1 segments of 20 KB."""
    buf = io.BytesIO()
    Image.new("RGB", (37, 21), (200, 10, 10)).save(buf, "JPEG")
    data = buf.getvalue()
    app1 = b"\xff\xe1" + struct.pack(">H", 20002) + b"\x00" * 20000
    return data[:2] + app1 * count + data[2:]


def test_a_plain_base64_png_is_kept_as_sent() -> None:
    text = b64(png_bytes())
    doc = plain_base64_image(text, LIMITS)
    assert doc is not None and (doc.kind, doc.mime, doc.pages) == ("image", "image/png", 1)
    assert doc.b64() is text  # passed on as it came
    assert doc.data == png_bytes()  # decoded only when asked for


@pytest.mark.parametrize("segments", [1, 6])  # past the decoded head; 120 KB in
def test_a_header_beyond_the_first_head_is_found(segments: int) -> None:
    data = jpeg_with_big_app_segments(segments)
    doc = plain_base64_image(b64(data), LIMITS)
    assert doc is not None and doc.mime == "image/jpeg"


@pytest.mark.parametrize(
    "text",
    [
        b64(pdf_bytes(2)),  # PDFs are decoded whole (pages, slices)
        b64(image_bytes("TIFF")),  # TIFF directories may lie anywhere
        b64(png_bytes())[:40] + "\n" + b64(png_bytes())[40:],  # whitespace
        b64(png_bytes()).replace("+", "-").replace("/", "_"),  # URL-safe
        b64(png_bytes())[:-8] + "*" + b64(png_bytes())[-7:],  # a stray character
        b64(png_bytes())[:20] + "=" + b64(png_bytes())[21:],  # padding in the middle
        "iVBORw0KGgoAAAANSUhEUg",  # length not a multiple of 4
        "",
    ],
)
def test_everything_else_takes_the_decoding_path(text: str) -> None:
    assert plain_base64_image(text, LIMITS) is None


def test_a_pixel_bomb_header_is_refused() -> None:
    with pytest.raises(InputError) as refused:
        plain_base64_image(b64(png_header(60000, 60000) + b"\x00" * 64), LIMITS)
    assert refused.value.status == 413 and refused.value.code == "image_too_large"


def test_resolve_input_gives_the_same_answers_on_both_paths() -> None:
    async def both(text: str):
        return await resolve_input({"base64": text}, LIMITS, None)  # type: ignore[arg-type]

    import asyncio

    fast = asyncio.run(both(b64(png_bytes())))
    slow = asyncio.run(both(b64(png_bytes())[:40] + "\n" + b64(png_bytes())[40:]))
    assert fast == slow
    with pytest.raises(InputError) as bad:
        asyncio.run(both(b64(png_bytes())[:-8] + "*" + b64(png_bytes())[-7:]))
    assert bad.value.code == "invalid_base64"


def test_ocr_forwards_the_callers_base64_unchanged(fleet, start_gateway) -> None:
    gw = start_gateway(gateway_config(fleet.urls))
    text = base64.b64encode(image_bytes("JPEG")).decode()
    r = gw.client.post("/ocr", json={"base64": text})
    assert r.status_code == 200, r.text
    sent = fleet.by_url(r.json()["upstream"]).layout_requests()[-1].body
    assert sent["file"] == text and sent["fileType"] == 1
    native = gw.client.post("/layout-parsing", json={"file": text, "fileType": 1})
    assert native.status_code == 200


def big_png(min_bytes: int = 200_000) -> bytes:
    """A PNG of noise larger than ``min_bytes`` (its base64 is lifted out of the JSON body)."""
    side = int(min_bytes**0.5) + 16
    noise = bytes((i * 7919 + (i >> 5) * 104729) % 251 for i in range(side * side))
    buf = io.BytesIO()
    Image.frombytes("L", (side, side), noise).save(buf, "PNG", compress_level=0)
    return buf.getvalue()


def test_ocr_forwards_a_large_base64_image_as_sent(fleet, start_gateway) -> None:
    gw = start_gateway(gateway_config(fleet.urls))
    text = base64.b64encode(big_png()).decode()
    r = gw.client.post("/ocr", json={"base64": text, "options": {"prettifyMarkdown": False}})
    assert r.status_code == 200, r.text
    sent = fleet.by_url(r.json()["upstream"]).layout_requests()[-1].body
    assert sent["file"] == text and sent["fileType"] == 1
    assert sent["prettifyMarkdown"] is False and sent["logId"] == r.json()["request_id"]
    native = gw.client.post("/layout-parsing", json={"file": text, "fileType": 1})
    assert native.status_code == 200
    newest = max((r for d in fleet.doubles for r in d.layout_requests()), key=lambda r: r.at)
    assert newest.body["file"] == text


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        # another source beside a lifted base64: the one-source rule still holds
        ('{"base64": "%s", "url": "https://example.test/a.png"}', 400, "invalid_request"),
        # not an image's base64 (the body's own text is then parsed and decoded)
        ('{"base64": "%s*"}', 400, "invalid_base64"),
        # escaped slashes (as PHP writes them): parsed whole, still accepted
        ('{"base64": "%s", "options": {"x": "a\\/b"}}', 200, None),
        ('{"base64": "%s", "options": 3}', 400, "invalid_request"),
        ('{"base64": "%s"', 400, "invalid_json"),
        ('["%s"]', 400, "invalid_request"),
    ],
)
def test_a_large_body_that_is_not_a_plain_image_gets_the_usual_answer(
    fleet, start_gateway, body: str, status: int, code: str | None
) -> None:
    gw = start_gateway(gateway_config(fleet.urls))
    text = base64.b64encode(big_png()).decode()
    r = gw.client.post(
        "/ocr", content=(body % text).encode(), headers={"content-type": "application/json"}
    )
    assert r.status_code == status, r.text
    if code is not None:
        assert r.json()["error"]["code"] == code


def test_a_plain_image_over_the_request_cap_is_413_before_decoding() -> None:
    text = base64.b64encode(big_png())
    with pytest.raises(InputError) as refused:
        plain_base64_image(RawString(text), InputSettings(max_request_bytes=len(text) // 2))
    assert refused.value.status == 413 and refused.value.code == "too_large"
