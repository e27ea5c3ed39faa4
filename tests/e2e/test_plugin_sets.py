"""Switching plugin sets replaces nothing, both ways: one sim stack deployed with the official
plugins, then switched to ours, back to the official ones and to ours again; after each switch a
preview (`--expect-no-changes`) and an up change nothing and fail nothing (Pulumi.yaml's
`refresh: always` makes each of them read every resource with the new set first).

What the official docker provider writes and ours must read (and the other way round) is in
tests/pulumi_plugins/test_official_state.py; this is the same on the real engine.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.pulumi_stack import changed
from tests.e2e.sim_stack import SimStack, sim_stack
from tests.pulumi_sets import plugin_set
from tests.real_components import unavailable

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
            unavailable(
                f"the Pulumi engine on the {name} plugins",
                f"no `{name}` plugin set: scripts/test.sh installs both",
            )
    with sim_stack(
        "plugin-sets",
        PORTS,
        plugins="official",
        allowOpenAccess="true",
        # the stack builds the gateway's image (a docker.Image, its platform set by the program)
        gatewayImage=None,
        buildArgs=json.dumps({"BASE_IMAGE": "paddleocr-fleet/base:bookworm"}),
    ) as fleet:
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


def comparable(fleet: SimStack) -> dict[str, dict[str, Any]]:
    """Each custom resource's id, inputs and outputs by URN (secrets in plain text: a secret
    encrypts anew each time it is written), without the official provider's raw state recipe;
    absent and null outputs alike (ours leaves out a null it never had)."""
    done = fleet.stack.run(["stack", "export", "--stack", fleet.name, "--show-secrets"])
    found = {}
    for resource in json.loads(done.stdout)["deployment"].get("resources", []):
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


def differing(
    before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]], part: str
) -> dict[str, Any]:
    """URN -> (before, after) of each resource whose `part` changed (keys of its outputs that
    changed, for `outputs`)."""
    found: dict[str, Any] = {}
    for urn, old in before.items():
        new = after.get(urn, {}).get(part)
        if new == old[part]:
            continue
        if part == "outputs":
            keys = set(old[part]) | set(new or {})
            found[urn] = {
                k: (old[part].get(k), (new or {}).get(k))
                for k in keys
                if old[part].get(k) != (new or {}).get(k)
            }
        else:
            found[urn] = (old[part], new)
    return found


def test_official_to_ours_to_official_and_back_changes_nothing(fleet: SimStack) -> None:
    created = changed(fleet.stack.up())
    assert created and all(ops == {"create"} for ops in created.values()), created
    assert "local-gateway-image" in created, "the stack builds an image"
    deployed = comparable(fleet)

    unchanged_on(fleet, "ours")
    on_ours = comparable(fleet)
    assert on_ours.keys() == deployed.keys()
    for part in ("id", "inputs", "outputs"):
        assert not differing(deployed, on_ours, part), part

    unchanged_on(fleet, "official")
    unchanged_on(fleet, "ours")
    again = comparable(fleet)
    for part in ("id", "inputs"):
        assert not differing(deployed, again, part), part


def test_what_ours_created_moves_to_the_official_plugins_unchanged(fleet: SimStack) -> None:
    assert fleet.stack.plugins.name == "ours"  # where the test above left the stack
    fleet.set(cards="2")
    grown = changed(fleet.stack.up())
    assert {"local-card-1-vllm-0", "local-card-1-paddlex-0"} <= grown.keys(), grown
    unchanged_on(fleet, "official")
    unchanged_on(fleet, "ours")
