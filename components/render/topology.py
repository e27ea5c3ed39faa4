"""The `topology` stack output (components/fleet.py; its shape in docs/architecture.md): what
`fleetctl` and the next update read of the fleet."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from components.plan import (
    FleetPlan,
    GatewayPlan,
)
from components.render.paddlex import paddlex_start_command
from components.settings import FleetSettings


def topology(
    settings: FleetSettings,
    plan: FleetPlan,
    stack: str | None = None,
    containers: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The `topology` stack output (shape in docs/architecture.md). `stack` names the Pulumi
    stack, so that `fleetctl` can name the command that repairs it; `containers`: the names the
    containers got where they differ from the plan's (the gateways': plan name -> name)."""
    return {
        **({"stack": stack} if stack else {}),
        "served_model_name": settings.served_model_name,
        "hosts": [
            {
                "name": host.name,
                "address": host.address,
                "docker_host": host.endpoint,
                "accelerator": host.kind.name,
                "cards": [
                    {
                        "card": card.card,
                        "vllm": [
                            {
                                "port": v.port,
                                "url": v.url,
                                "container": v.container_name,
                                "log": f"docker logs {v.container_name}",
                                "paddlex": [
                                    {
                                        "port": p.port,
                                        "url": p.url,
                                        "container": p.container_name,
                                        "pipeline_config": p.pipeline_config_path,
                                        "log": p.log_path,
                                        "start_command": paddlex_start_command(settings, p),
                                    }
                                    for p in card.bound_to(v)
                                ],
                            }
                            for v in card.vllm
                        ],
                    }
                    for card in plan.cards_of(host.name)
                ],
            }
            for host in plan.hosts
        ],
        "layout": plan.layout,
        **_entry_points(plan, containers or {}),
    }


def _entry_points(plan: FleetPlan, containers: Mapping[str, str]) -> dict[str, Any]:
    """`gateway` (single layout), or `gateways` and the `balancer` in front of them."""

    def gateway(g: GatewayPlan) -> dict[str, Any]:
        entry = {
            "host": g.host.name,
            "port": g.port,
            "url": g.url,
            "container": containers.get(g.container_name, g.container_name),
            "config_path": g.config_path,
        }
        if g.owns is not None:
            entry["upstreams"] = [p.url for p in plan.paddlex_of(g)]
        if g.keeper is not None:
            entry["keeper"] = {
                "port": g.keeper.port,
                "url": g.keeper.local_url,  # on the gateway host's loopback only
                "container": containers.get(g.keeper.container_name, g.keeper.container_name),
                "config_path": g.keeper.config_path,
            }
        return entry

    balancer = plan.balancer
    if balancer is None:
        return {"gateway": gateway(plan.gateway)}
    return {
        "gateways": [gateway(g) for g in plan.gateways],
        "balancer": {
            "kind": balancer.kind,
            "host": balancer.host.name,
            "port": balancer.port,
            "url": balancer.url,
            "container": balancer.container_name,
            "config_path": balancer.config_path,
            "jobs_gateway": balancer.jobs_backend.url,
        },
    }
