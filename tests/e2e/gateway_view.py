"""What each worker of a gateway sees: ``/upstreams`` as every one of them answers it.

A gateway with several workers answers ``/upstreams`` from whichever worker accepted the
connection, and each worker probes the upstreams on its own schedule, so after a change one
worker may see it a probe interval or two (``health.interval_s`` x ``healthy_threshold``) before
another. A test that stops at the first answer it likes can then read the next answer from a
worker that has not caught up; :func:`wait_for_every_worker` waits for the latest answer of each.

Usage::

    wait_for_every_worker(url, ADMIN, lambda states: set(states.values()) == {"healthy"})
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx


def upstream_states(doc: Mapping[str, Any]) -> dict[str, str]:
    """URL -> state of every upstream in one ``/upstreams`` answer."""
    return {u["url"]: u["state"] for u in doc["upstreams"]}


def wait_for_every_worker(
    url: str,
    headers: Mapping[str, str],
    done: Callable[[dict[str, str]], bool],
    timeout_s: float = 60,
    explain: Callable[[], str] = str,
) -> dict[int, dict[str, Any]]:
    """Poll ``url``/upstreams until the latest answer of every worker satisfies ``done`` (its
    upstreams' states); returns those answers by worker. Fails after ``timeout_s`` naming what
    each worker saw last, followed by ``explain()`` (e.g. the gateway's logs)."""
    latest: dict[int, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout_s
    while True:
        answer = httpx.get(f"{url}/upstreams", headers=dict(headers), timeout=10)
        assert answer.status_code == 200, answer.text
        doc = answer.json()
        workers = doc.get("workers") or {"count": 1, "this": 0}
        latest[workers["this"]] = doc
        if len(latest) == workers["count"] and all(
            done(upstream_states(d)) for d in latest.values()
        ):
            return latest
        if time.monotonic() > deadline:
            seen = {w: d["upstreams"] for w, d in sorted(latest.items())}
            raise AssertionError(
                f"after {timeout_s} s the gateway's workers see {json.dumps(seen, indent=1)}"
                + explain()
            )
        time.sleep(0.2)
