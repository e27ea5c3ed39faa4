"""gateway.dispatch.outlier and the speed-aware choice of ``queue`` mode: pure pool state, no
HTTP."""

from __future__ import annotations

import asyncio

from tests.gateway.test_pool import Clock, make_pool


def test_connect_error_marks_down_until_one_probe_passes():
    clock = Clock()
    pool = make_pool(4, clock, health={"healthy_threshold": 3})
    u = pool.upstreams[0]
    for other in pool.upstreams:
        pool.record_probe(other, True)

    async def main() -> None:
        lease = pool._lease(u)
        pool.release(lease, "connect_error", 0.001, "connect error: refused")
        assert u.state(clock.now) == "unhealthy" and u.ejections == 0
        for _ in range(6):  # never dispatched again while down
            other = await pool.acquire(timeout=1)
            assert other.upstream is not u
            pool.release(other, "success", 0.1)
        pool.record_probe(u, False, "ConnectError")
        assert not u.probe_healthy
        pool.record_probe(u, True)  # one passing probe, not healthy_threshold
        assert u.state(clock.now) == "healthy"

    asyncio.run(main())
    # an ordinary probe failure still needs healthy_threshold passes to come back
    pool.record_probe(u, False, "HTTP 503")
    pool.record_probe(u, False, "HTTP 503")
    pool.record_probe(u, False, "HTTP 503")
    pool.record_probe(u, True)
    assert not u.probe_healthy


def test_connect_error_without_health_checks_ejects_within_the_cap():
    clock = Clock()
    pool = make_pool(4, clock, health={"enabled": False}, outlier={"max_ejection_percent": 25})
    u0, u1 = pool.upstreams[:2]
    for u in (u0, u1):
        pool.mark_down(u, "connect error")
    assert u0.state(clock.now) == "ejected" and u0.ejections == 1
    assert u1.state(clock.now) == "healthy"  # 25 % of 4: one at most


def test_panic_skips_upstreams_whose_port_refused():
    """Below the panic threshold health is ignored, but not a refused connect: those would
    only turn requests into errors."""
    pool = make_pool(4)
    for u in pool.upstreams[:3]:
        pool.mark_down(u, "connect error")
    eligible, panic = pool.eligible()
    assert panic and eligible == pool.upstreams[3:]
    pool.mark_down(pool.upstreams[3], "connect error")
    assert pool.eligible() == ([], True)  # no capacity: requests wait
    pool.record_probe(pool.upstreams[0], False, "HTTP 503", reachable=True)
    assert pool.eligible() == ([pool.upstreams[0]], True)  # it answers: panic may use it


def test_probe_timeouts_with_work_in_flight_rescue_the_attempts():
    pool = make_pool(3, health={"unhealthy_threshold": 3, "stuck_after_timeouts": 2})
    u = pool.upstreams[0]
    pool.record_probe(u, True)
    # no work in flight: a timeout is just a failed probe
    assert pool.record_probe(u, False, "timeout", timed_out=True) is False
    assert u.probe_healthy
    pool.record_probe(u, True)
    lease = pool._lease(u)
    cancelled: list[str] = []
    lease.cancel = lambda: cancelled.append("x")
    assert pool.record_probe(u, False, "timeout", timed_out=True) is True  # probe again now
    assert u.probe_healthy and not cancelled
    assert pool.record_probe(u, False, "timeout", timed_out=True) is False
    assert not u.probe_healthy  # before unhealthy_threshold: stuck
    assert cancelled == ["x"] and lease.rescued and "is stuck" in lease.rescued
    pool.release(lease, "timeout", 1.0, lease.rescued)
    assert not u.leases and u.in_flight == 0


def test_queue_prefers_the_faster_idle_upstream_then_topology():
    def spec(i: int, vllm: str) -> dict[str, object]:
        return {"url": f"http://u{i}:1", "host": "h", "card": 0, "vllm": vllm}

    pool = make_pool(
        3, load_balance={"mode": "queue", "upstream_concurrency": 1, "topology_aware": True}
    )
    pool.reconfigure(
        pool.settings.model_copy(
            update={
                "upstreams": [
                    pool.settings.upstreams[0].model_validate(spec(0, "v1")),
                    pool.settings.upstreams[0].model_validate(spec(1, "v1")),
                    pool.settings.upstreams[0].model_validate(spec(2, "v2")),
                ]
            }
        )
    )
    u0, u1, u2 = pool.upstreams

    def served(lease_upstream, seconds: float) -> None:
        lease = pool._lease(lease_upstream)
        pool.release(lease, "success", seconds)

    served(u0, 0.5)
    served(u1, 0.6)
    served(u2, 2.5)  # 4-5x slower: a slower speed class

    async def pick() -> str:
        lease = await pool.acquire()
        pool.release(lease, "cancelled", 0.0)
        return lease.upstream.url

    assert {asyncio.run(pick()) for _ in range(20)} <= {u0.url, u1.url}
    # equal speed class: the topology tie-break decides (u0's vLLM is busy with u1)
    held = pool._lease(u1)
    u2.service_s = 0.55
    assert asyncio.run(pick()) == u2.url
    pool.release(held, "cancelled", 0.0)


def test_bypass_calls_do_not_count_as_service_time():
    pool = make_pool(1, load_balance={"mode": "queue"})
    u = pool.upstreams[0]

    async def main() -> None:
        lease = await pool.acquire(bypass_limit=True)
        pool.release(lease, "success", 0.001)
        assert u.service_s is None
        lease = await pool.acquire()
        pool.release(lease, "success", 1.5)
        assert u.service_s == 1.5

    asyncio.run(main())


def test_a_slow_upstream_gets_work_again_once_its_speed_is_forgotten():
    clock = Clock()
    pool = make_pool(3, clock, load_balance={"mode": "queue", "speed_memory_s": 60})
    fast0, fast1, slow = pool.upstreams

    def served(u, seconds: float) -> None:
        pool.release(pool._lease(u), "success", seconds)

    async def pick() -> str:
        lease = await pool.acquire()
        pool.release(lease, "cancelled", 0.0)
        return lease.upstream.url

    served(fast0, 0.5)
    served(fast1, 0.5)
    served(slow, 4.0)
    assert slow.url not in {asyncio.run(pick()) for _ in range(30)}
    clock.now += 61  # no new sample of anyone for longer than speed_memory_s
    assert slow.url in {asyncio.run(pick()) for _ in range(30)}
    served(slow, 0.6)  # recovered: its old 4 s sample no longer counts
    assert slow.service_s == 0.6
    assert pool.snapshot()["upstreams"][2]["service_ms"] == 600.0
