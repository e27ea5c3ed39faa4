"""`Gateway`: the OCR gateway container; its config derives from the PaddleX servers' outputs and
is swapped in by `docker exec` (the gateway reloads it without a restart). Beside it, on the same
image, its slice keeper (`components.keeper`) unless the config key `keeper` is false.

A gateway that must be replaced (a new image, new arguments) is replaced without a gap: the new
container is created first, beside the old one (its name carries a hash of what forced the
replacement: `render.gateway_container_name`), takes over the old one's listening sockets
through the handover path (gateway/server/listeners.py), gets its config and answers `/ready`; only
then does Pulumi delete the old one (`docker stop` with `STOP_GRACE_S`: it finishes what it
holds). The keeper is still replaced delete-first: while it is away the gateway sends job slices
straight to their instances (gateway/keeper/client.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
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
    admin_tokens: list[pulumi.Output[dict[str, str]]] = field(default_factory=list)
    """Admin tokens of the stack's own (name and SHA-256: the recyclers')."""


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
        self.config_json = pulumi.Output.all(entries, *args.admin_tokens).apply(
            lambda found: render.gateway_config_json(
                settings, found[0], gateway.keeper, list(found[1:])
            )
        )
        argv = render.gateway_argv(gateway)
        envs = [f"GATEWAY_PORT={gateway.port}"]  # the image's healthcheck probes it
        jobs_dir = (
            settings.gateway_jobs_dir or f"/var/lib/paddleocr-fleet/{pulumi.get_stack()}/jobs"
        )
        labels = containers.labels("gateway", gateway.host, None, gateway.port)
        generation = pulumi.Output.from_input(image).apply(
            lambda image_id: {
                "image": image_id,
                "argv": argv,
                "envs": envs,
                "jobs_dir": jobs_dir,
                "labels": {label.label: label.value for label in labels},
            }
        )
        self.container = docker.Container(
            name,
            name=generation.apply(lambda g: render.gateway_container_name(gateway, g)),
            image=image,
            network_mode="host",
            restart="unless-stopped",
            entrypoints=argv[:1],
            command=argv[1:],
            envs=envs,
            volumes=[
                docker.ContainerVolumeArgs(
                    host_path=jobs_dir, container_path=render.JOBS_DIR_IN_CONTAINER
                )
            ],
            uploads=[
                docker.ContainerUploadArgs(file=gateway.config_path, content=self.config_json)
            ],
            labels=labels,
            destroy_grace_seconds=containers.STOP_GRACE_S,
            # Later configs arrive through `install` below and are reloaded in place. Created
            # before the old one is deleted: the listening sockets pass from one to the other.
            opts=containers.child_opts(
                self,
                args.provider,
                delete_before_replace=False,
                ignore_changes=["uploads"],
                depends_on=cleanups,
            ),
        )
        self.container_name: pulumi.Output[str] = self.container.name
        self.image, self.cleanups = image, cleanups
        """The image, for the recyclers of its host (components/recycler.py), and what a
        container of it waits for."""
        self.install = command.local.Command(
            f"{name}-config",
            create=self.container.name.apply(
                lambda container: render.gateway_config_install_command(gateway, container)
            ),
            stdin=self.config_json,
            environment=gateway.host.docker_env,
            triggers=[self.container.id, self.config_json.apply(render.content_hash)],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.container, *waits]),
        )
        self.ready = command.local.Command(
            f"{name}-ready",
            create=self.container.name.apply(
                lambda container: render.gateway_ready_command(gateway, container)
            ),
            environment=gateway.host.docker_env,
            triggers=[self.container.id],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.install]),
        )
        self.url = self.ready.stdout.apply(lambda _: gateway.url)
        self.register_outputs({"url": self.url, "config": self.config_json.apply(json.loads)})
