"""The fleet's topology, computed once from the settings: hosts -> cards -> vLLM -> PaddleX.

Every port, container name and binding is decided here; everything else reads the plan.

    >>> from components.settings import load_settings
    >>> plan = build_plan(load_settings({"cards": "8", "portFirstCard": "2"}))
    >>> [v.port for v in plan.card("local", 0).vllm]
    [9031, 9041]

`python -m components.plan` prints the seed-style port matrix and routing table.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from components.accelerators import KINDS, AcceleratorKind
from components.settings import ConfigError, FleetSettings, HostSettings

CONFIG_DIR_IN_CONTAINER = "/etc/paddleocr-fleet"
LOG_DIR_IN_CONTAINER = "/data/logs"


@dataclass(frozen=True)
class HostPlan:
    name: str
    address: str
    endpoint: str
    """The Docker endpoint, always explicit (the local socket by default)."""
    kind: AcceleratorKind
    platform: str | None = None
    build_args: tuple[tuple[str, str], ...] = ()
    former_names: tuple[str, ...] = ()

    @property
    def docker_env(self) -> dict[str, str]:
        """Environment for `docker` CLI calls that must reach this host's engine: the same
        endpoint as the host's provider (for the CLI, DOCKER_HOST wins over a DOCKER_CONTEXT;
        the program refuses an exported DOCKER_CONTEXT, which the provider would follow)."""
        return {"DOCKER_HOST": self.endpoint}


class _Listening:
    """A service on ``port`` of ``host`` (every container uses host networking)."""

    host: HostPlan
    port: int

    @property
    def url(self) -> str:
        """Where the other hosts (and the gateway) reach it."""
        return f"http://{self.host.address}:{self.port}"

    @property
    def local_url(self) -> str:
        """The service on its host's loopback: how the containers of the same host reach it,
        and where readiness probes run."""
        return f"http://127.0.0.1:{self.port}"


@dataclass(frozen=True)
class VllmInstance(_Listening):
    host: HostPlan
    card: int
    index: int
    port: int

    @property
    def container_name(self) -> str:
        kind = self.host.kind
        return f"{kind.vllm_name_prefix}-{self.port}-{kind.device_label}-{self.card}"

    @property
    def label(self) -> str:
        return f"vLLM #{self.index + 1} of card {self.card} on host {self.host.name}"


@dataclass(frozen=True)
class PaddlexInstance(_Listening):
    host: HostPlan
    card: int
    index: int
    port: int
    vllm: VllmInstance

    @property
    def container_name(self) -> str:
        return f"paddle-{self.port}-{self.host.kind.device_label}-{self.card}"

    @property
    def pipeline_config_path(self) -> str:
        return f"{CONFIG_DIR_IN_CONTAINER}/pipeline_config_vllm-{self.port}.yaml"

    @property
    def service_script_path(self) -> str:
        """Where the start command keeps the service script, so a restart can run it again."""
        return f"{CONFIG_DIR_IN_CONTAINER}/start-paddlex-{self.port}.sh"

    @property
    def log_path(self) -> str:
        return f"{LOG_DIR_IN_CONTAINER}/paddle-{self.port}.log"

    @property
    def label(self) -> str:
        return f"PaddleX #{self.index + 1} of card {self.card} on host {self.host.name}"


@dataclass(frozen=True)
class CardPlan:
    host: HostPlan
    card: int
    vllm: tuple[VllmInstance, ...]
    paddlex: tuple[PaddlexInstance, ...]

    def bound_to(self, vllm: VllmInstance) -> tuple[PaddlexInstance, ...]:
        return tuple(p for p in self.paddlex if p.vllm == vllm)


@dataclass(frozen=True)
class KeeperPlan(_Listening):
    """The slice keeper beside a gateway, on its host: job slices go through it to the
    gateway's PaddleX instances (`gateway.keeper`)."""

    host: HostPlan
    port: int
    container_name: str

    @property
    def config_path(self) -> str:
        return f"{CONFIG_DIR_IN_CONTAINER}/keeper.json"


@dataclass(frozen=True)
class GatewayPlan(_Listening):
    host: HostPlan
    port: int
    container_name: str
    owns: str | None = None
    """The host whose PaddleX instances this gateway dispatches to; None: every host's."""
    keeper: KeeperPlan | None = None
    """Its slice keeper (config key `keeper`, on by default)."""

    @property
    def config_path(self) -> str:
        return f"{CONFIG_DIR_IN_CONTAINER}/gateway.json"


@dataclass(frozen=True)
class BalancerPlan(_Listening):
    """The balancer of the per-host layout: one container in front of every gateway."""

    host: HostPlan
    port: int
    container_name: str
    kind: str
    backends: tuple[GatewayPlan, ...]
    check_interval_s: float

    @property
    def config_path(self) -> str:
        return f"{CONFIG_DIR_IN_CONTAINER}/haproxy.cfg"

    @property
    def jobs_backend(self) -> GatewayPlan:
        """The gateway that takes the job API (its job store is its own): the balancer's
        host's, else the first; the others stand by for new jobs should it go down."""
        return next((g for g in self.backends if g.host == self.host), self.backends[0])


@dataclass(frozen=True)
class MonitoringPlan(_Listening):
    """Prometheus, on the gateway's host (config key `monitoring`), and the exporter of every
    host with cards (`exporter_port`, container `exporter_name` on each)."""

    host: HostPlan
    port: int
    container_name: str
    exporter_port: int = 9104
    exporter_name: str = "paddleocr-fleet-exporter"
    exporter_hosts: tuple[HostPlan, ...] = ()


@dataclass(frozen=True)
class JobStorePlan:
    """The stack's own PostgreSQL (config `jobsStore: postgres`) and the gateways it serves."""

    host: HostPlan
    port: int
    container_name: str
    gateways: tuple[GatewayPlan, ...]

    @property
    def remote(self) -> bool:
        """Whether a gateway on another host reaches it: then it listens on every address
        (with password authentication), else on its host's loopback alone."""
        return any(g.host.name != self.host.name for g in self.gateways)

    @property
    def listen_addresses(self) -> str:
        return "*" if self.remote else "127.0.0.1"

    def address_for(self, gateway: GatewayPlan) -> str:
        """Where `gateway` reaches it: its host's loopback, or the host's address."""
        return "127.0.0.1" if gateway.host.name == self.host.name else self.host.address


@dataclass(frozen=True)
class FleetPlan:
    hosts: tuple[HostPlan, ...]
    cards: tuple[CardPlan, ...]
    gateways: tuple[GatewayPlan, ...]
    balancer: BalancerPlan | None = None
    """Set in the per-host layout (`gatewayLayout: per-host`), in front of the gateways."""
    monitoring: MonitoringPlan | None = None
    """Prometheus (config key `monitoring`)."""
    job_store: JobStorePlan | None = None
    """The stack's own PostgreSQL (config key `jobsStore: postgres`)."""

    @property
    def layout(self) -> str:
        return "single" if self.balancer is None else "per-host"

    @property
    def gateway(self) -> GatewayPlan:
        """The fleet's one gateway (the single layout, or per-host with one host)."""
        if len(self.gateways) != 1:
            raise ValueError(f"{len(self.gateways)} gateways in this plan: read `gateways`")
        return self.gateways[0]

    @property
    def entry_url(self) -> str:
        """Where clients send documents: the balancer, else the one gateway."""
        return self.balancer.url if self.balancer is not None else self.gateway.url

    @property
    def vllm(self) -> tuple[VllmInstance, ...]:
        return tuple(v for c in self.cards for v in c.vllm)

    @property
    def paddlex(self) -> tuple[PaddlexInstance, ...]:
        return tuple(p for c in self.cards for p in c.paddlex)

    def paddlex_of(self, gateway: GatewayPlan) -> tuple[PaddlexInstance, ...]:
        """The upstreams of `gateway`, in plan order."""
        return tuple(p for p in self.paddlex if gateway.owns in (None, p.host.name))

    def cards_of(self, host: str) -> tuple[CardPlan, ...]:
        return tuple(c for c in self.cards if c.host.name == host)

    def card(self, host: str, card: int) -> CardPlan:
        return next(c for c in self.cards if c.host.name == host and c.card == card)

    def upstreams(self) -> list[str]:
        return [p.url for p in self.paddlex]

    def vllm_endpoints(self) -> list[str]:
        return [v.url for v in self.vllm]


Slot = tuple[str, int | None, str, int]
"""(host, card, role, index): a server's place in the fleet, which its resource names carry."""


def slot_ports(plan: FleetPlan) -> dict[Slot, int]:
    ports: dict[Slot, int] = {(v.host.name, v.card, "vllm", v.index): v.port for v in plan.vllm}
    ports.update({(p.host.name, p.card, "paddlex", p.index): p.port for p in plan.paddlex})
    for gateway in plan.gateways:
        ports[(gateway.host.name, None, "gateway", 0)] = gateway.port
        if gateway.keeper is not None:
            ports[(gateway.host.name, None, "keeper", 0)] = gateway.keeper.port
    if plan.balancer is not None:
        ports[(plan.balancer.host.name, None, "balancer", 0)] = plan.balancer.port
    return ports


def topology_ports(topology: Mapping[str, Any]) -> dict[Slot, int]:
    """The slots and ports of an earlier `topology` stack output (numbers may come back as
    floats from the engine)."""
    ports: dict[Slot, int] = {}
    for host in topology.get("hosts", []):
        for card in host.get("cards", []):
            paddlex, number = 0, int(card["card"])
            for index, vllm in enumerate(card.get("vllm", [])):
                ports[(host["name"], number, "vllm", index)] = int(vllm["port"])
                for server in vllm.get("paddlex", []):
                    ports[(host["name"], number, "paddlex", paddlex)] = int(server["port"])
                    paddlex += 1
    gateways = topology.get("gateways") or [topology.get("gateway") or {}]
    for gateway in gateways:
        if gateway:
            ports[(gateway["host"], None, "gateway", 0)] = int(gateway["port"])
            if gateway.get("keeper"):
                ports[(gateway["host"], None, "keeper", 0)] = int(gateway["keeper"]["port"])
    balancer = topology.get("balancer")
    if balancer:
        ports[(balancer["host"], None, "balancer", 0)] = int(balancer["port"])
    return ports


def port_clashes(previous: Mapping[Slot, int], plan: FleetPlan) -> list[str]:
    """Servers the plan moves onto a port that another running server holds until it is replaced.

    Pulumi replaces each server on its own (the old container deleted before its successor is
    created), in parallel, so a server may start while another one still holds its new port. A
    port move onto a port no other running server holds is safe.
    """
    held = {(slot[0], port): slot for slot, port in previous.items()}
    clashes = []
    for slot, port in slot_ports(plan).items():
        holder = held.get((slot[0], port))
        if holder is not None and holder != slot and previous.get(slot) != port:
            clashes.append(f"{_slot_name(slot)} -> {port} (held by {_slot_name(holder)})")
    return sorted(clashes)


def _slot_name(slot: Slot) -> str:
    host, card, role, index = slot
    return f"{host}-{role}" if card is None else f"{host}-card-{card}-{role}-{index}"


def port_order(host: HostSettings) -> list[int]:
    """Card ids in port-slot order: sorted, rotated so `portFirstCard` gets slot 0."""
    ordered = sorted(host.card_ids)
    if host.port_first_card is None:
        return ordered
    start = ordered.index(host.port_first_card)
    return ordered[start:] + ordered[:start]


def build_plan(settings: FleetSettings) -> FleetPlan:
    """Compute the whole topology; raise `ConfigError` on ports out of range or shared."""
    hosts: list[HostPlan] = []
    cards: list[CardPlan] = []
    for host_settings in settings.hosts:
        host = HostPlan(
            name=host_settings.name,
            address=host_settings.address,
            endpoint=host_settings.docker_endpoint,
            kind=KINDS[host_settings.accelerator],
            platform=host_settings.platform,
            build_args=tuple(sorted(host_settings.build_args.items())),
            former_names=host_settings.former_names,
        )
        hosts.append(host)
        slots = {card: slot for slot, card in enumerate(port_order(host_settings))}
        for card in sorted(host_settings.card_ids):
            cards.append(_plan_card(settings, host_settings, host, card, slots[card]))
    gateways, balancer = _plan_gateways(settings, tuple(hosts))
    monitoring = None
    if settings.monitoring:
        name = settings.gateway_container_name
        with_cards = tuple(h for h in hosts if any(c.host == h for c in cards))
        monitoring = MonitoringPlan(
            gateways[0].host,
            settings.prometheus_port,
            f"{name}-prometheus",
            settings.exporter_port,
            f"{name}-exporter",
            with_cards,
        )
    job_store = None
    if settings.jobs_store == "postgres":
        wanted = settings.jobs_store_host or gateways[0].host.name
        job_store = JobStorePlan(
            next(h for h in hosts if h.name == wanted),
            settings.jobs_store_port,
            f"{settings.gateway_container_name}-postgres",
            gateways,
        )
    plan = FleetPlan(tuple(hosts), tuple(cards), gateways, balancer, monitoring, job_store)
    _check_ports(plan, settings)
    return plan


def _plan_gateways(
    settings: FleetSettings, hosts: tuple[HostPlan, ...]
) -> tuple[tuple[GatewayPlan, ...], BalancerPlan | None]:
    """One gateway over the fleet; or, per host, one over that host's PaddleX and a balancer."""
    port, name = settings.gateway_port, settings.gateway_container_name

    def keeper(host: HostPlan) -> KeeperPlan | None:
        if not settings.keeper:
            return None
        return KeeperPlan(host, settings.keeper_port, f"{name}-keeper")

    if settings.gateway_layout == "single":
        host = next(h for h in hosts if h.name == settings.gateway_host_settings.name)
        return (GatewayPlan(host, port, name, keeper=keeper(host)),), None
    gateways = tuple(GatewayPlan(h, port, name, owns=h.name, keeper=keeper(h)) for h in hosts)
    wanted = settings.balancer_settings
    host = next(h for h in hosts if wanted.host in (None, h.name))
    balancer = BalancerPlan(
        host, wanted.port, wanted.container_name, wanted.kind, gateways, wanted.check_interval_s
    )
    return gateways, balancer


def _plan_card(
    settings: FleetSettings, host_settings: HostSettings, host: HostPlan, card: int, slot: int
) -> CardPlan:
    stride = settings.port_stride
    vllm = tuple(
        VllmInstance(host, card, i, host_settings.vllm_base_port + slot + i * stride)
        for i in range(settings.vllm_per_card)
    )
    paddlex = tuple(
        PaddlexInstance(
            host,
            card,
            j,
            host_settings.paddlex_base_port + slot + j * stride,
            vllm[j // settings.paddlex_per_vllm],
        )
        for j in range(settings.vllm_per_card * settings.paddlex_per_vllm)
    )
    return CardPlan(host, card, vllm, paddlex)


def _check_ports(plan: FleetPlan, settings: FleetSettings) -> None:
    single = len(plan.hosts) == 1
    used: dict[tuple[str, int], list[tuple[str, str]]] = defaultdict(list)
    for v in plan.vllm:
        key = _host_key(single, plan, v.host, "vllmBasePort")
        used[(v.host.name, v.port)].append((v.label, key))
    for p in plan.paddlex:
        key = _host_key(single, plan, p.host, "paddlexBasePort")
        used[(p.host.name, p.port)].append((p.label, key))
    for gateway in plan.gateways:
        used[(gateway.host.name, gateway.port)].append(("the gateway", "gatewayPort"))
        if gateway.keeper is not None:
            used[(gateway.host.name, gateway.keeper.port)].append(("the keeper", "keeperPort"))
    balancer = plan.balancer
    if balancer is not None:
        used[(balancer.host.name, balancer.port)].append(("the balancer", "balancer.port"))
    if plan.monitoring is not None:
        prometheus = plan.monitoring
        used[(prometheus.host.name, prometheus.port)].append(("Prometheus", "prometheusPort"))
        for host in prometheus.exporter_hosts:
            used[(host.name, prometheus.exporter_port)].append(("the exporter", "exporterPort"))
    if plan.job_store is not None:
        store = plan.job_store
        used[(store.host.name, store.port)].append(("PostgreSQL", "jobsStorePort"))
    for (host_name, port), users in used.items():
        if not 1 <= port <= 65535:
            label, key = users[0]
            raise ConfigError(f"config key '{key}': port {port} of {label} is outside 1..65535")
        if len(users) > 1:
            keys = sorted({k for _, k in users})
            services = {
                "gatewayPort",
                "balancer.port",
                "keeperPort",
                "prometheusPort",
                "jobsStorePort",
            }
            if not (services | {"exporterPort"}) & set(keys):
                keys.append("portStride")
            names = " and ".join(label for label, _ in users)
            raise ConfigError(
                f"config key '{'/'.join(keys)}': port {port} on host '{host_name}' is planned for "
                f"both {names}"
            )


def _host_key(single: bool, plan: FleetPlan, host: HostPlan, key: str) -> str:
    return key if single else f"hosts[{plan.hosts.index(host)}].{key}"
