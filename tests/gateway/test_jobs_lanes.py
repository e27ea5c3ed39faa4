"""The store's threads (gateway.jobs.lanes): a client's write before the runner's, reads never
behind a write, and nothing queued lost when the store closes."""

from __future__ import annotations

import asyncio
import threading

import pytest

from gateway.jobs.lanes import Lanes


def test_an_urgent_write_goes_before_the_background_writes_queued_before_it() -> None:
    async def scenario() -> list[str]:
        lanes = Lanes(readers=2)
        order: list[str] = []
        busy, release = threading.Event(), threading.Event()

        def held() -> None:  # a long write in progress (a commit waiting for the disk)
            busy.set()
            release.wait(10)
            order.append("held")

        first = asyncio.ensure_future(lanes.write(held))
        await asyncio.to_thread(busy.wait, 10)
        queued = [asyncio.ensure_future(lanes.write(order.append, f"claim-{i}")) for i in range(3)]
        submit = asyncio.ensure_future(lanes.write(order.append, "submit", urgent=True))
        await asyncio.sleep(0.05)
        release.set()
        await asyncio.gather(first, *queued, submit)
        lanes.close()
        return order

    assert asyncio.run(scenario()) == ["held", "submit", "claim-0", "claim-1", "claim-2"]


def test_a_read_does_not_wait_for_a_write_in_progress() -> None:
    async def scenario() -> str:
        lanes = Lanes(readers=2)
        release = threading.Event()
        write = asyncio.ensure_future(lanes.write(release.wait, 10))
        answer = await asyncio.wait_for(lanes.read(str.upper, "status"), 5)
        release.set()
        assert await write is True
        lanes.close()
        return answer

    assert asyncio.run(scenario()) == "STATUS"


def test_errors_reach_the_caller_and_the_writer_goes_on() -> None:
    async def scenario() -> int:
        lanes = Lanes(readers=1)
        with pytest.raises(ZeroDivisionError):
            await lanes.write(divmod, 1, 0)
        answer = await lanes.write(sum, [1, 2, 3])
        lanes.close()
        return answer

    assert asyncio.run(scenario()) == 6


def test_closing_finishes_the_writes_queued_so_far() -> None:
    async def scenario() -> list[int]:
        lanes = Lanes(readers=1)
        done: list[int] = []
        release = threading.Event()
        writes = [asyncio.ensure_future(lanes.write(release.wait, 10))]
        writes += [asyncio.ensure_future(lanes.write(done.append, i)) for i in range(5)]
        await asyncio.sleep(0.05)
        release.set()
        await asyncio.to_thread(lanes.close)
        await asyncio.gather(*writes)
        return done

    assert asyncio.run(scenario()) == [0, 1, 2, 3, 4]
