"""Our own plugins (pulumi_plugins/, the fallback where no official plugin can be had) still
deploy the fleet: the smoke that keeps them honest while every other real-engine test runs on
the official set. One sim stack on the `ours` set, in file order: up, a preview that changes
nothing and says no warning, a second card, a rolling vLLM change, destroy (at the end of
`sim_stack`, which fails when anything is left).
"""

from __future__ import annotations

import base64
from collections.abc import Iterator

import httpx
import pytest

from tests.e2e.gateway_view import wait_for_every_worker
from tests.e2e.pulumi_stack import changed
from tests.e2e.sim_stack import SimStack, sim_stack
from tests.e2e.test_fleet_on_docker import png_bytes
from tests.pulumi_sets import plugin_set
from tests.real_components import unavailable

pytestmark = pytest.mark.docker

PORTS = 27000


@pytest.fixture(scope="module")
def fleet(docker_engine) -> Iterator[SimStack]:
    if plugin_set("ours") is None:
        unavailable(
            "the Pulumi engine on our plugins",
            "no `ours` plugin set: scripts/test.sh installs it ($PADDLEOCR_FLEET_PULUMI_OURS)",
        )
    with sim_stack(
        "ours", PORTS, plugins="ours", allowOpenAccess="true", simVllmLoadSeconds="2"
    ) as fleet:
        assert fleet.stack.plugins.name == "ours"
        yield fleet


def served(fleet: SimStack) -> None:
    body = {"base64": base64.b64encode(png_bytes()).decode()}
    answer = httpx.post(f"{fleet.url}/ocr", json=body, timeout=120)
    assert answer.status_code == 200, answer.text


def test_up_serves_a_document(fleet):
    fleet.stack.up()
    served(fleet)


def test_a_preview_after_up_changes_nothing_and_warns_of_nothing(fleet):
    said = fleet.stack.preview_said("--expect-no-changes")
    assert "warning" not in said.lower(), said


def test_a_second_card_is_added_without_touching_the_first(fleet):
    fleet.set(cards="2")
    found = changed(fleet.stack.up())
    assert {name for name, ops in found.items() if ops == {"create"}} >= {
        "local-card-1-vllm-0",
        "local-card-1-paddlex-0",
        "local-card-1-paddlex-1",
    }, found
    # the first card untouched; the gateway's config now lists the new card's instances
    assert not [name for name in found if "card-0" in name], found
    assert "local-gateway-config" in found, found
    # each gateway worker reads the new config on its own schedule: wait for all of them
    wait_for_every_worker(fleet.url, {}, lambda states: len(states) == 4, 30)
    served(fleet)


def test_a_vllm_change_rolls_card_by_card(fleet):
    fleet.set(maxNumBatchedTokens="8192")
    steps = fleet.stack.up()
    back = {s.name: s for s in steps if s.op == "create-replacement"}
    out = {s.name: s for s in steps if s.op == "delete-replaced"}
    card0_back, card1_out = (
        back["local-card-0-vllm-0-in-service"],
        out["local-card-1-vllm-0-in-service"],
    )
    assert card0_back.ended is not None and card0_back.ended < card1_out.started
    served(fleet)
