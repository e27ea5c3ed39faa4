"""The two :class:`gateway.shared.counters.Counters`: one process's and the workers' shared board
behave the same through the interface the pool and access control use."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gateway.shared import occupancy
from gateway.shared.counters import Counters, LocalCounters, SharedCounters
from gateway.shared.occupancy import Board


def _local(tmp_path: Path) -> Counters:
    return LocalCounters()


def _shared(tmp_path: Path) -> Counters:
    board = Board(2, tmp_path)
    board.set_pid(0, 1000)
    return SharedCounters(board.seat(0))


@pytest.fixture(params=[_local, _shared], ids=["local", "shared"])
def counters(request: pytest.FixtureRequest, tmp_path: Path) -> Counters:
    make: Callable[[Path], Counters] = request.param
    return make(tmp_path)


def test_upstream_counts_drains_tokens_and_buckets_behave_alike(counters: Counters) -> None:
    a, b = counters.upstream_slot("http://a:1"), counters.upstream_slot("http://b:1")
    assert a != b and counters.upstream_slot("http://a:1") == a  # stable per URL
    read = counters.place_loads({"card0": [a, b], "card1": [b]})
    assert read() == []  # nothing in flight anywhere
    with counters.lock(), counters.lock():  # re-entrant
        counters.add(a, 1, ("card0",))
        counters.add(b, 2, ("card0", "card1"))
    assert (counters.in_flight(a), counters.in_flight(b)) == (1, 2)
    assert read() == [3, 2, 0]  # each place, then the 0 of "no place"
    counters.add(b, -2, ("card0", "card1"))
    counters.add(a, -1, ("card0",))
    assert (counters.in_flight(a), counters.in_flight(b), read()) == (0, 0, [])

    assert not counters.drains_active() and counters.drain_until(a) == 0.0
    counters.set_drain(a, 123.5)
    assert counters.drains_active() and counters.drain_until(a) == 123.5
    assert counters.drain_until(b) == 0.0
    counters.set_drain(a, 0.0)
    assert not counters.drains_active() and counters.drain_until(a) == 0.0

    assert counters.token_in_flight("team") == 0
    counters.token_add("team", 1)
    counters.token_add("team", 1)
    counters.token_add("other", 1)
    counters.token_add("team", -1)
    assert (counters.token_in_flight("team"), counters.token_in_flight("other")) == (1, 1)
    tokens, _ = counters.bucket("team")
    assert tokens < 0  # never used: starts full
    counters.set_bucket("team", 2.5, 10.0)
    assert counters.bucket("team") == (2.5, 10.0)
    assert counters.bucket("other")[0] < 0


def test_shared_counters_sum_every_worker(tmp_path: Path) -> None:
    board = Board(2, tmp_path)
    one, two = SharedCounters(board.seat(0)), SharedCounters(board.seat(1))
    slot = one.upstream_slot("http://a:1")
    assert two.upstream_slot("http://a:1") == slot
    one.add(slot, 1)
    two.add(slot, 2)
    one.token_add("team", 1)
    two.token_add("team", 1)
    two.set_drain(slot, 50.0)
    assert one.in_flight(slot) == 3 and one.token_in_flight("team") == 2
    assert one.drain_until(slot) == 50.0 and one.workers() is not None
    board.clear(1)  # worker 1 died: its counts go, the drain stays
    assert one.in_flight(slot) == 1 and one.token_in_flight("team") == 1
    assert one.drain_until(slot) == 50.0


def test_a_token_the_full_table_has_no_slot_for_is_counted_in_this_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(occupancy, "MAX_TOKENS", 1)
    board = Board(2, tmp_path)
    one, two = SharedCounters(board.seat(0)), SharedCounters(board.seat(1))
    one.token_add("first", 1)
    one.token_add("second", 1)  # no slot left: this worker's own count
    two.token_add("second", 1)
    assert one.token_in_flight("first") == two.token_in_flight("first") == 1
    assert one.token_in_flight("second") == two.token_in_flight("second") == 1
