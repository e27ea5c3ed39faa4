"""`Recycler`: the PaddleX recycler of one host (config key `recycle`; gateway/recycler).

A container of the gateway's image beside the host's PaddleX containers, the only one with the
host's Docker socket (container memory, restarts): not the gateway, which faces the network.
It drains and undrains through the admin API of the gateway that dispatches to the host's
instances, on its host or across hosts at its URL, so it authenticates with an admin token of
its own: made once per stack (`recycler_token`, kept secret in the state), named `recycler` in
the gateway's config (only its SHA-256), and handed to each recycler as a file. Not the
gateway's local token (it never leaves the gateway's container, and a recycler on another host
could not reach it), nor an operator's admin token (it would be copied onto every host, and
revoking the recyclers would mean rotating the operator's). An open gateway needs no token.

Its config is the file `render_config` gives; a changed config replaces the container (it keeps
nothing but counts since its start: gateway/recycler/counters.py).

    token = recycler_token(settings)       # None when the gateway takes no tokens
    config = render_config(settings, plan, host, with_token=token is not None)
    Recycler("local-recycler", RecyclerArgs(host, config, container_name(settings, host), image,
             token), pulumi.ResourceOptions(provider=provider))
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

import pulumi
import pulumi_command as command
import pulumi_docker as docker

from components import containers, rollout
from components.access import sha256_hex
from components.images import build_image
from components.plan import CONFIG_DIR_IN_CONTAINER, FleetPlan, GatewayPlan, HostPlan
from components.render import gateway as render
from components.settings import RECYCLER_TOKEN_NAME, FleetSettings
from gateway.wire import paddlex_routes

CONFIG_PATH = f"{CONFIG_DIR_IN_CONTAINER}/recycler.json"
TOKEN_PATH = f"{CONFIG_DIR_IN_CONTAINER}/recycler.token"
DOCKER_SOCKET = "/var/run/docker.sock"
TOKEN_COMMAND = "head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'"
"""64 hex digits from the kernel's random source, on the machine that runs `pulumi up`."""


def needs_token(settings: FleetSettings) -> bool:
    """Whether the gateways check tokens (else their admin routes are open to all)."""
    auth = render.gateway_settings(settings).auth
    return bool(auth.tokens or auth.admin_tokens)


def recycler_token(
    settings: FleetSettings, opts: pulumi.ResourceOptions | None = None
) -> pulumi.Output[str] | None:
    """The recyclers' admin token, made once and kept (a secret) in the stack's state; None
    when recycling is off or the gateways take no tokens."""
    if settings.recycle is None or not needs_token(settings):
        return None
    made = command.local.Command(
        "recycler-token",
        create=TOKEN_COMMAND,
        logging=command.local.Logging.NONE,
        opts=pulumi.ResourceOptions.merge(
            opts, pulumi.ResourceOptions(additional_secret_outputs=["stdout"])
        ),
    )
    return pulumi.Output.secret(made.stdout)


def admin_token_entry(token: pulumi.Output[str]) -> pulumi.Output[dict[str, str]]:
    """The gateway config's `auth.admin_tokens` entry of the recyclers' token (its SHA-256,
    not a secret: the config is shown in the stack's outputs)."""
    return pulumi.Output.unsecret(
        token.apply(lambda t: {"name": RECYCLER_TOKEN_NAME, "sha256": sha256_hex(t)})
    )


def gateway_of(plan: FleetPlan, host: HostPlan) -> GatewayPlan:
    """The gateway that dispatches to `host`'s PaddleX instances (one in either layout)."""
    return rollout.gateways_of(plan, plan.cards_of(host.name)[0])[0]


def docker_socket(host: HostPlan) -> str:
    """The engine's socket on the host: the endpoint's own path for a unix endpoint, else the
    default (an ssh:// or tcp:// endpoint reaches the engine that listens there too)."""
    parsed = urlparse(host.endpoint)
    return parsed.path if parsed.scheme == "unix" and parsed.path else DOCKER_SOCKET


def render_config(
    settings: FleetSettings, plan: FleetPlan, host: HostPlan, with_token: bool
) -> dict[str, Any]:
    """The recycler's config (gateway/recycler/config.py) for `host`'s PaddleX instances."""
    recycle = settings.recycle
    assert recycle is not None
    gateway = gateway_of(plan, host)
    return {
        "host": host.name,
        "gateway": {
            "url": gateway.local_url if gateway.host.name == host.name else gateway.url,
            "token_file": TOKEN_PATH if with_token else None,
        },
        "instances": [
            {
                "url": p.url,
                "health_url": p.local_url + paddlex_routes.HEALTH,
                "container": p.container_name,
                "card": p.card,
            }
            for card in plan.cards_of(host.name)
            for p in card.paddlex
        ],
        "max_memory_mb": recycle.max_memory_mb,
        "max_documents": recycle.max_documents,
        "check_interval_s": recycle.check_interval_s,
        "min_uptime_s": recycle.min_uptime_s,
        "drain_timeout_s": settings.drain_timeout,
        "ready_timeout_s": settings.paddlex_ready_timeout,
        "stop_grace_s": containers.STOP_GRACE_S,
        "docker_socket": DOCKER_SOCKET,
    }


def container_name(settings: FleetSettings, host: HostPlan) -> str:
    return f"{settings.gateway_container_name}-recycler-{host.name}"


ARGV = ["python", "-m", "gateway.recycler", "--config", CONFIG_PATH]

NO_HEALTHCHECK = docker.ContainerHealthcheckArgs(
    tests=["NONE"], interval="30s", timeout="30s", start_period="30s", retries=1
)
"""The image's healthcheck probes an HTTP port, and the recycler listens on none: off.

Its timings do nothing then, but are given: Docker fills each zero one (the provider's
default "0s", 0) from the image's HEALTHCHECK, and the provider reads the container's back on
every refresh (tf `resourceDockerContainerRead`), so the defaults came back as the gateway
image's 10s/3s/5s/3 and every preview planned an in-place update. Non-zero and written as Go
formats a duration, they read back as written. `start_interval` stays "0s": the image sets
none, and an engine older than API 1.44 drops it (it would read back "0s" anyway).

A changed healthcheck replaces the container (`replace_on_changes`): the provider's in-place
update writes it to the state only (tf `resourceDockerContainerUpdate`), so a recycler made
with the old zero timings would differ from the state on every refresh after."""


@dataclass
class RecyclerArgs:
    host: HostPlan
    config: dict[str, Any]
    """Its config (`render_config`)."""
    container_name: str
    image: pulumi.Input[str] | None
    """The gateway's image on this host; None builds it here (a host without a gateway)."""
    token: pulumi.Output[str] | None
    guard: pulumi.Output[str] | None = None
    """Resolves when the plan may be applied; an image build waits for it."""
    depends_on: list[pulumi.Resource] = field(default_factory=list)
    """What the container waits for: the gateway (it drains through it) and the image's
    cleanup."""


class Recycler(pulumi.ComponentResource):
    def __init__(self, name: str, args: RecyclerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("paddleocr-fleet:fleet:Recycler", name, {}, opts)
        host, image, waits = args.host, args.image, list(args.depends_on)
        if image is None:
            from components.gateway import GATEWAY_BUILD

            image, cleanup = build_image(self, f"{name}-image", GATEWAY_BUILD, host, args.guard)
            waits.append(cleanup)
        config = args.config
        uploads = [
            docker.ContainerUploadArgs(
                file=CONFIG_PATH, content=json.dumps(config, indent=2, sort_keys=True) + "\n"
            )
        ]
        if args.token is not None:
            uploads.append(docker.ContainerUploadArgs(file=TOKEN_PATH, content=args.token))
        self.container = containers.host_container(
            name,
            container_name=args.container_name,
            image=image,
            argv=ARGV,
            uploads=uploads,
            healthcheck=NO_HEALTHCHECK,
            volumes=[
                docker.ContainerVolumeArgs(
                    host_path=docker_socket(host), container_path=DOCKER_SOCKET
                )
            ],
            labels=[
                label
                for label in containers.labels("recycler", host, None, 0)
                if label.label != containers.PORT_LABEL  # it listens on no port
            ],
            opts=containers.child_opts(self, depends_on=waits, replace_on_changes=["healthcheck"]),
        )
        self.register_outputs({"container": self.container.name})
