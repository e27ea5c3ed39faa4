"""`Balancer`: the HAProxy container of the per-host layout, in front of every host's gateway.

Its config (`components/haproxy.py`) is rendered once every gateway is ready, uploaded when the
container is created and, when it changes later (a host added or removed), checked and swapped
in by `docker exec`, then reloaded without dropping a connection.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_command as command
import pulumi_docker as docker

from components import containers, haproxy, render
from components.images import BuildSpec, build_image
from components.plan import FleetPlan
from components.settings import FleetSettings

BALANCER_BUILD = BuildSpec(context="config/balancer", repository="paddleocr-fleet/balancer")


@dataclass
class BalancerArgs:
    settings: FleetSettings
    plan: FleetPlan
    gateways: list[pulumi.Output[str]]
    """Each gateway's URL, resolving once that gateway is ready."""
    guard: pulumi.Output[str] | None = None
    """Resolves when the plan may be applied; the image build waits for it."""


class Balancer(pulumi.ComponentResource):
    url: pulumi.Output[str]
    config: pulumi.Output[str]

    def __init__(self, name: str, args: BalancerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("paddleocr-fleet:fleet:Balancer", name, {}, opts)
        settings, plan = args.settings, args.plan
        balancer = haproxy.balancer_of(plan)
        image: pulumi.Input[str] | None = settings.balancer_settings.image
        cleanups = []
        if image is None:
            image, cleanup = build_image(
                self, f"{name}-image", BALANCER_BUILD, balancer.host, args.guard
            )
            cleanups.append(cleanup)
        text = haproxy.balancer_config(settings, plan)
        self.config = pulumi.Output.all(*args.gateways).apply(lambda _: text)
        argv = haproxy.balancer_argv(balancer)
        self.container = docker.Container(
            name,
            name=balancer.container_name,
            image=image,
            network_mode="host",
            restart="unless-stopped",
            entrypoints=argv[:1],
            command=argv[1:],
            envs=[f"BALANCER_PORT={balancer.port}"],  # the image's healthcheck probes it
            uploads=[docker.ContainerUploadArgs(file=balancer.config_path, content=self.config)],
            labels=containers.labels("balancer", balancer.host, None, balancer.port),
            destroy_grace_seconds=containers.STOP_GRACE_S,
            # Later configs arrive through `install` below and are reloaded in place.
            opts=containers.child_opts(self, ignore_changes=["uploads"], depends_on=cleanups),
        )
        env = balancer.host.docker_env
        self.install = command.local.Command(
            f"{name}-config",
            create=haproxy.balancer_config_install_command(balancer),
            stdin=self.config,
            environment=env,
            triggers=[self.container.id, self.config.apply(render.content_hash)],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.container]),
        )
        self.ready = command.local.Command(
            f"{name}-ready",
            create=haproxy.balancer_ready_command(balancer),
            environment=env,
            triggers=[self.container.id],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.install]),
        )
        self.url = self.ready.stdout.apply(lambda _: balancer.url)
        self.register_outputs({"url": self.url})
