"""Switching plugin sets replaces nothing, both ways: one sim stack deployed with the official
plugins, then switched to ours, back to the official ones and to ours again; after each switch a
preview (`--expect-no-changes`) and an up change nothing and fail nothing (Pulumi.yaml's
`refresh: always` makes each of them read every resource with the new set first).

What the official docker provider writes and ours must read (and the other way round) is in
tests/pulumi_plugins/test_official_state.py; this is the same on the real engine.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import _unavailable
from tests.e2e.pulumi_stack import changed
from tests.e2e.sim_stack import SimStack, sim_stack
from tests.pulumi_sets import plugin_set

pytestmark = pytest.mark.docker

PORTS = 31000
BRIDGE_RAW_STATE = "__pulumi_raw_state_delta"
"""The official provider's recipe for its Terraform state, dropped by ours (it fits the state
it was written with only) and written again by the official one's next refresh."""


@pytest.fixture(scope="module")
def fleet(docker_engine: None) -> Iterator[SimStack]:
    for name in ("official", "ours"):
        found = plugin_set(name)
        if found is None:
            _unavailable(f"no `{name}` plugin set: scripts/test.sh installs both")
    with sim_stack("plugin-sets", PORTS, plugins="official", allowOpenAccess="true") as fleet:
        assert fleet.stack.plugins.name == "official"
        yield fleet


def unchanged_on(fleet: SimStack, plugins: str) -> None:
    """The stack on `plugins` from now on: a preview and an up change nothing."""
    fleet.stack.use_plugins(plugins)
    assert fleet.stack.plugins.name == plugins
    preview = fleet.stack.preview("--expect-no-changes")
    assert not changed(preview), f"preview on {plugins}: {changed(preview)}"
    up = fleet.stack.up()
    assert not changed(up), f"up on {plugins}: {changed(up)}"


def comparable(state: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each custom resource's id, inputs and outputs by URN, without the official provider's
    raw state recipe; absent and null outputs alike (ours leaves out a null it never had)."""
    found = {}
    for resource in state:
        if not resource.get("custom") or resource["type"] == "pulumi:pulumi:StackReference":
            continue
        outputs = {
            k: v
            for k, v in (resource.get("outputs") or {}).items()
            if k != BRIDGE_RAW_STATE and v is not None
        }
        found[resource["urn"]] = {
            "id": resource.get("id"),
            "inputs": resource.get("inputs"),
            "outputs": outputs,
        }
    return found


def test_official_to_ours_to_official_and_back_changes_nothing(fleet: SimStack) -> None:
    created = changed(fleet.stack.up())
    assert created and all(ops == {"create"} for ops in created.values()), created
    deployed = comparable(fleet.stack.state())

    unchanged_on(fleet, "ours")
    on_ours = comparable(fleet.stack.state())
    assert on_ours.keys() == deployed.keys()
    assert all(on_ours[urn]["id"] == deployed[urn]["id"] for urn in deployed), "nothing replaced"
    assert all(on_ours[urn]["inputs"] == deployed[urn]["inputs"] for urn in deployed)
    assert all(on_ours[urn]["outputs"] == deployed[urn]["outputs"] for urn in deployed)

    unchanged_on(fleet, "official")
    unchanged_on(fleet, "ours")
    again = comparable(fleet.stack.state())
    assert all(again[urn]["id"] == deployed[urn]["id"] for urn in deployed), "nothing replaced"
    assert all(again[urn]["inputs"] == deployed[urn]["inputs"] for urn in deployed)
