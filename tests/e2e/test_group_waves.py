"""The vLLM group as the rolling unit, on the real Pulumi engine and a real Docker engine (sim).

One card, as on the demo and every single-GPU server: two vLLM, two PaddleX bound to each. A
vLLM change under load replaces one group while the other serves, so no client request fails,
half of the PaddleX serve at every moment, and answers never stop for long. The order comes
from the engine's events: group 1 is drained only once group 0 is back in service.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.e2e.gateway_view import wait_for_every_worker
from tests.e2e.sim_stack import SimStack, first, sim_stack, tokens, up_under_load

pytestmark = pytest.mark.docker

TOKEN, ADMIN_TOKEN = ("groups-" + os.urandom(12).hex() for _ in range(2))
USER = {"Authorization": f"Bearer {TOKEN}"}
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
PER_GROUP = 2


@pytest.fixture(scope="module")
def fleet(docker_engine) -> Iterator[SimStack]:
    config = {
        "vllmPerCard": "2",
        "paddlexPerVllm": str(PER_GROUP),
        "simVllmLoadSeconds": "5",
        "drainTimeout": "60",
    }
    with sim_stack("groups", 32000, tokens(TOKEN, ADMIN_TOKEN), **config) as fleet:
        fleet.stack.up()
        yield fleet


def test_a_vllm_change_on_one_card_keeps_one_group_serving_and_fails_no_request(fleet):
    summary, steps = up_under_load(fleet, USER, ADMIN, maxNumBatchedTokens="8192")
    assert summary["failed"] == 0, summary
    assert summary["requests"] > 50, summary
    assert summary["capacity_total"] == 2 * PER_GROUP, summary
    assert summary["capacity_floor"] >= PER_GROUP, summary
    assert summary["longest_gap_s"] < 2, summary
    group0_back = first(steps, "local-card-0-vllm-0-in-service", "create-replacement")
    group1_out = first(steps, "local-card-0-vllm-1-in-service", "delete-replaced")
    assert group0_back.ended is not None and group0_back.ended < group1_out.started
    group1_vllm = first(steps, "local-card-0-vllm-1", "delete-replaced")
    assert group1_out.ended is not None and group1_out.ended < group1_vllm.started
    wait_for_every_worker(fleet.url, ADMIN, lambda states: set(states.values()) == {"healthy"}, 15)
