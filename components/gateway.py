"""`Gateway`: the OCR gateway container; its config derives from the PaddleX servers' outputs and
is swapped in by `docker exec` (the gateway reloads it without a restart). Beside it, on the same
image, its slice keeper (`components.keeper`) unless the config key `keeper` is false.

A gateway that must be replaced (a new image, new arguments) is replaced without a gap: the new
container is created first, beside the old one (its name carries a hash of what forced the
replacement: `containers.generation_named`), takes over the old one's listening sockets
through the handover path (gateway/server/listeners.py), gets its config, and serves (its
serving file: `render.gateway_ready_command`); only then does Pulumi delete the old one
(`docker stop` with `STOP_GRACE_S`: it finishes what it holds). The keeper is handed over the
same way (components/keeper.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_docker as docker

from components.configured import handed_over_container
from components.images import BuildSpec, build_image
from components.keeper import SliceKeeper, SliceKeeperArgs
from components.plan import GatewayPlan
from components.render import gateway as render
from components.render.gateway import config_json as render_config
from components.render.gateway import config_with_upstreams
from gateway.config.store_url import safe_url

GATEWAY_BUILD = BuildSpec(context="gateway", repository="paddleocr-fleet/gateway")


@dataclass
class GatewayArgs:
    plan: GatewayPlan
    base_config: dict[str, Any]
    """The config before its upstreams (`render.gateway.gateway_base_config`)."""
    jobs_dir: str
    """The host folder of its jobs (`gatewayJobsDir`)."""
    upstreams: list[pulumi.Output[dict[str, Any]]]
    """One entry per PaddleX server, each resolving once that server is ready."""
    image: pulumi.Input[str] | None = None
    """A prebuilt image; None builds `gateway/Dockerfile` on the gateway's host."""
    guard: pulumi.Output[str] | None = None
    """Resolves when the plan may be applied; the image build waits for it."""
    admin_tokens: list[pulumi.Output[dict[str, str]]] = field(default_factory=list)
    """Admin tokens of the stack's own (name and SHA-256: the recyclers')."""
    store_url: pulumi.Output[str] | None = None
    """Its `jobs.store_url` when the stack runs the job store (components/jobstore.py): a
    secret that resolves once the database accepts connections."""


def with_store_url(config: dict[str, Any], url: str) -> dict[str, Any]:
    """`config` with `jobs.store_url` set to `url` (unless empty: the stack runs no store)."""
    if url:
        config["jobs"] = {**config.get("jobs", {}), "store_url": url}
    return config


def shared_store(args: GatewayArgs) -> pulumi.Output[str]:
    """`host:port/database` of the gateway's shared job store ('' for its own SQLite store).

    Part of its generation: a gateway opens its store at start and a config reload does not
    move it (gateway/runtime.py), so a gateway whose store changes (`jobsStore`, `jobsStoreUrl`)
    is replaced, with the handover, rather than keeping the old store behind a new config. No
    password in it: it names the container."""
    if args.store_url is not None:
        return pulumi.Output.unsecret(args.store_url.apply(safe_url))
    url = args.base_config.get("jobs", {}).get("store_url")
    return pulumi.Output.from_input(safe_url(url) if url else "")


class Gateway(pulumi.ComponentResource):
    url: pulumi.Output[str]
    config_json: pulumi.Output[str]

    def __init__(self, name: str, args: GatewayArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("paddleocr-fleet:fleet:Gateway", name, {}, opts)
        gateway, jobs_dir = args.plan, args.jobs_dir
        image, cleanups = args.image, []
        if image is None:
            image, cleanup = build_image(
                self, f"{name}-image", GATEWAY_BUILD, gateway.host, args.guard
            )
            cleanups.append(cleanup)
        entries = pulumi.Output.all(*args.upstreams).apply(list)
        self.keeper: SliceKeeper | None = None
        waits: list[pulumi.Resource] = []
        if gateway.keeper is not None:
            self.keeper = SliceKeeper(
                f"{name}-keeper",
                SliceKeeperArgs(gateway.keeper, entries, image, cleanups),
                pulumi.ResourceOptions(parent=self),
            )
            waits.append(self.keeper.installed)  # new instances reach it before the gateway
        store_url = args.store_url if args.store_url is not None else ""
        self.config_json = pulumi.Output.all(entries, store_url, *args.admin_tokens).apply(
            lambda found: render_config(
                with_store_url(
                    config_with_upstreams(
                        args.base_config, found[0], gateway.keeper, list(found[2:])
                    ),
                    found[1],
                )
            )
        )
        # it holds the database's password
        if args.store_url is not None or "store_url" in args.base_config.get("jobs", {}):
            self.config_json = pulumi.Output.secret(self.config_json)
        service = handed_over_container(
            self,
            name,
            "gateway",
            gateway,
            image,
            render.gateway_argv(gateway),
            self.config_json,
            install_command=lambda c: render.gateway_config_install_command(gateway, c),
            ready_command=lambda c: render.gateway_ready_command(gateway, c),
            folder=docker.ContainerVolumeArgs(
                host_path=jobs_dir, container_path=render.JOBS_DIR_IN_CONTAINER
            ),
            depends_on=cleanups,
            install_waits=waits,
            jobs_dir=jobs_dir,
            jobs_store=shared_store(args),
        )
        self.container, self.install, self.ready = (
            service.container,
            service.install,
            service.ready,
        )
        self.container_name: pulumi.Output[str] = self.container.name
        self.image, self.cleanups = image, cleanups
        """The image, for the recyclers of its host (components/recycler.py), and what a
        container of it waits for."""
        self.url = self.ready.stdout.apply(lambda _: gateway.url)
        self.register_outputs({"url": self.url, "config": self.config_json.apply(json.loads)})
