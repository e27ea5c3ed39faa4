"""The URL guard: no fetch reaches an internal address in any spelling, every redirect hop is
checked, names are resolved once, and nothing fetched is echoed in an error.

Every HTTP test here talks to loopback only; the checks about other addresses (the metadata
address, private ranges) call the guard's functions, which do no network I/O (a resolver
that fails the test if it is asked stands in for DNS).
"""

from __future__ import annotations

import asyncio
import ipaddress

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse, Response

from gateway.wire.urlguard import (
    UrlGuard,
    UrlRefused,
    address_class,
    guarded_client,
    literal_address,
    parse_allow_entry,
)
from tests.doubles.servers import ServerThread
from tests.gateway.conftest import gateway_config
from tests.gateway.samples import png_bytes


async def no_dns(host: str, port: int) -> list[str]:
    raise AssertionError(f"the guard asked DNS about {host!r}")


def fake_dns(table: dict[str, list[str]]):
    calls: list[str] = []

    async def resolve(host: str, port: int) -> list[str]:
        calls.append(host)
        return table[host]

    resolve.calls = calls  # type: ignore[attr-defined]
    return resolve


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("169.254.169.254", "cloud metadata"),
        ("fd00:ec2::254", "cloud metadata"),
        ("169.254.10.1", "link-local"),
        ("fe80::1", "link-local"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("fc00::1", "private"),
        ("100.64.0.1", "reserved"),
        ("127.0.0.1", "loopback"),
        ("127.255.0.9", "loopback"),
        ("::1", "loopback"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("240.0.0.1", "private"),
        ("255.255.255.255", "private"),
        ("::ffff:10.0.0.1", "private"),
        ("::ffff:127.0.0.1", "loopback"),
        ("64:ff9b::a9fe:a9fe", "cloud metadata"),
        ("2002:a9fe:a9fe::", "cloud metadata"),
        ("::127.0.0.1", "reserved"),
    ],
)
def test_forbidden_address_classes(address, kind):
    assert kind in (address_class(ipaddress.ip_address(address)) or "")


def test_global_addresses_pass():
    for address in ("8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8"):
        assert address_class(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize(
    ("spelling", "address"),
    [
        ("127.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("0x7f.0.0.1", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("0251.0376.0251.0376", "169.254.169.254"),
        ("0xA9FEA9FE", "169.254.169.254"),
        ("2852039166", "169.254.169.254"),
        ("169.254.43518", "169.254.169.254"),
        ("10.1", "10.0.0.1"),
        ("0", "0.0.0.0"),
        ("[::1]", "::1"),
    ],
)
def test_literal_spellings(spelling, address):
    assert literal_address(spelling) == ipaddress.ip_address(address)


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://0251.0376.0251.0376/latest/meta-data/",
        "http://0xA9FEA9FE/",
        "http://2852039166/",
        "http://[::ffff:169.254.169.254]/",
        "http://[fd00:ec2::254]/",
        "http://10.0.0.1:8080/",
        "http://192.168.0.1./",
        "http://%31%30.0.0.1/",
        "http://metadata@169.254.169.254/",
        "http://files.corp@10.0.0.1/",
        "http://0.0.0.0/",
    ],
)
def test_parse_refuses_literal_internal_urls_without_any_io(url):
    guard = UrlGuard(["files.corp"], resolver=no_dns)
    with pytest.raises(UrlRefused) as err:
        guard.parse(url)
    assert err.value.status == 403


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("file:///etc/passwd", "only http"),
        ("gopher://x/", "only http"),
        ("http:///nohost", "no host"),
        ("http://x:99999/", "not a valid URL"),
        ("http://exa mple/", "not a valid host"),
    ],
)
def test_parse_refuses_malformed_urls(url, words):
    with pytest.raises(UrlRefused) as err:
        UrlGuard(resolver=no_dns).parse(url)
    assert err.value.status == 400 and words in err.value.reason


def test_resolved_names_are_checked_every_address():
    dns = fake_dns(
        {
            "meta.evil": ["169.254.169.254"],
            "mixed.evil": ["93.184.216.34", "10.0.0.5"],  # one good, one internal: refused
            "files.corp": ["10.9.9.9"],
            "public.example": ["93.184.216.34"],
        }
    )
    guard = UrlGuard(["files.corp:8443", "10.2.0.0/16"], resolver=dns)

    def resolve(host: str, port: int) -> list[str]:
        return asyncio.run(guard.resolve(host, port))

    for host in ("meta.evil", "mixed.evil"):
        with pytest.raises(UrlRefused):
            resolve(host, 80)
    assert resolve("public.example", 80) == ["93.184.216.34"]
    assert resolve("files.corp", 8443) == ["10.9.9.9"]  # opened by name and port
    with pytest.raises(UrlRefused):
        resolve("files.corp", 80)  # the entry names port 8443 only
    with pytest.raises(UrlRefused) as err:
        resolve("localhost", 80)  # never asked of DNS
    assert "loopback" in err.value.reason
    assert "localhost" not in dns.calls


def test_allow_entries():
    guard = UrlGuard(["10.2.0.0/16", "127.0.0.1:8080", "[fd00::/8]:443"], resolver=no_dns)
    ip = ipaddress.ip_address
    assert guard.refusal("10.2.3.4", ip("10.2.3.4"), 80) is None
    assert guard.refusal("10.3.0.1", ip("10.3.0.1"), 80) is not None
    assert guard.refusal("127.0.0.1", ip("127.0.0.1"), 8080) is None
    assert guard.refusal("x", ip("::ffff:127.0.0.1"), 8080) is None  # the same address
    assert guard.refusal("127.0.0.1", ip("127.0.0.1"), 8081) is not None
    assert guard.refusal("fd00::1", ip("fd00::1"), 443) is None
    assert guard.refusal("fd00::1", ip("fd00::1"), 80) is not None
    assert parse_allow_entry("Files.Corp.").host == "files.corp"
    assert parse_allow_entry("0177.0.0.1").network == ipaddress.ip_network("127.0.0.1/32")
    for bad in ("", "a b", "10.0.0.0/33", "host:0", "host:x", "host:\u00b2", "[fd00::1"):
        with pytest.raises(ValueError):
            parse_allow_entry(bad)


def _file_server() -> tuple[FastAPI, list[str]]:
    app = FastAPI()
    seen: list[str] = []

    @app.middleware("http")
    async def record(request: Request, call_next):  # every request that reached the server
        seen.append(f"{request.headers.get('host')} {request.url.path}")
        return await call_next(request)

    @app.get("/doc.png")
    async def doc() -> Response:
        return Response(png_bytes(), media_type="image/png")

    @app.get("/secret")
    async def secret() -> Response:
        return Response(b"SECRET-INTERNAL-DATA " * 10, media_type="text/plain")

    @app.get("/broken")
    async def broken() -> Response:
        return Response(b"SECRET-INTERNAL-DATA", status_code=500)

    @app.get("/to")
    async def redirect(target: str) -> RedirectResponse:
        return RedirectResponse(target, status_code=302)

    @app.get("/loop")
    async def loop() -> RedirectResponse:
        return RedirectResponse("/loop", status_code=307)

    return app, seen


def test_guarded_client_resolves_once_and_connects_to_the_checked_address():
    app, seen = _file_server()
    with ServerThread(app) as server:
        dns = fake_dns({"files.test": ["127.0.0.1"]})
        guard = UrlGuard([f"127.0.0.1:{server.port}"], resolver=dns)

        async def fetch() -> int:
            async with guarded_client(lambda: guard) as client:
                r = await client.get(f"http://files.test:{server.port}/doc.png")
                return r.status_code

        assert asyncio.run(fetch()) == 200
        assert dns.calls == ["files.test"]  # once, and the connection went to its answer
        assert seen == [f"files.test:{server.port} /doc.png"]  # the name stays in Host
        refusing = UrlGuard([], resolver=dns)

        async def refused() -> None:
            async with guarded_client(lambda: refusing) as client:
                await client.get(f"http://files.test:{server.port}/doc.png")

        with pytest.raises(UrlRefused):
            asyncio.run(refused())
        assert len(seen) == 1  # refused before connecting


LOOPBACK_SPELLINGS = [
    "http://127.0.0.1:{port}/doc.png",
    "http://localhost:{port}/doc.png",
    "http://LOCALHOST.:{port}/doc.png",
    "http://127.1:{port}/doc.png",
    "http://2130706433:{port}/doc.png",
    "http://0x7f.0.0.1:{port}/doc.png",
    "http://0177.0.0.1:{port}/doc.png",
    "http://[::1]:{port}/doc.png",
    "http://[::ffff:127.0.0.1]:{port}/doc.png",
    "http://0.0.0.0:{port}/doc.png",
    "http://allowed@127.0.0.1:{port}/doc.png",
    "http://127.0.0.1:{port}@127.0.0.1:{port}/doc.png",
]


def test_url_input_refuses_loopback_in_every_spelling(fleet, start_gateway):
    app, seen = _file_server()
    with ServerThread(app) as files:
        gw = start_gateway(gateway_config(fleet.urls))
        for spelling in LOOPBACK_SPELLINGS:
            url = spelling.format(port=files.port)
            r = gw.client.post("/ocr", json={"url": url})
            assert r.status_code == 403, (url, r.text)
            assert r.json()["error"]["code"] == "url_forbidden", url
        # the gateway's own admin endpoint, the SSRF of the issue
        r = gw.client.post("/ocr", json={"url": gw.url + "/upstreams"})
        assert r.status_code == 403 and '"mode"' not in r.text
        r = gw.client.post("/layout-parsing", json={"file": gw.url + "/upstreams"})
        assert r.status_code == 403 and r.json()["errorCode"] == 403
    assert seen == []  # not one connection reached the file server
    assert all(not d.requests for d in fleet.doubles)
    assert (
        gw.runtime.metrics.registry.get_sample_value(
            "gateway_requests_total", {"route": "/upstreams", "code": "200", "token": "-"}
        )
        is None
    )  # nor the gateway itself


def test_allow_list_redirect_hops_and_no_echo(fleet, start_gateway):
    app, seen = _file_server()
    with ServerThread(app) as files:
        base = f"http://127.0.0.1:{files.port}"
        gw = start_gateway(
            gateway_config(fleet.urls, input={"url_allow": [f"127.0.0.1:{files.port}"]})
        )
        r = gw.client.post("/ocr", json={"url": base + "/doc.png"})
        assert r.status_code == 200, r.text
        # another loopback port stays closed, also as a redirect target
        r = gw.client.post("/ocr", json={"url": f"{base}/to?target={gw.url}/upstreams"})
        assert r.status_code == 403 and "redirect 1" in r.json()["error"]["message"]
        r = gw.client.post("/ocr", json={"url": f"{base}/to?target=/doc.png"})
        assert r.status_code == 200
        r = gw.client.post("/ocr", json={"url": f"{base}/to?target=file:///etc/passwd"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_url"
        r = gw.client.post("/ocr", json={"url": base + "/loop"})
        assert r.status_code == 400 and "input.url_max_redirects" in r.text
        for path in ("/secret", "/broken"):
            r = gw.client.post("/ocr", json={"url": base + path})
            assert 400 <= r.status_code < 500 and "SECRET" not in r.text, r.text
        # a native file URL is fetched by the gateway and sent on as base64
        r = gw.client.post("/layout-parsing", json={"file": base + "/doc.png"})
        assert r.status_code == 200, r.text
        forwarded = [d for d in fleet.doubles if d.layout_requests()][-1].layout_requests()[-1]
        assert forwarded.body["fileType"] == 1 and not forwarded.body["file"].startswith("http")
    assert len([s for s in seen if s.endswith("/loop")]) == 6  # the first and 5 redirects
