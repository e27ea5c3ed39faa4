"""`python -m components.plan`: show what `pulumi up` will build, without Pulumi or Docker.

python -m components.plan                          # defaults (8 Ascend cards)
python -m components.plan --stack dev              # reads Pulumi.dev.yaml
python -m components.plan --set cards=2 --set portFirstCard=1
python -m components.plan --json                   # the `topology` stack output
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from components.plan import FleetPlan, build_plan
from components.render.topology import topology
from components.rollout import WaveLimit, waves
from components.settings import ConfigError, FleetSettings, load_settings
from components.stack_file import stack_config


def render_matrix(plan: FleetPlan) -> str:
    """The seed's port matrix and routing table, per host."""
    lines: list[str] = []
    for host in plan.hosts:
        cards = plan.cards_of(host.name)
        lines.append(
            f"host {host.name} ({host.kind.name}, {host.address}"
            f"{', ' + host.endpoint if host.endpoint else ''}): {len(cards)} cards, "
            f"{sum(len(c.vllm) for c in cards)} vLLM, {sum(len(c.paddlex) for c in cards)} PaddleX"
        )
        lines.append("  card | paddlex ports                  | vllm ports  | vllm containers")
        for card in cards:
            ports = " ".join(str(p.port) for p in card.paddlex)
            vllm_ports = "/".join(str(v.port) for v in card.vllm)
            names = ", ".join(v.container_name for v in card.vllm)
            lines.append(f"  {card.card:>4} | {ports:<30} | {vllm_ports:<11} | {names}")
        lines.append("  routing (paddlex -> vllm):")
        for card in cards:
            routes = "   ".join(
                "/".join(str(p.port) for p in card.bound_to(v)) + f" -> {v.port}" for v in card.vllm
            )
            lines.append(f"  {card.card:>4} | {routes}")
        lines.append("")
    for gateway in plan.gateways:
        lines.append(
            f"gateway {gateway.container_name} on host {gateway.host.name}: {gateway.url} "
            f"-> {len(plan.paddlex_of(gateway))} upstreams"
        )
    balancer = plan.balancer
    if balancer is not None:
        lines.append(
            f"balancer {balancer.container_name} ({balancer.kind}) on host {balancer.host.name}: "
            f"{balancer.url} -> {len(balancer.backends)} gateways (leastconn)"
        )
    store = plan.job_store
    if store is not None:
        lines.append(
            f"job store {store.container_name} (PostgreSQL) on host {store.host.name}: "
            f"port {store.port}, listening on {store.listen_addresses}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m components.plan", description=__doc__)
    parser.add_argument("--stack", help="read Pulumi.<STACK>.yaml in the current folder")
    parser.add_argument("--config-file", type=Path, help="read this Pulumi.<stack>.yaml")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key"
    )
    parser.add_argument("--json", action="store_true", help="print the topology output as JSON")
    args = parser.parse_args(argv)
    values: dict[str, str] = {}
    path = args.config_file or (Path(f"Pulumi.{args.stack}.yaml") if args.stack else None)
    if path is not None:
        if not path.exists():
            print(f"error: no stack config file {path}", file=sys.stderr)
            return 2
        values.update(stack_config(path))
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            print(f"error: --set {item!r}: expected KEY=VALUE", file=sys.stderr)
            return 2
        values[key] = value
    try:
        settings: FleetSettings = load_settings(values)
        plan = build_plan(settings)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(topology(settings, plan), indent=2))
    else:
        print(render_matrix(plan))
        running = {(c.host.name, c.card) for c in plan.cards}
        limit = WaveLimit(settings.max_unavailable_groups, settings.max_unavailable_cards)
        print(
            "\na change that replaces the running cards' containers rolls in waves of vLLM "
            f"groups (a vLLM and its PaddleX; {limit.describe()}; each group drained first for "
            f"up to {settings.drain_timeout} s):"
        )
        print("\n".join(f"  {line}" for line in waves(plan, running, limit)))
    return 0
