"""`Monitoring`: Prometheus on the gateway's host (config key `monitoring`), built from
`monitoring/Dockerfile` (Debian's prometheus on the project's base image, the fleet's alert
rules baked in), its data in a host folder that outlives the container, retention bounded by
time and size.

Beside it, on every host with cards, the host exporter (`monitoring/exporter.py`, from the same
image): each container's memory and state, read from that host's Docker engine (its socket
mounted read-only), for the PaddleX memory alert, and its `up` for HostUnreachable.

Its targets are files in the container (file-based service discovery) that the stack swaps in
by `docker exec`, as it does the gateway's config: growing the fleet rewrites them and
Prometheus reads them again, with no restart. A vLLM becomes a target once it has loaded its
model, so a growing fleet raises no InstanceDown. The gateway's `/metrics` needs an admin
token when the stack has tokens: the `adminTokens` entry named `prometheus`, else the first,
is uploaded into the container (a Pulumi secret).

    args = MonitoringArgs(plan.monitoring, scrape_targets(plan),
                          prometheus_argv(settings, plan.monitoring), scrape_token(settings), ...)
    monitoring = Monitoring("local-monitoring", args, pulumi.ResourceOptions(provider=provider))
    monitoring.url   # stack output `prometheus_url`
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_command as command
import pulumi_docker as docker

from components import containers
from components.images import BuildSpec, build_image
from components.plan import FleetPlan, HostPlan, MonitoringPlan
from components.render import common as render
from components.settings import ConfigError, FleetSettings

PROMETHEUS_BUILD = BuildSpec(context="monitoring", repository="paddleocr-fleet/prometheus")
DATA_DIR_IN_CONTAINER = "/prometheus"
TARGETS_DIR = "/etc/prometheus/targets"
TOKEN_FILE = "/etc/prometheus/secrets/gateway.token"
ROLES = ("gateway", "keeper", "vllm", "host")
EXPORTER = "/opt/paddleocr-fleet/exporter.py"
HOST_SOCKET = "/var/run/docker.sock"


def scrape_targets(plan: FleetPlan) -> dict[str, list[dict[str, Any]]]:
    """The file-SD documents by role: every gateway, the keepers of Prometheus' own host (they
    listen on its loopback only) and every vLLM, each labelled with its role and host (and a
    vLLM with its card and container)."""
    monitoring = plan.monitoring
    assert monitoring is not None
    out: dict[str, list[dict[str, Any]]] = {role: [] for role in ROLES}
    for gateway in plan.gateways:
        address = "127.0.0.1" if gateway.host == monitoring.host else gateway.host.address
        labels = {"role": "gateway", "host": gateway.host.name}
        out["gateway"].append({"targets": [f"{address}:{gateway.port}"], "labels": labels})
        keeper = gateway.keeper
        if keeper is not None and keeper.host == monitoring.host:
            labels = {"role": "keeper", "host": keeper.host.name}
            out["keeper"].append({"targets": [f"127.0.0.1:{keeper.port}"], "labels": labels})
    for vllm in plan.vllm:
        labels = {
            "role": "vllm",
            "host": vllm.host.name,
            "card": str(vllm.card),
            "container": vllm.container_name,
        }
        out["vllm"].append({"targets": [f"{vllm.host.address}:{vllm.port}"], "labels": labels})
    for host in monitoring.exporter_hosts:
        address = "127.0.0.1" if host == monitoring.host else host.address
        labels = {"role": "host", "host": host.name}
        target = f"{address}:{monitoring.exporter_port}"
        out["host"].append({"targets": [target], "labels": labels})
    return out


def host_socket(host: HostPlan) -> str:
    """The Docker engine's socket on `host` itself (its unix endpoint, else the default)."""
    endpoint = host.endpoint or ""
    return endpoint.removeprefix("unix://") if endpoint.startswith("unix://") else HOST_SOCKET


def exporter_argv(monitoring: MonitoringPlan, stack_label: str) -> list[str]:
    return [
        "/usr/bin/tini", "--", "python3", EXPORTER,
        "--port", str(monitoring.exporter_port), "--stack", stack_label,
    ]  # fmt: skip


def scrape_token(settings: FleetSettings) -> str:
    """The admin token Prometheus presents to the gateways ('' for an open gateway)."""
    admins = settings.admin_tokens
    if not admins:
        if settings.tokens:
            raise ConfigError(
                "config key 'monitoring': Prometheus reads the gateway's /metrics with an admin "
                "token, and this stack has user tokens only: add one with `pulumi config set "
                '--secret --path adminTokens.prometheus "$(openssl rand -hex 32)"`'
            )
        return ""
    chosen = admins.get("prometheus") or next(iter(admins.values()))
    return chosen.get_secret_value()


def prometheus_argv(settings: FleetSettings, monitoring: MonitoringPlan) -> list[str]:
    return [
        "--config.file=/etc/prometheus/fleet.yml",
        f"--storage.tsdb.path={DATA_DIR_IN_CONTAINER}",
        f"--storage.tsdb.retention.time={settings.prometheus_retention}",
        f"--storage.tsdb.retention.size={settings.prometheus_retention_size}",
        f"--web.listen-address=:{monitoring.port}",
    ]


def _role_targets(role: str, targets: dict[str, Any]) -> str:
    """The scrape targets file of one role (a file_sd JSON list)."""
    return json.dumps(targets[role], indent=1) + "\n"


@dataclass
class MonitoringArgs:
    plan: MonitoringPlan
    targets: dict[str, list[dict[str, Any]]]
    """The file-SD documents by role (`scrape_targets`)."""
    argv: list[str]
    """Prometheus' arguments (`prometheus_argv`)."""
    token: str
    """The admin token it reads the gateways' /metrics with (`scrape_token`; '' for none)."""
    image: str | None
    """A prebuilt image; None builds `monitoring/Dockerfile` on each of its hosts."""
    data_dir: str
    """The host folder of its data."""
    waits: list[pulumi.Output[Any]] = field(default_factory=list)
    """What the targets wait for (each vLLM's readiness): a target is written once it serves."""
    exporter_providers: dict[str, pulumi.ProviderResource] = field(default_factory=dict)
    """The Docker provider of each exporter host other than Prometheus' own, by name (its own
    comes in the component's opts, which carry one provider per package)."""
    guard: pulumi.Output[str] | None = None


class Monitoring(pulumi.ComponentResource):
    url: pulumi.Output[str]

    def __init__(self, name: str, args: MonitoringArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("paddleocr-fleet:fleet:Monitoring", name, {}, opts)
        monitoring, token = args.plan, args.token
        images: dict[str, tuple[pulumi.Input[str], list[pulumi.Resource]]] = {}
        for host in {h.name: h for h in (monitoring.host, *monitoring.exporter_hosts)}.values():
            if args.image:
                images[host.name] = (args.image, [])
            else:
                built, cleanup = build_image(
                    self,
                    f"{name}-image" if host == monitoring.host else f"{name}-image-{host.name}",
                    PROMETHEUS_BUILD,
                    host,
                    args.guard,
                    args.exporter_providers.get(host.name),
                )
                images[host.name] = (built, [cleanup])
        image, depends = images[monitoring.host.name]
        data_dir = args.data_dir
        self.container = containers.host_container(
            name,
            container_name=monitoring.container_name,
            image=image,
            command=args.argv,
            volumes=[
                docker.ContainerVolumeArgs(host_path=data_dir, container_path=DATA_DIR_IN_CONTAINER)
            ],
            uploads=[
                docker.ContainerUploadArgs(file=TOKEN_FILE, content=pulumi.Output.secret(token))
            ],
            labels=containers.labels("prometheus", monitoring.host, None, monitoring.port),
            opts=containers.child_opts(self, depends_on=depends),
        )
        self.exporters = [
            containers.host_container(
                f"{name}-exporter-{host.name}",
                container_name=monitoring.exporter_name,
                image=images[host.name][0],
                stop_grace_s=None,
                argv=exporter_argv(monitoring, containers.stack_label()),
                volumes=[
                    docker.ContainerVolumeArgs(
                        host_path=host_socket(host), container_path=HOST_SOCKET, read_only=True
                    )
                ],
                labels=containers.labels("exporter", host, None, monitoring.exporter_port),
                opts=containers.child_opts(
                    self,
                    provider=args.exporter_providers.get(host.name),
                    depends_on=images[host.name][1],
                ),
            )
            for host in monitoring.exporter_hosts
        ]
        targets = pulumi.Output.all(*args.waits).apply(lambda _: args.targets)
        self.targets: list[command.local.Command] = []
        for role in ROLES:
            content = targets.apply(functools.partial(_role_targets, role))
            self.targets.append(
                command.local.Command(
                    f"{name}-targets-{role}",
                    create=render.config_install_command(
                        monitoring.container_name, f"{TARGETS_DIR}/{role}.json"
                    ),
                    stdin=content,
                    environment=monitoring.host.docker_env,
                    triggers=[self.container.id, content.apply(render.content_hash)],
                    opts=pulumi.ResourceOptions(parent=self, depends_on=[self.container]),
                )
            )
        self.ready = command.local.Command(
            f"{name}-ready",
            create=render.service_ready_command(monitoring, "Prometheus", "/-/ready"),
            environment=monitoring.host.docker_env,
            triggers=[self.container.id],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.container]),
        )
        self.url = self.ready.stdout.apply(lambda _: monitoring.url)
        self.register_outputs({"url": self.url})
