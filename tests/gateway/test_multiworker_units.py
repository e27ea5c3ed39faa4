"""The shared board and the cross-worker dispatch, in one process: two pools on two seats of
one :class:`gateway.shared.occupancy.Board` stand for two workers (their own lock descriptions and
wake-ups, one event loop)."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from gateway.access.control import Access, Principal
from gateway.config.settings import parse_settings
from gateway.dispatch.pool import UpstreamPool
from gateway.errors import AccessError
from gateway.observability.worker_metrics import label_line, merge_expositions
from gateway.shared import occupancy
from gateway.shared.occupancy import Board, SlotsExhausted


def _settings(urls: list[str], **lb: object):
    return parse_settings(
        {
            "upstreams": urls,
            "load_balance": {"mode": "queue", **lb},
            "health": {"enabled": False},
        }
    )


def _board(tmp_path: Path, workers: int = 2) -> Board:
    board = Board(workers, tmp_path)
    for index in range(workers):
        board.set_pid(index, 1000 + index)  # "running"
    return board


def test_slots_are_stable_per_url_across_workers(tmp_path: Path) -> None:
    board = _board(tmp_path)
    a, b = board.seat(0), board.seat(1)
    assert [a.upstream_slot(u) for u in ("http://x:1", "http://y:1")] == [0, 1]
    assert [b.upstream_slot(u) for u in ("http://y:1", "http://z:1", "http://x:1")] == [1, 2, 0]
    assert a.token_slot("team-a") == b.token_slot("team-a") == 0
    a.add(1, 1)
    b.add(1, 2)
    assert a.in_flight(1) == b.in_flight(1) == 3
    board.clear(1)  # worker 1 died: its attempts no longer count
    assert a.in_flight(1) == 1


def test_a_full_table_names_the_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(occupancy, "MAX_UPSTREAMS", 2)
    board = _board(tmp_path)
    seat = board.seat(0)
    seat.upstream_slot("http://a:1")
    seat.upstream_slot("http://b:1")
    with pytest.raises(SlotsExhausted, match="holds 2 distinct upstream URLs; 'http://c:1'"):
        seat.upstream_slot("http://c:1")
    # the pool leaves such an upstream out instead of sharing a slot
    pool = UpstreamPool(_settings(["http://a:1", "http://c:1"]), seat=seat)
    assert [u.url for u in pool.upstreams] == ["http://a:1"]


def _pools(tmp_path: Path, urls: list[str], listen: tuple[bool, bool] = (True, True)):
    board = _board(tmp_path)
    pools = []
    loop = asyncio.get_running_loop()
    for index, wakes in enumerate(listen):
        seat = board.seat(index)
        pool = UpstreamPool(_settings(urls), seat=seat)
        if wakes:
            seat.listen(loop, pool.kick)
        pools.append(pool)
    return pools


def test_a_free_upstream_goes_to_the_older_waiter_of_another_worker(tmp_path: Path) -> None:
    async def scenario() -> list[str]:
        a, b = _pools(tmp_path, ["http://u:1"])
        order: list[str] = []
        busy = await a.acquire()

        async def wait(pool: UpstreamPool, name: str) -> None:
            lease = await pool.acquire(timeout=10)
            order.append(name)
            await asyncio.sleep(0.01)
            pool.release(lease, "success", 0.01)

        older = asyncio.create_task(wait(b, "b-older"))
        await asyncio.sleep(0.005)
        newer = asyncio.create_task(wait(a, "a-newer"))
        await asyncio.sleep(0.005)
        assert b.queue_depth == a.queue_depth == 2  # both see both waiters
        a.release(busy, "success", 0.1)  # a frees the upstream; its own waiter is newer
        await asyncio.wait_for(asyncio.gather(older, newer), 10)
        return order

    assert asyncio.run(scenario()) == ["b-older", "a-newer"]


def test_a_request_of_one_worker_goes_before_a_job_slice_of_another(tmp_path: Path) -> None:
    async def scenario() -> tuple[list[str], int]:
        a, b = _pools(tmp_path, ["http://u:1"])
        order: list[str] = []
        busy = await a.acquire()

        async def wait(pool: UpstreamPool, name: str, background: bool) -> None:
            lease = await pool.acquire(timeout=10, background=background)
            order.append(name)
            await asyncio.sleep(0.01)
            pool.release(lease, "success", 0.01)

        slice_ = asyncio.create_task(wait(a, "a-slice", True))
        await asyncio.sleep(0.005)
        request = asyncio.create_task(wait(b, "b-request", False))
        await asyncio.sleep(0.005)
        depth = a.queue_depth  # job slices do not count towards queue_max_depth
        a.release(busy, "success", 0.1)
        await asyncio.wait_for(asyncio.gather(slice_, request), 10)
        return order, depth

    assert asyncio.run(scenario()) == (["b-request", "a-slice"], 1)


def test_an_unresponsive_worker_does_not_hold_a_free_upstream(tmp_path: Path) -> None:
    async def scenario() -> tuple[bool, bool]:
        a, b = _pools(tmp_path, ["http://u:1"], listen=(True, False))  # b never wakes
        busy = await a.acquire()
        stuck = asyncio.create_task(b.acquire(timeout=10))
        await asyncio.sleep(0.005)
        mine = asyncio.create_task(a.acquire(timeout=10))
        await asyncio.sleep(0.005)
        a.release(busy, "success", 0.1)
        lease = await asyncio.wait_for(mine, 5)  # after the deferral ran out
        served = lease.upstream.url == "http://u:1"
        pending = not stuck.done()
        stuck.cancel()
        return served, pending

    assert asyncio.run(scenario()) == (True, True)


def test_two_workers_never_exceed_the_concurrency_limit(tmp_path: Path) -> None:
    urls = [f"http://u:{port}" for port in range(1, 5)]

    async def scenario() -> tuple[int, int]:
        pools = _pools(tmp_path, urls)
        rng = random.Random(7)
        held: dict[str, int] = dict.fromkeys(urls, 0)
        worst = 0
        done = 0

        async def client(pool: UpstreamPool) -> None:
            nonlocal worst, done
            for _ in range(15):
                lease = await pool.acquire(timeout=30, retry=rng.random() < 0.2)
                held[lease.upstream.url] += 1
                worst = max(worst, held[lease.upstream.url])
                await asyncio.sleep(rng.random() * 0.004)
                held[lease.upstream.url] -= 1
                pool.release(lease, "success", 0.002)
                done += 1

        await asyncio.wait_for(
            asyncio.gather(*(client(pools[n % 2]) for n in range(12))), timeout=60
        )
        return worst, done

    assert asyncio.run(scenario()) == (1, 180)


def test_token_quotas_count_every_worker(tmp_path: Path) -> None:
    board = _board(tmp_path)
    auth = parse_settings(
        {
            "auth": {
                "tokens": [
                    {"name": "two", "sha256": "a" * 64, "max_in_flight": 2},
                    {"name": "slow", "sha256": "b" * 64, "rate_per_s": 0.5},
                ]
            }
        }
    ).auth
    now = [100.0]
    a = Access(auth, clock=lambda: now[0], seat=board.seat(0))
    b = Access(auth, clock=lambda: now[0], seat=board.seat(1))
    two = Principal("two", False, auth.tokens[0])
    a.admit(two)
    b.admit(two)
    with pytest.raises(AccessError, match="has 2 requests in flight, its limit is 2"):
        a.admit(two)
    b.release(two)
    a.admit(two)  # a place came free in the other worker
    assert a.in_flight()["two"] == 2 and b.in_flight()["two"] == 0
    slow = Principal("slow", False, auth.tokens[1])
    a.admit(slow)
    with pytest.raises(AccessError, match=r"over its rate of 0\.5 requests/s") as refused:
        b.admit(slow)
    assert refused.value.headers["Retry-After"] == "2"
    now[0] += 2.0
    b.admit(slow)


def test_label_line_adds_the_worker() -> None:
    assert label_line('a_total{x="1 2"} 3.0', 1) == 'a_total{worker="1",x="1 2"} 3.0'
    assert label_line("a_total 3.0", 0) == 'a_total{worker="0"} 3.0'
    merged = merge_expositions(
        [
            (0, "# HELP a doc\n# TYPE a gauge\na 1.0\n"),
            (1, "# HELP a doc\n# TYPE a gauge\na 2.0\n# HELP b doc\n# TYPE b gauge\nb 5.0\n"),
        ]
    )
    assert merged.splitlines() == [
        "# HELP a doc",
        "# TYPE a gauge",
        'a{worker="0"} 1.0',
        'a{worker="1"} 2.0',
        "# HELP b doc",
        "# TYPE b gauge",
        'b{worker="1"} 5.0',
    ]


def test_a_token_beyond_the_table_is_counted_per_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(occupancy, "MAX_TOKENS", 1)
    board = _board(tmp_path)
    specs = [{"name": n, "sha256": c * 64, "max_in_flight": 1} for n, c in (("a", "a"), ("b", "b"))]
    auth = parse_settings({"auth": {"tokens": specs}}).auth
    one, other = Access(auth, seat=board.seat(0)), Access(auth, seat=board.seat(1))
    a, b = (Principal(s.name, False, s) for s in auth.tokens)
    one.admit(a)  # "a" has the one slot: shared
    with pytest.raises(AccessError):
        other.admit(a)
    one.admit(b)  # no slot left for "b": each worker counts it alone
    other.admit(b)
    with pytest.raises(AccessError):
        one.admit(b)
    one.release(a)
    other.admit(a)
