"""Rolling replacement under load, on the real Pulumi engine and a real Docker engine (sim).

One stack of two cards (one vLLM and two PaddleX each, so it stays small), clients sending
documents through the gateway the whole time. In file order: a vLLM flag change rolls card by
card with no failed request, the waves read from the engine's events; a rollout killed half-way
(`kill -9` of the CLI) leaves a card drained until the next `pulumi up` puts it right.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import httpx
import pytest

from tests.e2e.gateway_view import upstream_states, wait_for_every_worker
from tests.e2e.sim_stack import SimStack, first, sim_stack, tokens, up_under_load

pytestmark = pytest.mark.docker

TOKEN, ADMIN_TOKEN = ("rolling-" + os.urandom(12).hex() for _ in range(2))
USER = {"Authorization": f"Bearer {TOKEN}"}
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
PER_CARD = 2  # PaddleX instances of a card


@pytest.fixture(scope="module")
def fleet(docker_engine):
    secrets = tokens(TOKEN, ADMIN_TOKEN)
    config = {"cards": "2", "simVllmLoadSeconds": "3", "drainTimeout": "60"}
    with sim_stack("rolling", 18000, secrets, **config) as fleet:
        fleet.stack.up()
        yield fleet


def states(fleet: SimStack) -> dict[str, str]:
    """What the worker that answers sees (drains are shared by every worker)."""
    return upstream_states(httpx.get(f"{fleet.url}/upstreams", headers=ADMIN, timeout=10).json())


def every_worker_sees_all_healthy(fleet: SimStack) -> None:
    """Each worker probes on its own schedule: one may see an instance back a probe later."""
    wait_for_every_worker(fleet.url, ADMIN, lambda s: set(s.values()) == {"healthy"}, 15)


def test_a_vllm_flag_change_rolls_card_by_card_with_no_failed_request(fleet):
    summary, steps = up_under_load(fleet, USER, ADMIN, maxNumBatchedTokens="8192")
    assert summary["failed"] == 0, summary
    assert summary["requests"] > 50, summary
    # Never more than one card (of two) out of service: at least the other card's instances.
    assert summary["capacity_floor"] >= PER_CARD, summary
    # The waves, from the engine's events: card 1 is drained only once card 0 is back in.
    card0_back = first(steps, "local-card-0-vllm-0-in-service", "create-replacement")
    card1_out = first(steps, "local-card-1-vllm-0-in-service", "delete-replaced")
    assert card0_back.ended is not None and card0_back.ended < card1_out.started
    card0_out = first(steps, "local-card-0-vllm-0-in-service", "delete-replaced")
    card0_vllm = first(steps, "local-card-0-vllm-0", "delete-replaced")
    assert card0_out.ended is not None and card0_out.ended < card0_vllm.started
    every_worker_sees_all_healthy(fleet)


def test_a_rollout_killed_half_way_is_put_right_by_the_next_up(fleet):
    fleet.set(maxNumBatchedTokens="4096")
    process = fleet.stack.start(fleet.stack.up_args(), output=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while "drained" not in states(fleet).values():
            assert process.poll() is None and time.monotonic() < deadline, "no card was drained"
            time.sleep(0.2)
    finally:
        os.kill(process.pid, signal.SIGKILL)  # the CLI alone, as an operator's kill -9 would
        process.wait()
    assert "drained" in states(fleet).values()
    # The killed CLI left its lock in the state backend: the operator's `pulumi cancel`.
    fleet.stack.run(["cancel", "--stack", fleet.name, "--yes"])
    steps = fleet.stack.up()
    assert any(s.op != "same" for s in steps)
    every_worker_sees_all_healthy(fleet)
