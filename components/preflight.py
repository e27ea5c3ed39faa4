"""`python -m components.preflight`: name the containers that would block `pulumi up`, first.

A Docker engine holds each container name once. A container that already holds a name this
stack's plan gives one of its own containers, and that the stack's state does not own (the same
stack deployed from another checkout, a stack whose state was lost, the replaced system's
hand-made containers of the same names), fails `pulumi up` half-way with "Conflict. The
container name ... is already in use". This check lists every such container, on every host,
before anything changes::

    pulumi stack export --stack demo > /tmp/demo-state.json
    python -m components.preflight --stack demo --state /tmp/demo-state.json

It exits 0 when nothing is in the way, 1 naming the containers and how to take them away, and 2
on a config error. `scripts/up.sh` runs it before every `pulumi up`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components.containers import STACK_LABEL
from components.plan import FleetPlan, HostPlan, build_plan
from components.settings import ConfigError, load_settings
from components.stack_file import stack_config

CONTAINER_TYPE = "docker:index/container:Container"


@dataclass(frozen=True)
class Existing:
    """A container on a host's engine, as `docker ps -a` lists it."""

    id: str
    name: str
    stack: str
    """Its paddleocr-fleet stack label (`project/stack`), empty when it has none."""


@dataclass(frozen=True)
class Conflict:
    """A container on ``host`` that holds a planned name and that the stack does not own."""

    host: HostPlan
    container: Existing

    def describe(self) -> str:
        owner = f"labelled {self.container.stack}" if self.container.stack else "no fleet label"
        return f"{self.container.name} on host {self.host.name} ({self.container.id[:12]}, {owner})"


def planned_names(plan: FleetPlan) -> dict[str, list[str]]:
    """Host name -> the names of the containers the plan puts on it."""
    names: dict[str, list[str]] = {h.name: [] for h in plan.hosts}
    for v in plan.vllm:
        names[v.host.name].append(v.container_name)
    for p in plan.paddlex:
        names[p.host.name].append(p.container_name)
    for g in plan.gateways:
        names[g.host.name].append(g.container_name)
        if g.keeper is not None:
            names[g.keeper.host.name].append(g.keeper.container_name)
    if plan.balancer is not None:
        names[plan.balancer.host.name].append(plan.balancer.container_name)
    if plan.monitoring is not None:
        names[plan.monitoring.host.name].append(plan.monitoring.container_name)
        for host in plan.monitoring.exporter_hosts:
            names[host.name].append(plan.monitoring.exporter_name)
    if plan.job_store is not None:
        names[plan.job_store.host.name].append(plan.job_store.container_name)
    return names


def owned_ids(state: Mapping[str, Any]) -> set[str]:
    """The container ids a `pulumi stack export` document holds (empty for a new stack)."""
    resources = (state.get("deployment") or {}).get("resources") or []
    return {r["id"] for r in resources if r.get("type") == CONTAINER_TYPE and r.get("id")}


def pending_operations(state: Mapping[str, Any]) -> int:
    """How many operations an interrupted update left pending in the state."""
    return len((state.get("deployment") or {}).get("pending_operations") or [])


def conflicts(
    host: HostPlan, names: list[str], existing: list[Existing], owned: set[str]
) -> list[Conflict]:
    """The containers on `host` that hold one of `names` (or a generation of one: a gateway's
    name carries `-<hash>`, components/gateway.py) and are not the stack's own."""
    wanted = set(names)
    return [
        Conflict(host, c)
        for c in existing
        if (c.name in wanted or _GENERATION.sub("", c.name) in wanted) and c.id not in owned
    ]


_GENERATION = re.compile(r"-[0-9a-f]{12}$")


def list_containers(host: HostPlan, timeout: float = 20.0) -> list[Existing]:
    """Every container on the host's engine, running or not."""
    template = '{{.ID}}\t{{.Names}}\t{{.Label "' + STACK_LABEL + '"}}'
    result = subprocess.run(
        ["docker", "ps", "-a", "--no-trunc", "--format", template],
        env={**os.environ, **host.docker_env},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        lines = result.stderr.strip().splitlines() or [f"exit status {result.returncode}"]
        raise OSError(f"docker ps failed: {lines[-1]}")
    return parse_listing(result.stdout)


def parse_listing(text: str) -> list[Existing]:
    """`docker ps` rows of ID, names and stack label, tab-separated. A container that legacy
    links point to lists their aliases (`other/alias`) beside its own name."""
    found = []
    for line in text.splitlines():
        cid, _, rest = line.partition("\t")
        names, _, stack = rest.partition("\t")
        for name in names.split(","):
            if cid and name and "/" not in name:
                found.append(Existing(id=cid, name=name, stack=stack))
    return found


def report(found: list[Conflict], stack: str, pending: int = 0) -> str:
    """What stands in the way and how to take it away, for the operator."""
    lines = [
        f"error: {len(found)} container(s) already hold names that stack '{stack}' gives its own "
        "containers, and its state does not own them (the stack deployed from another checkout, "
        "a stack whose state was lost, or the replaced system's containers):",
        *(f"  {c.describe()}" for c in found),
        "take down the deployment they belong to (`pulumi destroy` where it was deployed, "
        "`bash scripts/down.sh` for the demo), or remove them:",
    ]
    for host in dict.fromkeys(c.host for c in found):
        names = [c.container.name for c in found if c.host == host]
        lines.append(f"  DOCKER_HOST={shlex.quote(host.endpoint)} docker rm -f {shlex.join(names)}")
    if pending:
        lines.append(
            f"the state of '{stack}' holds {pending} pending operation(s) of an interrupted "
            "update: containers it was creating may be among these (`pulumi refresh` shows them)"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m components.preflight", description=__doc__)
    parser.add_argument("--stack", required=True, help="read Pulumi.<STACK>.yaml here")
    parser.add_argument(
        "--state", type=Path, required=True, help="the stack's `pulumi stack export` document"
    )
    args = parser.parse_args(argv)
    path = Path(f"Pulumi.{args.stack}.yaml")
    try:
        values = stack_config(path) if path.exists() else {}
        plan = build_plan(load_settings(values))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        state = json.loads(args.state.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError) as exc:
        print(f"error: --state {args.state}: not a stack export: {exc}", file=sys.stderr)
        return 2
    owned = owned_ids(state)
    names = planned_names(plan)
    found: list[Conflict] = []
    for host in plan.hosts:
        try:
            existing = list_containers(host)
        except (OSError, subprocess.SubprocessError) as exc:
            # pulumi up reports an unreachable engine in its own words; this check is a courtesy.
            print(f"preflight: host {host.name}: not checked ({exc})", file=sys.stderr)
            continue
        found += conflicts(host, names[host.name], existing, owned)
    if found:
        print(report(found, args.stack, pending_operations(state)), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
