"""Drain, undrain and recycle PaddleX instances through their gateway's admin API.

``drain`` asks the gateway that holds an instance (the per-host layout: that host's gateway)
to give it no new work and waits for its attempts in flight (``POST /admin/drain``);
``undrain`` takes it back in. ``recycle`` restarts instances without an outage, one card at a
time: drain the card's selected instances, restart each (``docker restart`` plus its start
command, :func:`fleetctl.ops.restart`), wait for ``/health``, undrain; the undrain runs even
when the restart fails, and a failed card stops the recycle, so never more than one card is
out at once. A drain carries a ``ttl_s`` bound: a recycle killed half-way leaves no instance
drained for longer than that.

Usage::

    answers = drain(fleet, insts, token, wait_s=600, ttl_s=3600)    # one answer per gateway
    undrain(fleet, insts, token)
    ok = recycle(fleet, insts, token, docker, say)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx

from fleetctl import ops, probes
from fleetctl.auth import REFUSED, bearer, redact, refusal
from fleetctl.docker import Docker, DockerError
from fleetctl.topology import Fleet, Instance, TopologyError

Say = Callable[[str], None]
Restart = Callable[[Instance], None]


class DrainError(Exception):
    """The gateway refused or failed a drain or undrain (the message says why)."""


def targets(
    fleet: Fleet,
    names: list[str],
    cards: list[int] | None = None,
    hosts: list[str] | None = None,
) -> list[Instance]:
    """The PaddleX instances named by URL, port or container name, plus every PaddleX of
    ``cards`` (on ``hosts``), in plan order; TopologyError for a name that matches none."""
    paddlex = fleet.of_kind("paddlex")
    chosen: set[Instance] = set()
    for name in names:
        if name.startswith(("http://", "https://")):
            found = [i for i in paddlex if i.url == name.rstrip("/")]
        elif name.isdigit():
            found = [fleet.find("paddlex", int(name), hosts[0] if hosts else None)]
        else:
            found = fleet.select(kinds=("paddlex",), names=[name], hosts=hosts)
        if not found:
            raise TopologyError(
                f"no PaddleX instance {name!r} (a URL, port or container name); known ports: "
                + fleet.describe_ports(("paddlex",))
            )
        chosen.update(found)
    if cards:
        found = fleet.select(kinds=("paddlex",), cards=cards, hosts=hosts)
        if not found:
            where = f" of host {', '.join(hosts)}" if hosts else ""
            raise TopologyError(f"no PaddleX instance on card {cards}{where}")
        chosen.update(found)
    if not chosen:
        raise TopologyError("name the instances: URL, port or container name, or --card N")
    return [i for i in paddlex if i in chosen]


def by_gateway(fleet: Fleet, insts: list[Instance]) -> dict[str, list[Instance]]:
    """``gateway URL -> its instances among insts`` (one gateway, or each host's own)."""
    urls = fleet.gateway_urls()
    if not urls:
        raise TopologyError("the topology has no gateway: nothing to drain through")
    out: dict[str, list[Instance]] = {}
    for inst in insts:
        url = urls.get("") or urls.get(inst.host)
        if url is None:
            raise TopologyError(f"no gateway on host {inst.host} for {inst.url}")
        out.setdefault(url, []).append(inst)
    return out


def _post(gateway: str, path: str, body: dict[str, Any], token: str | None, timeout: float) -> Any:
    secrets = (token,) if token else ()
    try:
        r = httpx.post(
            f"{gateway}{path}", json=body, headers=bearer(token), timeout=timeout, trust_env=False
        )
    except httpx.HTTPError as e:
        raise DrainError(redact(f"{gateway}{path}: {type(e).__name__}: {e}", secrets)) from None
    try:
        data = r.json()
    except ValueError:
        data = None
    message = ""
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        message = str(data["error"].get("message", ""))
    if r.status_code in REFUSED:
        why = refusal(r.status_code, redact(message, secrets), sent=token is not None, admin=True)
        raise DrainError(f"{gateway}{path} HTTP {r.status_code}: {why}")
    if r.status_code != 200 or not isinstance(data, dict):
        raise DrainError(f"{gateway}{path} HTTP {r.status_code}: {message or r.text[:300]}")
    return data


def drain(
    fleet: Fleet,
    insts: list[Instance],
    token: str | None,
    wait_s: float = 600.0,
    ttl_s: float = 3600.0,
) -> dict[str, Any]:
    """Drain ``insts`` at their gateways; ``{gateway URL: its answer}`` (see
    docs/gateway.md: ``drained``, ``in_flight``, ``upstreams``)."""
    groups = by_gateway(fleet, insts)
    body = {"wait_s": wait_s, "ttl_s": ttl_s}
    return {
        gw: _post(
            gw, "/admin/drain", {"upstreams": [i.url for i in members], **body}, token, wait_s + 30
        )
        for gw, members in groups.items()
    }


def undrain(fleet: Fleet, insts: list[Instance], token: str | None) -> dict[str, Any]:
    """Take ``insts`` back in at their gateways; ``{gateway URL: its answer}``."""
    return {
        gw: _post(gw, "/admin/undrain", {"upstreams": [i.url for i in members]}, token, 30)
        for gw, members in by_gateway(fleet, insts).items()
    }


def _cards(insts: list[Instance]) -> list[list[Instance]]:
    """``insts`` grouped by (host, card), in order."""
    groups: dict[tuple[str, int | None], list[Instance]] = {}
    for inst in insts:
        groups.setdefault((inst.host, inst.card), []).append(inst)
    return list(groups.values())


async def _ready(insts: list[Instance], timeout: float, interval: float) -> list[probes.Probe]:
    async with httpx.AsyncClient(trust_env=False) as http:
        return list(
            await asyncio.gather(*(probes.wait_healthy(http, i, timeout, interval) for i in insts))
        )


def recycle(
    fleet: Fleet,
    insts: list[Instance],
    token: str | None,
    say: Say,
    *,
    docker: Docker | None = None,
    restart: Restart | None = None,
    drain_wait_s: float = 600.0,
    ready_s: float = 900.0,
    force: bool = False,
    poll_s: float = 2.0,
) -> bool:
    """Restart ``insts`` card by card with a drain around each card (see module doc).

    ``restart`` replaces the restart step (default: ``docker restart`` and the start command,
    :func:`fleetctl.ops.restart`). A card whose attempts are still in flight after
    ``drain_wait_s`` is not restarted (undrained, and the recycle stops) unless ``force``.
    """
    if restart is None:
        engine = docker or Docker()

        def restart(inst: Instance) -> None:
            ops.restart(inst, engine, say, wait=None)

    ttl_s = drain_wait_s + ready_s + 60  # a killed recycle leaves nothing drained longer
    for members in _cards(insts):
        card = f"{members[0].host} card {members[0].card}"
        say(f"{card}: draining {len(members)} PaddleX instance(s) ...")
        answers = drain(fleet, members, token, drain_wait_s, ttl_s)
        left = sum(int(a.get("in_flight", 0)) for a in answers.values())
        ok = True
        try:
            if left and not force:
                say(
                    f"{card}: {left} attempt(s) still in flight after {drain_wait_s:g}s; "
                    "not restarted (--force restarts anyway)"
                )
                return False
            say(f"{card}: drained" + (f" ({left} still in flight, --force)" if left else ""))
            for inst in members:
                try:
                    restart(inst)
                except DockerError as e:
                    say(f"{inst.label}: restart failed: {e}")
                    ok = False
            if ok:
                say(f"{card}: waiting up to {ready_s:g}s for /health ...")
                for inst, p in zip(
                    members, asyncio.run(_ready(members, ready_s, poll_s)), strict=True
                ):
                    say(f"  {inst.label} {inst.container}: {p.detail}")
                    ok &= p.ok
        finally:
            undrain(fleet, members, token)
            say(f"{card}: undrained")
        if not ok:
            say(f"{card}: not ready; the recycle stops here (no other card was touched)")
            return False
    return True
