"""/ocr and /ocr-file over real HTTP: every input kind, the seed's client lines, PDF page
accounting, post-processing and each bad input."""

from __future__ import annotations

import base64
import json

import pytest
from fastapi import FastAPI
from fastapi.responses import Response

from tests.doubles.servers import ServerThread
from tests.gateway.conftest import gateway_config
from tests.gateway.samples import b64, image_bytes, pdf_bytes, png_bytes

try:  # the seed's client uses requests; httpx has the same call shape for these lines
    import requests as http_client
except ImportError:  # pragma: no cover - depends on the environment
    import httpx as http_client


def _double_name(url: str) -> str:
    return "double-" + url.rsplit(":", 1)[1]


def test_seed_client_lines_verbatim(fleet, start_gateway, tmp_path):
    gw = start_gateway(gateway_config(fleet.urls))
    doc = tmp_path / "doc.png"
    doc.write_bytes(png_bytes())
    # 方式1: base64 编码
    with open(doc, "rb") as f:
        b64_ = base64.b64encode(f.read()).decode()
    r = http_client.post(gw.url + "/ocr", json={"base64": b64_}, timeout=300)
    text1 = r.json()["text"]
    # 方式2: 文件上传
    r = http_client.post(gw.url + "/ocr-file", files={"file": open(doc, "rb")}, timeout=300)  # noqa: SIM115
    text2 = r.json()["text"]
    assert text1.startswith("double-") and text2.startswith("double-")


def test_response_fields_and_protocol(fleet, start_gateway):
    gw = start_gateway(gateway_config(fleet.urls))
    r = gw.client.post("/ocr", json={"base64": b64(png_bytes())}, headers={"X-Request-ID": "rid-1"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["text"] == f"{_double_name(body['upstream'])} page 1/1"
    assert body["upstream"] in fleet.urls
    assert body["attempts"] == 1 and body["pages"] == 1 and body["file_type"] == "image"
    assert body["request_id"] == "rid-1" == r.headers["x-request-id"]
    assert isinstance(body["elapsed_s"], float)
    served = fleet.by_url(body["upstream"])
    lp = served.layout_requests()[-1].body
    assert lp["fileType"] == 1 and lp["visualize"] is False and lp["logId"] == "rid-1"
    assert base64.b64decode(lp["file"], validate=True) == png_bytes()  # raw base64, no prefix
    rp = served.restructure_requests()[-1].body
    assert rp["concatenatePages"] is True
    assert rp["pages"][0]["markdownImages"] == {}  # never null
    # both steps of one document on the same upstream
    others = [d for d in fleet.doubles if d is not served]
    assert all(not d.requests for d in others)


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "BMP", "TIFF", "WEBP"])
def test_image_types(fleet, start_gateway, fmt):
    gw = start_gateway(gateway_config(fleet.urls))
    r = gw.client.post("/ocr-file", files={"file": ("x", image_bytes(fmt))})
    assert r.status_code == 200, r.text
    assert r.json()["file_type"] == "image"


def test_every_input_kind(fleet, start_gateway, tmp_path):
    files = FastAPI()

    @files.get("/doc.pdf")
    async def doc() -> Response:
        return Response(pdf_bytes(2), media_type="application/pdf")

    (tmp_path / "test.png").write_bytes(png_bytes())
    with ServerThread(files) as file_server:
        allowed = f"127.0.0.1:{file_server.port}"  # loopback: refused unless allow-listed
        gw = start_gateway(
            gateway_config(
                fleet.urls, input={"local_path_roots": [str(tmp_path)], "url_allow": [allowed]}
            )
        )
        cases = {
            "base64": {"base64": b64(png_bytes())},
            "data_url": {"data_url": "data:image/png;base64," + b64(png_bytes())},
            "base64 holding a data URL": {"base64": "data:image/png;base64," + b64(png_bytes())},
            "url": {"url": file_server.url + "/doc.pdf"},
            "local_path": {"local_path": "./test.png"},
            "local_path absolute": {"local_path": str(tmp_path / "test.png")},
        }
        for name, payload in cases.items():
            r = gw.client.post("/ocr", json=payload)
            assert r.status_code == 200, (name, r.text)
            assert r.json()["pages"] == (2 if name == "url" else 1), name
    r = gw.client.post("/ocr-file", files={"file": ("doc.pdf", pdf_bytes(3), "application/pdf")})
    assert r.status_code == 200 and r.json()["pages"] == 3 and r.json()["file_type"] == "pdf"


def test_curl_local_path_loop_rotates(fleet, start_gateway, tmp_path):
    (tmp_path / "test.png").write_bytes(png_bytes())
    gw = start_gateway(
        gateway_config(
            fleet.urls,
            input={"local_path_roots": [str(tmp_path)]},
            health={"enabled": False},  # an upstream a probe missed would skip its turn
        )
    )
    upstreams = []
    for _ in range(8):
        r = gw.client.post(
            "/ocr",
            content='{"local_path":"./test.png"}',
            headers={"Content-Type": "application/json"},
        )
        upstreams.append(r.json().get("upstream"))
    assert upstreams == (fleet.urls * 3)[:8]


def test_multi_page_pdf_is_one_document(start_gateway):
    from tests.doubles.paddlex_double import DoubleFleet

    with DoubleFleet(1, max_num_input_imgs=None) as fleet:
        gw = start_gateway(gateway_config(fleet.urls, fanout={"sync": False}))
        r = gw.client.post("/ocr", json={"base64": b64(pdf_bytes(25))})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["pages"] == 25
        name = _double_name(fleet.urls[0])
        assert body["text"].split("\n\n") == [f"{name} page {i}/25" for i in range(1, 26)]
        assert fleet[0].layout_requests()[-1].body["fileType"] == 0
        assert len(fleet[0].restructure_requests()[-1].body["pages"]) == 25


def test_pdf_truncation_is_an_error(fleet, start_gateway):
    # doubles keep the real default limit 10; one request per document (no page slices)
    gw = start_gateway(gateway_config(fleet.urls, fanout={"sync": False}))
    ok = gw.client.post("/ocr", json={"base64": b64(pdf_bytes(10))})
    assert ok.status_code == 200 and ok.json()["pages"] == 10
    r = gw.client.post("/ocr", json={"base64": b64(pdf_bytes(12))})
    assert r.status_code == 502
    err = r.json()["error"]
    assert err["code"] == "upstream_truncated"
    assert "truncated the PDF" in err["message"] and "10 of 12 pages" in err["message"]
    assert "max_num_input_imgs: null" in err["message"]
    assert "text" not in r.json()


def test_postprocess_rules_applied(start_gateway):
    from tests.doubles.paddlex_double import DoubleFleet

    extra = (
        '<div style="text-align: center;"><img src="imgs/a.jpg" alt="Image" width="50%" />'
        "</div>\n\n\n\n![x](imgs/b.jpg)签名回回回回"
    )
    with DoubleFleet(1, extra_markdown=extra, markdown_images={"imgs/a.jpg": "AAAA"}) as fleet:
        gw = start_gateway(gateway_config(fleet.urls))
        text = gw.client.post("/ocr", json={"base64": b64(png_bytes())}).json()["text"]
        assert text == f"{_double_name(fleet.urls[0])} page 1/1\n\n签名"
        # markdown.images went to /restructure-pages as markdownImages
        assert fleet[0].restructure_requests()[-1].body["pages"][0]["markdownImages"] == {
            "imgs/a.jpg": "AAAA"
        }
        raw = start_gateway(
            gateway_config(
                fleet.urls,
                postprocess={
                    "strip_images": False,
                    "remove_repeated_hui": {"enabled": False},
                    "collapse_blank_lines": False,
                },
            )
        )
        assert (
            "回回回回" in raw.client.post("/ocr", json={"base64": b64(png_bytes())}).json()["text"]
        )


@pytest.mark.parametrize(
    ("payload", "status", "code", "words"),
    [
        ({}, 400, "invalid_request", "exactly one of"),
        ({"base64": "AAAA", "url": "http://x/y.png"}, 400, "invalid_request", "got: base64, url"),
        ({"base64": "@@not-base64@@"}, 400, "invalid_base64", "base64"),
        ({"base64": ""}, 400, "empty_file", "empty"),
        ({"base64": b64(b"GIF89a" + b"\0" * 32)}, 415, "unsupported_type", "unsupported"),
        ({"base64": b64(b"plain text")}, 415, "unsupported_type", "PDF"),
        ({"data_url": "not-a-data-url"}, 400, "invalid_data_url", "data_url"),
        ({"url": "file:///etc/passwd"}, 400, "invalid_url", "http"),
        ({"local_path": "/etc/passwd"}, 403, "local_path_disabled", "disabled"),
        ({"base64": b64(png_bytes()), "options": 3}, 400, "invalid_request", "options"),
    ],
)
def test_bad_inputs(fleet, start_gateway, payload, status, code, words):
    gw = start_gateway(gateway_config(fleet.urls))
    r = gw.client.post("/ocr", json=payload)
    assert r.status_code == status, r.text
    body = r.json()
    assert body["error"]["code"] == code
    assert words in body["error"]["message"]
    assert body["request_id"]
    assert all(not d.requests for d in fleet.doubles)  # nothing reached an upstream


def test_bad_bodies_and_forms(fleet, start_gateway):
    gw = start_gateway(gateway_config(fleet.urls))
    r = gw.client.post("/ocr", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    r = gw.client.post("/ocr", json=[1, 2])
    assert r.status_code == 400 and "JSON object" in r.json()["error"]["message"]
    r = gw.client.post("/ocr-file", files={"other": ("a.png", png_bytes())})
    assert r.status_code == 400 and "'file'" in r.json()["error"]["message"]
    r = gw.client.post("/ocr-file", files={"file": ("a.png", b"")})
    assert r.status_code == 400 and r.json()["error"]["code"] == "empty_file"
    r = gw.client.post("/ocr-file", content=b"x", headers={"content-type": "text/plain"})
    assert r.status_code == 400 and "multipart" in r.json()["error"]["message"]
    # a bad request does not leak into the next one
    assert gw.client.post("/ocr", json={"base64": b64(png_bytes())}).status_code == 200


def test_request_too_large(fleet, start_gateway):
    gw = start_gateway(gateway_config(fleet.urls, input={"max_request_bytes": 2000}))
    big = b64(png_bytes(300, 300, "red") + b"\0" * 3000)
    r = gw.client.post("/ocr", json={"base64": big})
    assert r.status_code == 413 and r.json()["error"]["code"] == "too_large"
    r = gw.client.post("/ocr-file", files={"file": ("a.png", b"\x89PNG\r\n\x1a\n" + b"\0" * 5000)})
    assert r.status_code == 413

    def chunks():  # no Content-Length: the cap is checked while reading
        for _ in range(10):
            yield b" " * 500

    r = gw.client.post("/ocr", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413
    r = gw.client.post("/layout-parsing", content=json.dumps({"file": big, "fileType": 1}))
    assert r.status_code == 413 and r.json()["errorCode"] == 413


def test_upstream_4xx_is_passed_through_not_retried(fleet, start_gateway):
    gw = start_gateway(gateway_config(fleet.urls))
    # a valid BMP header (the gateway's checks pass) with a pixel depth the decoder refuses
    corrupt_bmp = bytearray(image_bytes("BMP"))
    corrupt_bmp[28:30] = (7).to_bytes(2, "little")
    r = gw.client.post("/ocr", json={"base64": b64(bytes(corrupt_bmp))})
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == "upstream_rejected" and "Invalid input file" in err["message"]
    assert err["upstream_status"] == 422
    assert sum(len(d.layout_requests()) for d in fleet.doubles) == 1
