"""gateway.inputs.sources: type sniffing, PDF pages, decoding and the safety rules of each input."""

from __future__ import annotations

import asyncio
import base64

import pytest
from fastapi import FastAPI
from fastapi.responses import Response

from gateway.config.settings import InputSettings
from gateway.inputs.sources import (
    InputError,
    decode_base64,
    decode_data_url,
    make_document,
    resolve_input,
    resolve_local_path,
    sniff_type,
)
from gateway.wire.urlguard import UrlGuard, guarded_client
from tests.doubles.servers import ServerThread
from tests.gateway.samples import image_bytes, pdf_bytes, png_bytes


@pytest.mark.parametrize(
    ("fmt", "mime"),
    [
        ("PNG", "image/png"),
        ("JPEG", "image/jpeg"),
        ("BMP", "image/bmp"),
        ("TIFF", "image/tiff"),
        ("WEBP", "image/webp"),
    ],
)
def test_sniff_images(fmt, mime):
    assert sniff_type(image_bytes(fmt)) == ("image", mime)


def test_sniff_pdf_and_unsupported():
    assert sniff_type(pdf_bytes(1)) == ("pdf", "application/pdf")
    assert sniff_type(b"GIF89a....") is None
    assert sniff_type(b"hello world") is None


def test_make_document_counts_pdf_pages():
    doc = make_document(pdf_bytes(4))
    assert (doc.kind, doc.file_type, doc.pages) == ("pdf", 0, 4)
    img = make_document(png_bytes())
    assert (img.kind, img.file_type, img.pages) == ("image", 1, 1)
    assert base64.b64decode(img.b64()) == png_bytes()


def test_make_document_errors():
    with pytest.raises(InputError) as err:
        make_document(b"")
    assert (err.value.status, err.value.code) == (400, "empty_file")
    with pytest.raises(InputError) as err:
        make_document(b"GIF89a" + b"\0" * 20)
    assert (err.value.status, err.value.code) == (415, "unsupported_type")


def test_damaged_pdf_is_refused():
    with pytest.raises(InputError) as err:
        make_document(b"%PDF-1.7\n garbage")
    assert (err.value.status, err.value.code) == (422, "unreadable_pdf")
    assert "cannot be read" in err.value.message


def test_decode_base64_variants():
    raw = bytes(range(256))
    std = base64.b64encode(raw).decode()
    assert decode_base64(std) == raw
    assert decode_base64(std[:60] + "\n" + std[60:]) == raw
    assert decode_base64(base64.urlsafe_b64encode(raw).decode().rstrip("=")) == raw
    with pytest.raises(InputError) as err:
        decode_base64("not base64 at all!!")
    assert err.value.code == "invalid_base64"
    with pytest.raises(InputError) as err:
        decode_base64("   ")
    assert err.value.code == "empty_file"


def test_decode_data_url():
    data = png_bytes()
    assert decode_data_url("data:image/png;base64," + base64.b64encode(data).decode()) == data
    assert decode_data_url("data:text/plain,%25PDF-x") == b"%PDF-x"
    with pytest.raises(InputError) as err:
        decode_data_url("image/png;base64,AAAA")
    assert err.value.code == "invalid_data_url"


def test_local_path_disabled_by_default(tmp_path):
    (tmp_path / "a.png").write_bytes(png_bytes())
    with pytest.raises(InputError) as err:
        resolve_local_path(str(tmp_path / "a.png"), [])
    assert (err.value.status, err.value.code) == (403, "local_path_disabled")


def test_local_path_below_roots_only(tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    (root / "sub").mkdir()
    (root / "sub" / "a.png").write_bytes(png_bytes())
    (tmp_path / "secret.png").write_bytes(png_bytes())
    (root / "link.png").symlink_to(tmp_path / "secret.png")
    (root / "dirlink").symlink_to(tmp_path)
    roots = [str(root)]
    assert resolve_local_path("sub/a.png", roots) == (root / "sub" / "a.png").resolve()
    assert resolve_local_path("./sub/a.png", roots) == (root / "sub" / "a.png").resolve()
    assert resolve_local_path(str(root / "sub" / "a.png"), roots).name == "a.png"
    for escape in (
        "../secret.png",
        str(tmp_path / "secret.png"),
        "link.png",
        "dirlink/secret.png",
        "sub/../../secret.png",
        "/etc/passwd",
    ):
        with pytest.raises(InputError) as err:
            resolve_local_path(escape, roots)
        assert (err.value.status, err.value.code) == (403, "local_path_forbidden"), escape
    with pytest.raises(InputError) as err:
        resolve_local_path("sub/missing.png", roots)
    assert (err.value.status, err.value.code) == (404, "local_path_not_found")


def _run(coro):
    return asyncio.run(coro)


async def _resolve(sources, settings):
    guard = UrlGuard(settings.url_allow)
    async with guarded_client(lambda: guard) as client:
        return await resolve_input(sources, settings, client, guard)


def test_resolve_input_exactly_one_source():
    settings = InputSettings()
    for sources in ({}, {"base64": "AAAA", "url": "http://x/a.png"}):
        with pytest.raises(InputError) as err:
            _run(_resolve(sources, settings))
        assert err.value.code == "invalid_request"
        assert "exactly one of base64, url, data_url, local_path" in err.value.message
    with pytest.raises(InputError) as err:
        _run(_resolve({"base64": 5}, settings))
    assert "must be a string" in err.value.message


def test_url_fetch_scheme_size_and_errors():
    app = FastAPI()
    big = b"\x89PNG\r\n\x1a\n" + b"\0" * 5000

    @app.get("/doc.png")
    async def doc() -> Response:
        return Response(png_bytes(), media_type="image/png")

    @app.get("/big.png")
    async def big_doc() -> Response:
        return Response(big, media_type="image/png")

    @app.get("/missing.png")
    async def missing() -> Response:
        return Response(b"nope", status_code=404)

    settings = InputSettings(url_max_bytes=2000, url_allow=["127.0.0.1"])
    with ServerThread(app) as server:
        doc_ = _run(_resolve({"url": server.url + "/doc.png"}, settings))
        assert doc_.kind == "image"
        cases = [
            ("file:///etc/passwd", 400, "invalid_url"),
            ("ftp://example.com/a.pdf", 400, "invalid_url"),
            (server.url + "/big.png", 413, "too_large"),
            (server.url + "/missing.png", 400, "url_fetch_failed"),
            ("http://127.0.0.1:1/x.png", 400, "url_fetch_failed"),
        ]
        for url, status, code in cases:
            with pytest.raises(InputError) as err:
                _run(_resolve({"url": url}, settings))
            assert (err.value.status, err.value.code) == (status, code), url
    with pytest.raises(InputError) as err:
        _run(_resolve({"url": "http://x/a.png"}, InputSettings(url_fetch_enabled=False)))
    assert err.value.code == "url_disabled"
