"""`SliceKeeper`: the container beside a gateway that job slices go through to its PaddleX
instances (`gateway.keeper`), listening on its host's loopback only. It runs the gateway's
image and outlives the gateway process: a
gateway that dies mid-job finds, on its restart, the slices it had running instead of parsing
them again. Its config (the instances it may call) is swapped in by `docker exec` when the
fleet changes, so growing the fleet does not replace it.

    keeper = SliceKeeper("local-gateway-keeper", SliceKeeperArgs(plan.gateway.keeper, upstreams,
                         image), pulumi.ResourceOptions(parent=gateway))
    keeper.installed  # the config install; the gateway's own waits for it
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_command as command
import pulumi_docker as docker

from components import containers, render
from components.plan import KeeperPlan


@dataclass
class SliceKeeperArgs:
    plan: KeeperPlan
    upstreams: pulumi.Output[list[dict[str, Any]]]
    """The gateway's upstream entries (resolved once every PaddleX is ready)."""
    image: pulumi.Input[str]
    depends_on: list[pulumi.Resource] = field(default_factory=list)
    """What the container waits for (the image's cleanup command)."""


class SliceKeeper(pulumi.ComponentResource):
    url: pulumi.Output[str]

    def __init__(
        self, name: str, args: SliceKeeperArgs, opts: pulumi.ResourceOptions | None = None
    ):
        super().__init__("paddleocr-fleet:fleet:SliceKeeper", name, {}, opts)
        keeper = args.plan
        config_json = args.upstreams.apply(render.keeper_config_json)
        argv = render.keeper_argv(keeper)
        self.container = docker.Container(
            name,
            name=keeper.container_name,
            image=args.image,
            network_mode="host",
            restart="unless-stopped",
            entrypoints=argv[:1],
            command=argv[1:],
            envs=[f"GATEWAY_PORT={keeper.port}"],  # the image's healthcheck probes its /health
            uploads=[docker.ContainerUploadArgs(file=keeper.config_path, content=config_json)],
            labels=containers.labels("keeper", keeper.host, None, keeper.port),
            destroy_grace_seconds=containers.STOP_GRACE_S,
            # Later configs arrive through `install` below and are read again in place.
            opts=containers.child_opts(
                self, ignore_changes=["uploads"], depends_on=args.depends_on
            ),
        )
        self.installed = command.local.Command(
            f"{name}-config",
            create=render.config_install_command(keeper.container_name, keeper.config_path),
            stdin=config_json,
            environment=keeper.host.docker_env,
            triggers=[self.container.id, config_json.apply(render.content_hash)],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.container]),
        )
        self.ready = command.local.Command(
            f"{name}-ready",
            create=render.keeper_ready_command(keeper),
            environment=keeper.host.docker_env,
            triggers=[self.container.id],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.installed]),
        )
        self.url = self.ready.stdout.apply(lambda _: keeper.local_url)
        self.register_outputs({"url": self.url})
