"""`Balancer`: the HAProxy container of the per-host layout, in front of every host's gateway.

Its config (`components/haproxy.py`) is rendered once every gateway is ready, uploaded when the
container is created and, when it changes later (a host added or removed), checked and swapped
in by `docker exec`, then reloaded without dropping a connection.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from components import containers, haproxy
from components.configured import ConfiguredSpec, configured_container
from components.images import BuildSpec, build_image
from components.plan import BalancerPlan

BALANCER_BUILD = BuildSpec(context="config/balancer", repository="paddleocr-fleet/balancer")


@dataclass
class BalancerArgs:
    plan: BalancerPlan
    config: str
    """HAProxy's config (`haproxy.balancer_config`)."""
    image: str | None
    """A prebuilt image; None builds `config/balancer/Dockerfile` on the balancer's host."""
    gateways: list[pulumi.Output[str]]
    """Each gateway's URL, resolving once that gateway is ready."""
    guard: pulumi.Output[str] | None = None
    """Resolves when the plan may be applied; the image build waits for it."""


class Balancer(pulumi.ComponentResource):
    url: pulumi.Output[str]
    config: pulumi.Output[str]

    def __init__(self, name: str, args: BalancerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("paddleocr-fleet:fleet:Balancer", name, {}, opts)
        balancer = args.plan
        image: pulumi.Input[str] | None = args.image
        cleanups = []
        if image is None:
            image, cleanup = build_image(
                self, f"{name}-image", BALANCER_BUILD, balancer.host, args.guard
            )
            cleanups.append(cleanup)
        text = args.config
        self.config = pulumi.Output.all(*args.gateways).apply(lambda _: text)
        service = configured_container(
            self,
            name,
            ConfiguredSpec(
                container_name=balancer.container_name,
                image=image,
                argv=haproxy.balancer_argv(balancer),
                envs=[f"BALANCER_PORT={balancer.port}"],  # the image's healthcheck probes it
                labels=containers.labels("balancer", balancer.host, None, balancer.port),
                config_path=balancer.config_path,
                config=self.config,
                install_command=lambda _: haproxy.balancer_config_install_command(balancer),
                ready_command=lambda _: haproxy.balancer_ready_command(balancer),
                docker_env=balancer.host.docker_env,
            ),
            depends_on=cleanups,
        )
        self.container, self.install, self.ready = (
            service.container,
            service.install,
            service.ready,
        )
        self.url = self.ready.stdout.apply(lambda _: balancer.url)
        self.register_outputs({"url": self.url})
