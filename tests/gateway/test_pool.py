"""gateway.dispatch.policies, gateway.dispatch.pool and gateway.dispatch.central_queue: pure asyncio
state, no HTTP."""

from __future__ import annotations

import asyncio
import random

import pytest

from gateway.config.settings import POLICY_NAMES, parse_settings
from gateway.dispatch.policies import make_policy
from gateway.dispatch.pool import UpstreamPool
from gateway.dispatch.upstreams import Lease
from gateway.errors import NoUpstreamAvailable, QueueFull, QueueTimeout
from gateway.observability.metrics import GatewayMetrics
from tests.gateway.conftest import deep_merge


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_pool(n: int = 3, clock: Clock | None = None, **sections):
    data = deep_merge({"upstreams": [f"http://u{i}:1" for i in range(n)]}, sections)
    return UpstreamPool(
        parse_settings(data), GatewayMetrics(), rng=random.Random(7), clock=clock or Clock()
    )


def test_all_policy_names_exist():
    for name in POLICY_NAMES:
        assert make_policy(name).name == name
    with pytest.raises(ValueError):
        make_policy("nope")


def test_round_robin_rotates_in_config_order():
    async def main():
        pool = make_pool(3, load_balance={"mode": "round_robin"})
        seen = []
        for _ in range(6):
            lease = await pool.acquire()
            seen.append(lease.upstream.url)
            pool.release(lease, "success", 0.1)
        return seen

    assert asyncio.run(main()) == ["http://u0:1", "http://u1:1", "http://u2:1"] * 2


def test_least_inflight_and_p2c_prefer_idle():
    async def main(mode):
        pool = make_pool(4, load_balance={"mode": mode})
        held = [await pool.acquire() for _ in range(3)]
        return {lease.upstream.url for lease in held}, pool

    urls, _ = asyncio.run(main("least_inflight"))
    assert len(urls) == 3  # never stacks while an idle upstream exists

    # p2c: the less loaded of two random choices; with one loaded upstream out of 2 it must pick
    # the idle one
    async def p2c():
        pool = make_pool(2, load_balance={"mode": "p2c"})
        first = await pool.acquire()
        second = await pool.acquire()
        return first.upstream is not second.upstream

    assert all(asyncio.run(p2c()) for _ in range(10))


def test_random_spreads():
    async def main():
        pool = make_pool(3, load_balance={"mode": "random"})
        seen = set()
        for _ in range(50):
            lease = await pool.acquire()
            seen.add(lease.upstream.url)
            pool.release(lease, "success", 0.01)
        return seen

    assert len(asyncio.run(main())) == 3


def test_topology_tie_break_prefers_least_loaded_vllm():
    ups = [
        {"url": "http://a1:1", "host": "h", "card": 0, "vllm": "http://v1"},
        {"url": "http://a2:1", "host": "h", "card": 0, "vllm": "http://v1"},
        {"url": "http://b1:1", "host": "h", "card": 1, "vllm": "http://v2"},
        {"url": "http://b2:1", "host": "h", "card": 1, "vllm": "http://v2"},
    ]

    async def main(mode):
        pool = UpstreamPool(
            parse_settings({"upstreams": ups, "load_balance": {"mode": mode}}), rng=random.Random(3)
        )
        first = await pool.acquire()
        second = await pool.acquire()
        return first.upstream.spec.vllm, second.upstream.spec.vllm

    for mode in ("least_inflight", "queue"):
        for _ in range(5):
            v_first, v_second = asyncio.run(main(mode))
            assert v_first != v_second, mode  # second request goes to the idle vLLM


def scanned_places_load(pool: UpstreamPool) -> dict:
    """The in-flight totals per vLLM, card and host, counted from every upstream."""
    load: dict = {}
    for u in pool.upstreams:
        s = u.spec
        for place, named in (
            (("vllm", s.vllm), s.vllm),
            (("card", s.host, s.card), s.card),
            (("host", s.host), s.host),
        ):
            if named is not None and u.in_flight:
                load[place] = load.get(place, 0) + u.in_flight
    return load


def topology(shift: int = 0) -> list[dict]:
    """12 upstreams on 2 hosts, 3 cards and 4 vLLMs (``shift`` moves them to other cards)."""
    return [
        {"url": f"http://i{i}:1", "host": f"h{i % 2}", "card": (i + shift) % 3, "vllm": f"v{i % 4}"}
        for i in range(12)
    ]


async def churn(pool: UpstreamPool, steps: int, seed: int, after_step) -> list[Lease]:
    """Random acquires and releases; ``after_step(step, held)`` after each; the leases held."""
    rng = random.Random(seed)
    held: list[Lease] = []
    for step in range(steps):
        if held and rng.random() < 0.45:
            pool.release(held.pop(rng.randrange(len(held))), "success", 0.01)
        else:
            held.append(await pool.acquire())
        after_step(step, held)
    return held


def test_the_kept_topology_load_is_the_scanned_one():
    async def main() -> None:
        settings = parse_settings({"upstreams": topology(), "load_balance": {"mode": "p2c"}})
        pool = UpstreamPool(settings, rng=random.Random(9))
        await churn(
            pool, 300, 9, lambda _, held: check(pool._places_load() == scanned_places_load(pool))
        )

    asyncio.run(main())


def test_the_kept_topology_load_follows_the_leases_through_reconfigures():
    """A reconfigure moves upstreams to other cards while leases are out: each lease gives back
    the load it added, wherever its upstream is now."""

    def settings(shift: int):
        ups = [*topology(shift), {"url": "http://bare:1"}]
        return parse_settings({"upstreams": ups, "load_balance": {"mode": "least_inflight"}})

    async def main() -> None:
        pool = UpstreamPool(settings(0), rng=random.Random(5))

        def after_step(step: int, held: list[Lease]) -> None:
            if step % 97 == 0:
                pool.reconfigure(settings(step))
            leased: dict = {}
            for lease in held:
                for place in lease.places:
                    leased[place] = leased.get(place, 0) + 1
            check(pool._places_load() == leased)

        for lease in await churn(pool, 400, 5, after_step):
            pool.release(lease, "success", 0.01)
        assert pool._places_load() == {} == scanned_places_load(pool)

    asyncio.run(main())


def check(condition: bool) -> None:
    assert condition


def test_queue_mode_limits_and_fifo():
    async def main():
        pool = make_pool(2, load_balance={"mode": "queue", "queue_max_depth": 10})
        a = await pool.acquire()
        b = await pool.acquire()
        assert a.upstream is not b.upstream
        order = []

        async def waiter(tag):
            lease = await pool.acquire(timeout=5)
            order.append((tag, lease.upstream.url))
            return lease

        tasks = [asyncio.create_task(waiter(i)) for i in range(3)]
        await asyncio.sleep(0.01)
        assert pool.queue_depth == 3
        pool.release(a, "success", 0.1)
        await asyncio.sleep(0.01)
        assert [t for t, _ in order] == [0]
        assert order[0][1] == a.upstream.url  # handed the freed upstream
        pool.release(b, "success", 0.1)
        await asyncio.sleep(0.01)
        assert [t for t, _ in order] == [0, 1]
        leases = [await t for t in tasks[:2]]
        for lease in leases:
            pool.release(lease, "success", 0.1)
        third = await tasks[2]
        assert pool.queue_depth == 0
        return third

    asyncio.run(main())


def test_queue_full_and_timeout_give_retry_after():
    async def main():
        pool = make_pool(1, load_balance={"mode": "queue", "queue_max_depth": 1})
        held = await pool.acquire()
        waiting = asyncio.create_task(pool.acquire(timeout=0.05))
        await asyncio.sleep(0.005)
        with pytest.raises(QueueFull) as full:
            await pool.acquire(timeout=1)
        assert full.value.retry_after >= 1
        with pytest.raises(QueueTimeout) as late:
            await waiting
        assert late.value.retry_after >= 1
        assert pool.queue_depth == 0
        pool.release(held, "success", 0.1)
        assert held.upstream.in_flight == 0
        text = pool.metrics.registry.get_sample_value(
            "gateway_queue_rejected_total", {"reason": "full"}
        )
        assert text == 1

    asyncio.run(main())


def test_retry_jumps_the_queue_and_exclusions_hold():
    async def main():
        pool = make_pool(2, load_balance={"mode": "queue"})
        a = await pool.acquire()
        b = await pool.acquire()
        normal = asyncio.create_task(pool.acquire(timeout=5))
        await asyncio.sleep(0.005)
        retry = asyncio.create_task(pool.acquire(exclude={a.upstream.url}, timeout=5, retry=True))
        await asyncio.sleep(0.005)
        pool.release(a, "server_error", 0.1)  # retry may not take a (excluded): normal gets it
        got_normal = await asyncio.wait_for(normal, 1)
        assert got_normal.upstream is a.upstream
        assert not retry.done()
        pool.release(b, "success", 0.1)
        got_retry = await asyncio.wait_for(retry, 1)
        assert got_retry.upstream is b.upstream
        with pytest.raises(NoUpstreamAvailable):
            await pool.acquire(exclude={a.upstream.url, b.upstream.url})

    asyncio.run(main())


def test_cancelled_waiter_leaves_no_trace():
    async def main():
        pool = make_pool(1, load_balance={"mode": "queue"})
        held = await pool.acquire()
        task = asyncio.create_task(pool.acquire(timeout=5))
        await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert pool.queue_depth == 0
        pool.release(held, "success", 0.1)
        assert pool.upstreams[0].in_flight == 0

    asyncio.run(main())


def test_passive_ejection_backoff_and_cap():
    clock = Clock()
    pool = make_pool(
        4,
        clock,
        outlier={
            "consecutive_failures": 2,
            "base_ejection_s": 10,
            "max_ejection_s": 25,
            "max_ejection_percent": 50,
        },
    )

    def fail(u, times=2):
        for _ in range(times):
            u.in_flight += 1
            lease = Lease(upstream=u, started=clock.now)
            pool.release(lease, "server_error", 0.1, "HTTP 500")

    u0, u1, u2, _ = pool.upstreams
    fail(u0, 1)
    assert u0.state(clock.now) == "healthy"
    fail(u0, 1)
    assert u0.state(clock.now) == "ejected" and u0.ejections == 1
    assert u0.ejected_until - clock.now == 10
    clock.now += 10.5
    assert u0.state(clock.now) == "healthy"
    fail(u0)  # second ejection: 2 x base
    assert u0.ejected_until - clock.now == 20
    clock.now += 21
    fail(u0)  # third: capped at max_ejection_s
    assert u0.ejected_until - clock.now == 25
    # a reset (keep-alive drop) and a 4xx do not count towards ejection
    for outcome in ("reset", "client_error", "reset"):
        u1.in_flight += 1
        pool.release(Lease(upstream=u1, started=clock.now), outcome, 0.1)
    assert u1.consecutive_failures == 0 and u1.state(clock.now) == "healthy"
    # max_ejection_percent 50 of 4 = 2: the third failing upstream is not ejected
    fail(u1)
    fail(u2)
    assert u1.state(clock.now) == "ejected"
    assert u2.state(clock.now) == "healthy"
    assert (
        pool.metrics.registry.get_sample_value(
            "gateway_upstream_ejections_total", {"upstream": u0.url}
        )
        == 3
    )


def test_never_eject_everything():
    clock = Clock()
    pool = make_pool(1, clock, outlier={"consecutive_failures": 1, "max_ejection_percent": 100})
    u = pool.upstreams[0]
    for _ in range(3):
        u.in_flight += 1
        pool.release(Lease(upstream=u, started=clock.now), "server_error", 0.1)
    assert u.state(clock.now) == "healthy"
    assert pool.max_ejected() == 0


def test_panic_ignores_health():
    clock = Clock()
    pool = make_pool(4, clock, health={"unhealthy_threshold": 1})
    for u in pool.upstreams[:2]:
        pool.record_probe(u, False, "HTTP 503")
    eligible, panic = pool.eligible()
    assert not panic and len(eligible) == 2  # 50% healthy: at the threshold, not below
    pool.record_probe(pool.upstreams[2], False, "down")
    eligible, panic = pool.eligible()
    assert panic and len(eligible) == 4  # below 50%: spread over all
    assert pool.snapshot()["panic"] is True


def test_probe_thresholds():
    pool = make_pool(1, health={"unhealthy_threshold": 2, "healthy_threshold": 2})
    u = pool.upstreams[0]
    pool.record_probe(u, True)
    pool.record_probe(u, False, "x")
    assert u.probe_healthy  # one failure is below the threshold
    pool.record_probe(u, False, "x")
    assert not u.probe_healthy and u.last_error == "health probe: x"
    pool.record_probe(u, True)
    assert not u.probe_healthy
    pool.record_probe(u, True)
    assert u.probe_healthy
    fresh = make_pool(1, health={"unhealthy_threshold": 5})
    fresh.record_probe(fresh.upstreams[0], False, "refused")
    assert not fresh.upstreams[0].probe_healthy  # the first probe decides at once


def test_retry_budget():
    pool = make_pool(3, retry_budget={"budget_percent": 50, "min_retry_concurrency": 1})
    assert pool.retry_allowance() == 1
    for _ in range(6):
        pool.begin_request()
    assert pool.retry_allowance() == 3
    assert all(pool.try_begin_retry() for _ in range(3))
    assert not pool.try_begin_retry()
    pool.end_retry()
    assert pool.try_begin_retry()
    reg = pool.metrics.registry
    assert reg.get_sample_value("gateway_retry_overflow_total") == 1
    assert reg.get_sample_value("gateway_retries_total") == 4


def test_reconfigure_keeps_state_for_known_urls():
    async def main():
        pool = make_pool(2, load_balance={"mode": "queue"})
        held = await pool.acquire()
        url = held.upstream.url
        held.upstream.ejections = 2
        new = parse_settings(
            {"upstreams": [url, "http://new:1"], "load_balance": {"mode": "least_inflight"}}
        )
        pool.reconfigure(new)
        assert pool.mode == "least_inflight"
        kept = pool.get(url)
        assert kept is held.upstream and kept.in_flight == 1 and kept.ejections == 2
        assert pool.get("http://new:1").in_flight == 0
        assert len(pool.upstreams) == 2
        pool.release(held, "success", 0.1)
        assert kept.in_flight == 0

    asyncio.run(main())
