"""Load the fleet topology from the Pulumi stack outputs and select instances from it.

The outputs come from, in this order:

1. an explicit file (``--outputs FILE``), the saved result of ``pulumi stack output --json``;
2. the ``FLEETCTL_OUTPUTS`` environment variable (a path to such a file);
3. ``pulumi stack output --json [--stack NAME]`` when the Pulumi CLI is on ``PATH``.

Usage::

    fleet = load_fleet(outputs="outputs.json")
    for inst in fleet.select(card=0):
        print(inst.kind, inst.port, inst.container)
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_MODEL = "PaddleOCR-VL-1.5-0.9B"
OUTPUTS_ENV = "FLEETCTL_OUTPUTS"
KINDS = ("vllm", "paddlex", "gateway")


class TopologyError(Exception):
    """The topology could not be loaded, or a selection matched nothing."""


@dataclass(frozen=True)
class Instance:
    """One vLLM, PaddleX or gateway instance of the fleet."""

    kind: str  # "vllm" | "paddlex" | "gateway"
    host: str
    address: str
    docker_host: str | None
    accelerator: str
    card: int | None
    port: int
    url: str
    container: str
    log: str | None = None
    vllm_url: str | None = None  # PaddleX: the vLLM it is bound to
    vllm_port: int | None = None
    start_command: str | None = None  # PaddleX: the `docker exec -d ...` string
    pipeline_config: str | None = None
    served_model: str = DEFAULT_MODEL

    @property
    def label(self) -> str:
        return f"{self.kind} {self.host}:{self.port}"


@dataclass
class Fleet:
    """All instances of a stack plus the gateway URL."""

    instances: list[Instance]
    gateway_url: str | None
    hosts: list[dict[str, Any]] = field(default_factory=list)
    stack: str | None = None
    """The Pulumi stack that deployed it (the topology's `stack`), for repair commands."""

    @property
    def gateway(self) -> Instance | None:
        return next((i for i in self.instances if i.kind == "gateway"), None)

    def gateway_urls(self) -> dict[str, str]:
        """Where to read each host's view of its instances (``/upstreams``): per host, its
        gateway (one per host in the per-host layout); else ``{"": gateway_url}``, one view of
        every host."""
        gateways = self.of_kind("gateway")
        if len(gateways) > 1:
            return {g.host: g.url.rstrip("/") for g in gateways}
        url = self.gateway_url or (gateways[0].url if gateways else None)
        return {"": url.rstrip("/")} if url else {}

    def of_kind(self, kind: str) -> list[Instance]:
        return [i for i in self.instances if i.kind == kind]

    def select(
        self,
        *,
        kinds: tuple[str, ...] | None = None,
        ports: list[int] | None = None,
        cards: list[int] | None = None,
        names: list[str] | None = None,
        hosts: list[str] | None = None,
    ) -> list[Instance]:
        """Instances matching every given criterion (each a list: any of its values).

        ``names`` are container-name globs, or substrings when they hold no glob characters.
        An unknown port is an error (`TopologyError`) that lists the known ports.
        """
        pool = [i for i in self.instances if kinds is None or i.kind in kinds]
        if ports:
            known = {i.port for i in pool}
            unknown = [p for p in ports if p not in known]
            if unknown:
                raise TopologyError(
                    f"unknown port {', '.join(map(str, unknown))}; known ports: "
                    + self.describe_ports(kinds)
                )
            pool = [i for i in pool if i.port in ports]
        if cards is not None and cards:
            pool = [i for i in pool if i.card in cards]
        if hosts:
            pool = [i for i in pool if i.host in hosts or i.address in hosts]
        if names:
            pool = [i for i in pool if any(_name_match(n, i.container) for n in names)]
        return pool

    def find(self, kind: str, port: int, host: str | None = None) -> Instance:
        """The single instance of `kind` on `port` (and `host`, needed when ports repeat)."""
        matches = self.select(kinds=(kind,), ports=[port], hosts=[host] if host else None)
        if not matches:
            raise TopologyError(f"no {kind} on port {port}" + (f" of host {host}" if host else ""))
        if len(matches) > 1:
            names = ", ".join(m.host for m in matches)
            raise TopologyError(
                f"{kind} port {port} exists on several hosts ({names}); pick one with --host"
            )
        return matches[0]

    def describe_ports(self, kinds: tuple[str, ...] | None = None) -> str:
        """Known ports per kind, compacted to ranges: ``vllm 9025-9032, 9035-9042; ...``."""
        parts = []
        for kind in kinds or KINDS:
            ports = sorted({i.port for i in self.instances if i.kind == kind})
            if ports:
                parts.append(f"{kind} {compact_ranges(ports)}")
        return "; ".join(parts) or "(none)"


def _name_match(pattern: str, name: str) -> bool:
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatchcase(name, pattern)
    return pattern in name


def compact_ranges(values: list[int]) -> str:
    """``[1, 2, 3, 7, 9, 10]`` -> ``"1-3, 7, 9-10"``."""
    out: list[str] = []
    vals = sorted(set(values))
    i = 0
    while i < len(vals):
        j = i
        while j + 1 < len(vals) and vals[j + 1] == vals[j] + 1:
            j += 1
        out.append(str(vals[i]) if i == j else f"{vals[i]}-{vals[j]}")
        i = j + 1
    return ", ".join(out)


def read_outputs(
    outputs: str | os.PathLike[str] | None = None, stack: str | None = None
) -> dict[str, Any]:
    """The stack outputs as a dict, from a file, `FLEETCTL_OUTPUTS` or the Pulumi CLI."""
    path = outputs or os.environ.get(OUTPUTS_ENV)
    if path:
        p = Path(path)
        try:
            return _as_outputs(json.loads(p.read_text(encoding="utf-8")), str(p))
        except FileNotFoundError:
            raise TopologyError(f"outputs file not found: {p}") from None
        except json.JSONDecodeError as e:
            raise TopologyError(f"outputs file {p} is not JSON: {e}") from None
    pulumi = shutil.which("pulumi")
    if pulumi is None:
        raise TopologyError(
            "no topology: pass --outputs FILE (saved `pulumi stack output --json`) or set "
            f"{OUTPUTS_ENV}=FILE; the Pulumi CLI is not on PATH, so the stack cannot be asked"
        )
    cmd = [pulumi, "stack", "output", "--json"] + (["--stack", stack] if stack else [])
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise TopologyError(f"`{' '.join(cmd)}` failed: {e}") from None
    if proc.returncode != 0:
        raise TopologyError(
            f"`{' '.join(cmd)}` exited {proc.returncode}: {proc.stderr.strip()[-500:]}"
        )
    try:
        return _as_outputs(json.loads(proc.stdout), "pulumi stack output")
    except json.JSONDecodeError as e:
        raise TopologyError(f"pulumi stack output is not JSON: {e}") from None


def _as_outputs(data: Any, source: str) -> dict[str, Any]:
    if isinstance(data, dict) and "hosts" in data and "topology" not in data:
        data = {"topology": data}  # a bare topology object is accepted too
    if not isinstance(data, dict) or not isinstance(data.get("topology"), dict):
        raise TopologyError(f"{source}: expected the stack outputs with a `topology` object")
    return data


def parse_fleet(outputs: dict[str, Any]) -> Fleet:
    """Flatten the ``topology`` output into `Instance`s in plan order."""
    topo = outputs["topology"]
    model = topo.get("served_model_name") or DEFAULT_MODEL
    instances: list[Instance] = []
    hosts = topo.get("hosts") or []
    by_name: dict[str, dict[str, Any]] = {}
    for h in hosts:
        name = h.get("name") or h.get("address") or "local"
        by_name[name] = h
        common = {
            "host": name,
            "address": h.get("address") or "127.0.0.1",
            "docker_host": h.get("docker_host") or None,
            "accelerator": h.get("accelerator") or "sim",
        }
        for c in h.get("cards") or []:
            card = c.get("card")
            for v in c.get("vllm") or []:
                vurl = _url(v, common["address"])
                instances.append(
                    Instance(
                        kind="vllm",
                        card=card,
                        port=int(v["port"]),
                        url=vurl,
                        container=v.get("container", ""),
                        log=v.get("log"),
                        served_model=v.get("served_model_name") or model,
                        **common,
                    )
                )
                for p in v.get("paddlex") or []:
                    instances.append(
                        Instance(
                            kind="paddlex",
                            card=card,
                            port=int(p["port"]),
                            url=_url(p, common["address"]),
                            container=p.get("container", ""),
                            log=p.get("log"),
                            vllm_url=vurl,
                            vllm_port=int(v["port"]),
                            start_command=p.get("start_command"),
                            pipeline_config=p.get("pipeline_config"),
                            served_model=model,
                            **common,
                        )
                    )
    gw = topo.get("gateway")
    gateway_url = outputs.get("gateway_url") or (gw or {}).get("url")
    # the single layout's gateway, or (per-host) one gateway per host behind the balancer
    for entry in topo.get("gateways") or ([gw] if gw else []):
        if not entry.get("port"):
            continue
        h = by_name.get(entry.get("host", ""), {})
        address = h.get("address") or "127.0.0.1"
        instances.append(
            Instance(
                kind="gateway",
                host=entry.get("host") or "local",
                address=address,
                docker_host=h.get("docker_host") or None,
                accelerator=h.get("accelerator") or "-",
                card=None,
                port=int(entry["port"]),
                url=(entry.get("url") or gateway_url or f"http://{address}:{entry['port']}"),
                container=entry.get("container", ""),
                log=None,
                served_model=model,
            )
        )
    return Fleet(
        instances=instances,
        gateway_url=gateway_url.rstrip("/") if gateway_url else None,
        hosts=list(hosts),
        stack=topo.get("stack") or None,
    )


def _url(entry: dict[str, Any], address: str) -> str:
    return (entry.get("url") or f"http://{address}:{entry['port']}").rstrip("/")


def load_fleet(outputs: str | os.PathLike[str] | None = None, stack: str | None = None) -> Fleet:
    """Read the outputs (see `read_outputs`) and parse them into a `Fleet`."""
    return parse_fleet(read_outputs(outputs, stack))
