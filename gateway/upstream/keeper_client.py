"""The gateway's side of the slice keepers: send a slice through its instance's keeper, and
ask the keepers what became of a slice sent before a crash.

Without a keeper (``upstreams[].keeper`` unset), when it refuses connections, or when it does
not serve that instance (yet: a grown fleet's new config not installed in it), a slice goes
straight to its instance, as it would without keepers: a keeper down costs only the guarantee.

Usage::

    reply = await post_slice(client, upstream, body, "job-1:0:16", timeout=300)
    found = await find_slice(client, ["http://127.0.0.1:9102"], "job-1:0:16", timeout=2)
    found.reply or found.running_on     # an answer kept, or the instance still parsing it
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from gateway.dispatch.upstreams import Upstream
from gateway.wire import paddlex_routes
from gateway.wire.keeper_protocol import KEY_HEADER, MISDIRECTED, UPSTREAM_HEADER
from gateway.wire.upstream_http import Reply, UpstreamClient

log = logging.getLogger("gateway.keeper")


def slice_key(job_id: str, first: int, count: int) -> str:
    """The idempotency key of a job slice: the same on every attempt and after a restart."""
    return f"{job_id}:{first}:{count}"


async def post_slice(
    client: UpstreamClient, upstream: Upstream, body: dict[str, Any], key: str, timeout: float
) -> Reply:
    """``/layout-parsing`` of a slice on ``upstream``, through its keeper if it has one."""
    keeper = upstream.spec.keeper
    if keeper is not None:
        headers = {KEY_HEADER: key, UPSTREAM_HEADER: upstream.url}
        try:
            reply = await client.post(
                keeper + paddlex_routes.LAYOUT_PARSING, json=body, headers=headers, timeout=timeout
            )
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            log.warning("keeper %s unreachable (%s): slice %s sent directly", keeper, exc, key)
        else:
            if reply.status_code != MISDIRECTED:
                return reply
            log.warning(
                "keeper %s does not serve %s: slice %s sent directly", keeper, upstream.url, key
            )
    return await client.post(
        upstream.url + paddlex_routes.LAYOUT_PARSING, json=body, timeout=timeout
    )


@dataclass(frozen=True)
class Found:
    """What the keepers know of a slice: its kept answer, or the instance parsing it now."""

    reply: Reply | None = None
    running_on: str | None = None


async def find_slice(client: UpstreamClient, keepers: list[str], key: str, timeout: float) -> Found:
    """Ask every keeper about ``key`` at once; a kept answer wins over a parse running. A
    keeper that does not answer counts as knowing nothing."""

    async def ask(keeper: str) -> Reply | None:
        try:
            return await client.request(
                "GET", f"{keeper}/answers/{quote(key, safe='')}", b"", None, timeout
            )
        except httpx.HTTPError as exc:
            log.warning("keeper %s unreachable (%s) while resuming slice %s", keeper, exc, key)
            return None

    replies = await asyncio.gather(*(ask(keeper) for keeper in keepers))
    running: str | None = None
    for reply in replies:
        if reply is None:
            continue
        if reply.status_code == 200:
            return Found(reply=reply)
        if reply.status_code == 202:
            with_upstream = reply.json()
            if isinstance(with_upstream, dict) and isinstance(with_upstream.get("upstream"), str):
                running = with_upstream["upstream"]
    return Found(running_on=running)
