"""One measured change: clients and the capacity sampler running before, during and after it.

    record = measure(fleet, "a", all_at_once=False, clients=8, warmup_s=15, settle_s=5)

The load runs `warmup_s` before the change (the "before" of p99) and `settle_s` after it; the
record holds `summarize`'s figures, the change's duration, the floor the target allows, and the
capacity over time (seconds since the change began, instances serving) for the plot.
"""

from __future__ import annotations

import time
from typing import Any

from bench.rollout.fleet import BenchFleet
from bench.rollout.load import CapacitySampler, ClientLoad, summarize

CLIENT_TIMEOUT_S = 180.0
"""Longer than the gateway's queue wait (load_balance.queue_timeout_s, 120 s by default): a
request that finds no capacity waits at the gateway, and its answer is what the client sees."""


def measure(
    fleet: BenchFleet,
    scenario: str,
    all_at_once: bool,
    clients: int,
    warmup_s: float,
    settle_s: float,
) -> dict[str, Any]:
    load = ClientLoad(fleet.url, clients=clients, headers=fleet.user, timeout_s=CLIENT_TIMEOUT_S)
    with load, CapacitySampler(fleet.url, headers=fleet.admin) as capacity:
        time.sleep(warmup_s)
        began = load.now()
        took = fleet.apply(scenario, all_at_once)
        ended = load.now()
        time.sleep(settle_s)
    shape = fleet.shape
    unavailable = shape.cards if all_at_once else 1
    summary = summarize(load.results, capacity.samples, (began, ended))
    return {
        "cards": shape.cards,
        "scenario": scenario,
        "mode": "all-at-once" if all_at_once else "rolling",
        "duration_s": took,
        "per_card": shape.per_card,
        "target_floor": (shape.cards - unavailable) * shape.per_card,
        "sampler_errors": capacity.errors,
        **summary,
        "capacity": [(round(t - began, 2), serving) for t, serving, _, _ in capacity.samples],
    }
