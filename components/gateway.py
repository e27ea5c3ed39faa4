"""`Gateway`: the OCR gateway container; its config derives from the PaddleX servers' outputs and
is swapped in by `docker exec` (the gateway reloads it without a restart). Beside it, on the same
image, its slice keeper (`components.keeper`) unless the config key `keeper` is false."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_command as command
import pulumi_docker as docker

from components import containers, render
from components.images import BuildSpec, build_image
from components.keeper import SliceKeeper, SliceKeeperArgs
from components.plan import GatewayPlan
from components.settings import FleetSettings

GATEWAY_BUILD = BuildSpec(context="gateway", repository="paddleocr-fleet/gateway")


@dataclass
class GatewayArgs:
    settings: FleetSettings
    plan: GatewayPlan
    upstreams: list[pulumi.Output[dict[str, Any]]]
    """One entry per PaddleX server, each resolving once that server is ready."""
    image: pulumi.Input[str] | None = None
    """A prebuilt image; None builds `gateway/Dockerfile` on the gateway's host."""
    provider: pulumi.ProviderResource | None = None
    guard: pulumi.Output[str] | None = None
    """Resolves when the plan may be applied; the image build waits for it."""


class Gateway(pulumi.ComponentResource):
    url: pulumi.Output[str]
    config_json: pulumi.Output[str]

    def __init__(self, name: str, args: GatewayArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("paddleocr-fleet:fleet:Gateway", name, {}, opts)
        settings, gateway = args.settings, args.plan
        image, cleanups = args.image, []
        if image is None:
            image, cleanup = build_image(
                self, f"{name}-image", GATEWAY_BUILD, gateway.host, args.provider, args.guard
            )
            cleanups.append(cleanup)
        entries = pulumi.Output.all(*args.upstreams).apply(list)
        self.keeper: SliceKeeper | None = None
        waits: list[pulumi.Resource] = []
        if gateway.keeper is not None:
            self.keeper = SliceKeeper(
                f"{name}-keeper",
                SliceKeeperArgs(gateway.keeper, entries, image, args.provider, cleanups),
                pulumi.ResourceOptions(parent=self),
            )
            waits.append(self.keeper.installed)  # new instances reach it before the gateway
        self.config_json = entries.apply(
            lambda found: render.gateway_config_json(settings, found, gateway.keeper)
        )
        argv = render.gateway_argv(gateway)
        self.container = docker.Container(
            name,
            name=gateway.container_name,
            image=image,
            network_mode="host",
            restart="unless-stopped",
            entrypoints=argv[:1],
            command=argv[1:],
            envs=[f"GATEWAY_PORT={gateway.port}"],  # the image's healthcheck probes it
            volumes=[
                docker.ContainerVolumeArgs(
                    host_path=settings.gateway_jobs_dir
                    or f"/var/lib/paddleocr-fleet/{pulumi.get_stack()}/jobs",
                    container_path=render.JOBS_DIR_IN_CONTAINER,
                )
            ],
            uploads=[
                docker.ContainerUploadArgs(file=gateway.config_path, content=self.config_json)
            ],
            labels=containers.labels("gateway", gateway.host, None, gateway.port),
            destroy_grace_seconds=containers.STOP_GRACE_S,
            # Later configs arrive through `install` below and are reloaded in place.
            opts=containers.child_opts(
                self, args.provider, ignore_changes=["uploads"], depends_on=cleanups
            ),
        )
        self.install = command.local.Command(
            f"{name}-config",
            create=render.gateway_config_install_command(gateway),
            stdin=self.config_json,
            environment=gateway.host.docker_env,
            triggers=[self.container.id, self.config_json.apply(render.content_hash)],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.container, *waits]),
        )
        self.ready = command.local.Command(
            f"{name}-ready",
            create=render.gateway_ready_command(gateway),
            environment=gateway.host.docker_env,
            triggers=[self.container.id],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.install]),
        )
        self.url = self.ready.stdout.apply(lambda _: gateway.url)
        self.register_outputs({"url": self.url, "config": self.config_json.apply(json.loads)})
