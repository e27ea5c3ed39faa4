"""The hot-path upstream client against real loopback servers: keep-alive reuse, chunked and
Content-Length bodies, the httpx error types the failover logic classifies, deadlines, idle
expiry and the per-origin connection cap."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

import httpx
import pytest

from gateway.upstream.attempts import classify_transport_error
from gateway.wire.upstream_http import UpstreamClient

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], object]


@contextlib.asynccontextmanager
async def serve(handler: Handler) -> AsyncIterator[tuple[str, list[int]]]:
    """A loopback server running ``handler`` per connection; yields its URL and a list that
    counts the connections accepted."""
    accepted: list[int] = []

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        try:
            await handler(reader, writer)  # type: ignore[misc]
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", accepted
    finally:
        server.close()


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.lower() == b"content-length":
            length = int(value)
    return head, await reader.readexactly(length)


def answer(body: bytes, extra: bytes = b"") -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s\r\n%s"
        % (len(body), extra, body)
    )


async def echo_forever(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while True:
        head, body = await read_request(reader)
        writer.write(answer(b'{"len": %d, "head": %d}' % (len(body), len(head))))
        await writer.drain()


def answering_after(delay_s: float) -> Handler:
    """A handler that answers each request ``delay_s`` after it is read, one at a time."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await read_request(reader)
            await asyncio.sleep(delay_s)
            writer.write(answer(b"{}"))
            await writer.drain()

    return handler


def run(coro) -> object:
    return asyncio.run(coro)


def test_keep_alive_connections_are_reused_and_json_is_sent() -> None:
    async def main() -> None:
        async with serve(echo_forever) as (url, accepted):
            client = UpstreamClient()
            for _ in range(5):
                reply = await client.post(url + "/layout-parsing", json={"file": "é" * 10})
                assert reply.status_code == 200
                assert reply.headers["content-type"] == "application/json"
                assert reply.json()["len"] == len(b'{"file":"%s"}' % ("é" * 10).encode())
            assert len(accepted) == 1
            await client.aclose()

    run(main())


def test_chunked_answers_and_connection_close() -> None:
    async def chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(
            b"HTTP/1.1 502 Bad Gateway\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
            b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
        )
        await writer.drain()

    async def main() -> None:
        async with serve(chunked) as (url, accepted):
            client = UpstreamClient()
            for _ in range(2):
                reply = await client.post(url, content=b"x", headers={"content-type": "text/x"})
                assert (reply.status_code, reply.content) == (502, b"hello world")
            assert len(accepted) == 2  # "connection: close" is honoured

    run(main())


def test_refused_and_reset_connections_raise_the_types_failover_classifies() -> None:
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial")
        await writer.drain()

    async def main() -> None:
        client = UpstreamClient(connect_timeout_s=1)
        async with serve(hang_up) as (url, _):
            with pytest.raises(httpx.HTTPError) as broken:
                await client.post(url, json={})
        assert classify_transport_error(broken.value)[0] == "reset"
        with pytest.raises(httpx.ConnectError) as refused:
            await client.post(url, json={})  # the server is gone: its port refuses
        assert classify_transport_error(refused.value)[0] == "connect_error"

    run(main())


def test_the_deadline_raises_read_timeout_and_the_connection_is_not_reused() -> None:
    connections: list[int] = []

    async def slow_first(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        if len(connections) == 1:  # the first connection answers its first request late
            await read_request(reader)
            await asyncio.sleep(1.0)
            writer.write(answer(b"{}"))
        await echo_forever(reader, writer)

    async def main() -> None:
        async with serve(slow_first) as (url, accepted):
            client = UpstreamClient()
            with pytest.raises(httpx.ReadTimeout) as late:
                await client.post(url, json={}, timeout=0.2)
            assert classify_transport_error(late.value)[0] == "timeout"
            # a late answer on the old connection must not be read as the next one's
            reply = await client.post(url, json={"a": 1}, timeout=5)
            assert reply.json()["len"] == len(b'{"a":1}')
            assert len(accepted) == 2

    run(main())


def test_idle_connections_expire_and_the_cap_makes_requests_wait() -> None:
    async def main() -> None:
        async with serve(answering_after(0.1)) as (url, accepted):
            client = UpstreamClient(max_connections=2, keepalive_s=0.3)
            await asyncio.gather(*(client.post(url, json={}) for _ in range(6)))
            assert len(accepted) == 2  # six requests over at most two connections
            pool = next(iter(client.pools.values()))
            assert pool.open == 2 and len(pool.idle) == 2
            await asyncio.sleep(0.4)
            await client.post(url, json={})
            assert len(accepted) == 3 and pool.open == 1  # both idle ones expired

    run(main())


def test_an_origin_allowed_more_connections_lets_its_waiters_through() -> None:
    async def main() -> None:
        async with serve(answering_after(0.3)) as (url, accepted):
            client = UpstreamClient(max_connections=1)
            calls = [asyncio.ensure_future(client.post(url, json={})) for _ in range(3)]
            await asyncio.sleep(0.1)
            assert len(accepted) == 1  # the others wait for the one connection
            client.allow(url, 3)  # e.g. a slice keeper in front of three instances
            await asyncio.sleep(0.1)
            assert len(accepted) == 3  # the waiters connect at once, not one by one
            await asyncio.gather(*calls)
            client.allow("http://127.0.0.1:9", 5)  # an origin not used yet: its first pool
            assert client._pool("http", "127.0.0.1", 9).limit == 5

    run(main())


def test_header_injection_and_other_schemes_are_refused() -> None:
    async def main() -> None:
        client = UpstreamClient()
        with pytest.raises(httpx.LocalProtocolError):
            await client.post(
                "http://127.0.0.1:9/x", content=b"", headers={"content-type": "a\r\nx: y"}
            )
        with pytest.raises(httpx.UnsupportedProtocol):
            await client.post("ftp://127.0.0.1/x", json={})

    run(main())
