"""Rolling replacement: which vLLM groups wait for which, and the drain that guards each group.

The rolling unit is a **vLLM group**: one vLLM and the PaddleX instances bound to it (a card
holds two). Pulumi replaces every changed container at once. To keep the fleet serving, each
group of a card that already ran before this update waits for the groups of the wave before it
on its host (a `depends_on` on their `in service` step), so at most `maxUnavailableGroups` groups
of a host are out at a time (default 2, never more than half of the host's groups: a host with
one card keeps one of its two groups serving). A stack that sets `maxUnavailableCards` rolls
whole cards as before. Groups of cards new to the stack wait for nothing: a new stack and a
growth start in parallel. Whether a card ran before is read from the stack's own last
`topology` output.

Each group has an `in service` command: its `delete` drains the group's PaddleX instances at
the gateways (no new work, in-flight work finishes, bounded by `drainTimeout`) before anything of
the group is deleted; its `create` takes them back in once every server of the group is ready.
Its triggers are the group's container ids, so Pulumi replaces it, delete first, with any
container of the group.

    >>> from components.settings import load_settings
    >>> from components.plan import build_plan
    >>> plan = build_plan(load_settings({"cards": "2", "accelerator": "sim"}))
    >>> waits = group_waits(plan, {("local", 0), ("local", 1)}, WaveLimit())
    >>> waits[("local", 0, 1)], waits[("local", 1, 0)], waits[("local", 1, 1)]
    ([('local', 0, 0)], [('local', 0, 1)], [('local', 1, 0)])
"""

from __future__ import annotations

import itertools
import json
import math
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from components.containers import HOST_LABEL, PORT_LABEL, ROLE_LABEL, STACK_LABEL, stack_label
from components.plan import CardPlan, FleetPlan, GatewayPlan, PaddlexInstance, VllmInstance

CardKey = tuple[str, int]
"""(host name, card id)."""
GroupKey = tuple[str, int, int]
"""(host name, card id, the vLLM's index on the card): a vLLM and the PaddleX bound to it."""

DEFAULT_GROUPS = 2
"""Groups of a host out at once by default, and never more than half of them."""

DRAIN_TTL_FACTOR = 2
"""A drain ends by itself after this many drain timeouts: a rollout killed between the drain and
the undrain never leaves a group out of service for good."""


def wave_width(max_unavailable: float, units_on_host: int) -> int:
    """How many units (groups or cards) of a host may be out at once: a count (>= 1), or a
    fraction of the host's units rounded down, at least 1."""
    if max_unavailable >= 1:
        return int(max_unavailable)
    return max(1, math.floor(max_unavailable * units_on_host))


@dataclass(frozen=True)
class WaveLimit:
    """How much of a host a replacing update takes out at once: `groups`
    (`maxUnavailableGroups`; None: the default) or, where a stack sets it, whole `cards`
    (`maxUnavailableCards`)."""

    groups: float | None = None
    cards: float | None = None

    def describe(self) -> str:
        if self.cards is not None:
            return f"maxUnavailableCards {self.cards:g}: whole cards"
        if self.groups is not None:
            return f"maxUnavailableGroups {self.groups:g}"
        return f"maxUnavailableGroups default: {DEFAULT_GROUPS}, at most half of a host's groups"

    def waves(
        self, on_host: Sequence[CardPlan], running: Sequence[CardPlan]
    ) -> list[list[GroupKey]]:
        """The waves of the `running` cards' groups, of a host with the cards `on_host`."""
        if self.cards is not None:
            width = wave_width(self.cards, len(on_host))
            chunks = [running[i : i + width] for i in range(0, len(running), width)]
            return [[g for card in chunk for g in group_keys(card)] for chunk in chunks]
        total = sum(len(card.vllm) for card in on_host)
        if self.groups is None:
            width = max(1, min(DEFAULT_GROUPS, total // 2))
        else:
            width = wave_width(self.groups, total)
        groups = [g for card in running for g in group_keys(card)]
        return [groups[i : i + width] for i in range(0, len(groups), width)]


def group_keys(card: CardPlan) -> list[GroupKey]:
    return [(card.host.name, card.card, vllm.index) for vllm in card.vllm]


def host_waves(
    plan: FleetPlan, ran_before: Iterable[CardKey], limit: WaveLimit
) -> dict[str, list[list[GroupKey]]]:
    """Per host, the waves of the groups of the cards that ran before, in plan order. Groups
    of cards new to the stack are in no wave."""
    ran = set(ran_before)
    found = {}
    for host in plan.hosts:
        on_host = plan.cards_of(host.name)
        found[host.name] = limit.waves(on_host, [c for c in on_host if _key(c) in ran])
    return found


def group_waits(
    plan: FleetPlan, ran_before: Iterable[CardKey], limit: WaveLimit
) -> dict[GroupKey, list[GroupKey]]:
    """For each group, the groups whose `in service` step it waits for before it is touched:
    a group of wave n waits for every group of wave n - 1; groups of cards new to the stack
    wait for nothing."""
    waits: dict[GroupKey, list[GroupKey]] = {g: [] for c in plan.cards for g in group_keys(c)}
    for each_host in host_waves(plan, ran_before, limit).values():
        for before, wave in itertools.pairwise(each_host):
            for key in wave:
                waits[key] = before
    return waits


def waves(plan: FleetPlan, ran_before: Iterable[CardKey], limit: WaveLimit) -> list[str]:
    """The rollout order in words, one line per host and wave (for `python -m components.plan`
    and the docs): which groups a replacing update takes out together."""
    ran = set(ran_before)
    lines = []
    for host, each_host in host_waves(plan, ran, limit).items():
        for number, wave in enumerate(each_host, 1):
            named = ", ".join(f"card {card} vLLM {vllm}" for _, card, vllm in wave)
            lines.append(f"host {host} wave {number}: {named}")
        new = [c.card for c in plan.cards_of(host) if _key(c) not in ran]
        if new:
            lines.append(f"host {host} new cards, in parallel: {new}")
    return lines


def cards_in_topology(topology: Mapping[str, Any] | None) -> set[CardKey]:
    """The cards of an earlier `topology` stack output (card ids may come back as floats)."""
    found: set[CardKey] = set()
    for host in (topology or {}).get("hosts", []):
        for card in host.get("cards", []):
            found.add((host["name"], int(card["card"])))
    return found


def gateways_of(plan: FleetPlan, card: CardPlan) -> list[GatewayPlan]:
    """The gateways that dispatch to the card's PaddleX instances."""
    return [g for g in plan.gateways if g.owns in (None, card.host.name)]


CALL = r"""
import json, sys, urllib.error, urllib.request
action, port, body = sys.argv[1], sys.argv[2], sys.argv[3]
headers = {"content-type": "application/json"}
try:
    with open(sys.argv[4]) as f:
        headers["authorization"] = "Bearer " + f.read().strip()
except OSError:
    pass
request = urllib.request.Request(
    f"http://127.0.0.1:{port}/admin/{action}", body.encode(), headers, method="POST")
wait = json.loads(body).get("wait_s", 0)
try:
    with urllib.request.urlopen(request, timeout=wait + 30) as answer:
        print(action, answer.read().decode()[:2000])
except urllib.error.HTTPError as e:
    print(action, "not done: the gateway answered", e.code, e.read().decode()[:500],
          file=sys.stderr)
except OSError as e:
    print(action, "skipped: the gateway does not answer:", e, file=sys.stderr)
"""
"""Runs inside the gateway container (host network): POST /admin/{action} on its loopback with
the gateway's local admin token. While two gateways share the port (a handover,
components/gateway.py) the connection may reach either: both read the token from the jobs
folder they share. Never fails the update: a gateway that does not answer (not started yet,
already gone) has nothing to drain, and one that refuses (a gateway older than the drain routes,
an upstream it does not know yet) is said on stderr, where `pulumi up` shows it; a card that
could not be drained still fails over at the gateway, it only loses its in-flight requests."""


def gateway_call(
    gateway: GatewayPlan,
    action: str,
    body: Mapping[str, Any],
    token_file: str | None,
    stack: str | None = None,
) -> str:
    """A shell command that calls the gateway's admin `action` through `docker exec` on the
    gateway's host, with the gateway's local admin token (`auth.local_token_file`, a root-only
    file in the jobs folder the host's gateway containers mount: gateway/access/local_token.py); a
    missing or stopped gateway is skipped with a note.

    The gateway's containers are found by their labels (role, `stack`: `project/stack`, host,
    port), not by name: a gateway container's name changes with its generation, and while one
    hands its port over to the next (components/gateway.py) both run and both are called.
    """
    selector = {
        ROLE_LABEL: "gateway",
        STACK_LABEL: stack or stack_label(),
        HOST_LABEL: gateway.host.name,
        PORT_LABEL: str(gateway.port),
    }
    filters = " ".join(f"--filter {shlex.quote(f'label={k}={v}')}" for k, v in selector.items())
    call = shlex.join(
        [
            "python3",
            "-c",
            CALL,
            action,
            str(gateway.port),
            json.dumps(dict(body), sort_keys=True),
            token_file or "",
        ]
    )
    endpoint = shlex.quote(gateway.host.endpoint)
    missing = shlex.quote(f"{action} skipped: no gateway container of port {gateway.port} runs")
    return (
        f"( export DOCKER_HOST={endpoint}; found=$(docker ps -q {filters}); "
        f'if [ -z "$found" ]; then echo {missing} >&2; fi; '
        f'for id in $found; do docker exec "$id" {call}; done )'
    )


def drain_command(
    plan: FleetPlan,
    card: CardPlan,
    paddlex: Sequence[PaddlexInstance],
    drain_timeout_s: int,
    token_file: str | None,
) -> str:
    """Takes the `paddlex` instances (of `card`) out of service at every gateway that uses them
    and waits (up to `drain_timeout_s`) for their in-flight work to finish."""
    body = {
        "upstreams": [p.url for p in paddlex],
        "wait_s": drain_timeout_s,
        "ttl_s": drain_timeout_s * DRAIN_TTL_FACTOR,
    }
    calls = (gateway_call(g, "drain", body, token_file) for g in gateways_of(plan, card))
    return " && ".join(calls)


def undrain_command(
    plan: FleetPlan, card: CardPlan, paddlex: Sequence[PaddlexInstance], token_file: str | None
) -> str:
    """Takes the `paddlex` instances (of `card`) back into service at every gateway that uses
    them."""
    body = {"upstreams": [p.url for p in paddlex]}
    calls = (gateway_call(g, "undrain", body, token_file) for g in gateways_of(plan, card))
    return " && ".join(calls)


def group_commands(
    plan: FleetPlan,
    card: CardPlan,
    vllm: VllmInstance,
    drain_timeout_s: int,
    token_file: str | None,
) -> tuple[str, str]:
    """The drain and the undrain of the group of `vllm` on `card`."""
    bound = card.bound_to(vllm)
    return (
        drain_command(plan, card, bound, drain_timeout_s, token_file),
        undrain_command(plan, card, bound, token_file),
    )


def _key(card: CardPlan) -> CardKey:
    return (card.host.name, card.card)
