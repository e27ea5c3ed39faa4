"""``fleetctl top``: the status page in a terminal, redrawn every few seconds (rich).

It reads the gateway's ``GET /status/api/state`` with the admin token, the document the status
page draws, and shows hosts -> cards -> vLLM -> PaddleX with their state, in-flight, latency
p50/p99 and errors, the queue by priority and token, the running jobs and the gateway's CPU
and memory.

Usage::

    doc = fetch_state(http, "http://127.0.0.1:9101", token)
    console.print(render(doc, previous=None))
    run(url, token, interval=2.0)          # until Ctrl-C
"""

from __future__ import annotations

import time
from typing import Any

import httpx
from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from fleetctl.auth import bearer

STATE_STYLE = {
    "healthy": "green",
    "unhealthy": "bold red",
    "down": "bold red",
    "ejected": "yellow",
    "draining": "blue",
    "drained": "blue",
}


class TopError(RuntimeError):
    """The gateway did not give its state (the message says why)."""


def fetch_state(http: httpx.Client, gateway_url: str, token: str | None) -> dict[str, Any]:
    try:
        answer = http.get(f"{gateway_url.rstrip('/')}/status/api/state", headers=bearer(token))
    except httpx.HTTPError as exc:
        raise TopError(f"gateway {gateway_url}: {type(exc).__name__}: {exc}") from None
    if answer.status_code in (401, 403):
        raise TopError(
            f"gateway {gateway_url} refused ({answer.status_code}): fleetctl top needs an admin "
            "token (--admin-token or $PADDLEOCR_FLEET_ADMIN_TOKEN)"
        )
    if answer.status_code != 200:
        raise TopError(f"gateway {gateway_url}: HTTP {answer.status_code}: {answer.text[:200]}")
    return answer.json()


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1000:.1f}s" if value >= 1000 else f"{value:.0f}ms"


def _state(state: str) -> Text:
    return Text(state, style=STATE_STYLE.get(state, "dim"))


def _bytes(value: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def fleet_table(doc: dict[str, Any]) -> Table:
    """One row per PaddleX, grouped by host, card and vLLM (the vLLM named on its first row)."""
    table = Table(title="fleet", header_style="bold", expand=False)
    for column in ("host", "card", "vLLM", "vLLM state", "run/wait/kv", "PaddleX", "state"):
        table.add_column(column)
    for column in ("in flight", "p50", "p99", "errors"):
        table.add_column(column, justify="right")
    ordered = sorted(
        doc["upstreams"],
        key=lambda u: (str(u.get("host")), str(u.get("card")), str(u.get("vllm")), u["url"]),
    )
    last_vllm = None
    for u in ordered:
        vllm_url = u.get("vllm")
        first = vllm_url != last_vllm
        last_vllm = vllm_url
        v = doc["vllm"].get(vllm_url, {"state": "unknown"}) if vllm_url else {"state": "-"}
        load = ""
        if first and v.get("state") == "healthy":
            kv = round(100 * v.get("kv_cache", 0))
            load = f"{v.get('running', 0):.0f}/{v.get('waiting', 0):.0f}/{kv}%"
        requests = u.get("requests") or {}
        errors = sum(requests.get(k, 0) for k in ("error", "timeout"))
        latency = u.get("latency_ms") or {}
        table.add_row(
            escape(str(u.get("host") or "-")) if first else "",
            escape(str(u.get("card") if u.get("card") is not None else "-")) if first else "",
            escape(str(vllm_url or "-")) if first else "",
            _state(str(v.get("state"))) if first else Text(""),
            load,
            escape(u.get("container") or u["url"]),
            _state(str(u.get("state"))),
            str(u.get("in_flight", 0)),
            _ms(latency.get("p50")),
            _ms(latency.get("p99")),
            str(errors) if errors else "",
            style=None if u.get("state") == "healthy" else "",
        )
    return table


def render(doc: dict[str, Any], previous: dict[str, Any] | None = None) -> Group:
    """One frame: a summary line, the fleet table, the queue and the jobs."""
    states: dict[str, int] = {}
    for u in doc["upstreams"]:
        states[u["state"]] = states.get(u["state"], 0) + 1
    g = doc["gateway"]
    cpu = ""
    if previous is not None and doc["time"] > previous["time"]:
        used = g["cpu_seconds"] - previous["gateway"]["cpu_seconds"]
        cpu = f"CPU {100 * used / (doc['time'] - previous['time']):.0f}%  "
    summary = ", ".join(f"{n} {s}" for s, n in sorted(states.items())) or "no upstreams"
    head = Text.assemble(
        ("paddleocr-fleet  ", "bold"),
        summary,
        f"   gateway: {cpu}RSS {_bytes(g['rss_bytes'])} ({g['processes']} processes)",
        ("   PANIC" if doc.get("panic") else "", "bold red"),
    )
    queue = doc["queue"]
    waiting = ", ".join(f"{w['priority']}/{w['token']}: {w['count']}" for w in queue["waiting"])
    lines = [head, fleet_table(doc), Text(f"queue: {queue['depth']} waiting  {waiting}")]
    jobs = doc.get("jobs")
    if jobs:
        counts = ", ".join(f"{k} {v}" for k, v in jobs["jobs"].items())
        lines.append(
            Text(
                f"jobs: {counts}; pages waiting {jobs['pages_waiting']}, oldest "
                f"{jobs['oldest_waiting_s']:.0f}s; disk free {_bytes(jobs['disk_free_bytes'])}"
            )
        )
        for job in jobs["running"][:10]:
            lines.append(Text(f"  {job['id']} {job['tenant'] or '-'} {job['done']}/{job['pages']}"))
    return Group(*lines)


def run(
    gateway_url: str,
    token: str | None,
    interval: float = 2.0,
    once: bool = False,
    console: Console | None = None,
    timeout: float = 5.0,
) -> None:
    """Draw once, or redraw every `interval` seconds until interrupted."""
    console = console or Console()
    with httpx.Client(timeout=timeout, trust_env=False) as http:
        doc = fetch_state(http, gateway_url, token)
        if once:
            console.print(render(doc))
            return
        previous = None
        with Live(render(doc), console=console, refresh_per_second=4, screen=False) as live:
            while True:
                time.sleep(interval)
                previous, doc = doc, fetch_state(http, gateway_url, token)
                live.update(render(doc, previous))
