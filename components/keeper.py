"""`SliceKeeper`: the container beside a gateway that job slices go through to its PaddleX
instances (`gateway.keeper`), listening on its host's loopback only. It runs the gateway's
image and outlives the gateway process: a
gateway that dies mid-job finds, on its restart, the slices it had running instead of parsing
them again. Its config (the instances it may call) is swapped in by `docker exec` when the
fleet changes, so growing the fleet does not replace it.

A keeper that must be replaced (a new image) is handed over as the gateway is
(`components.gateway`): the new container, named with a hash of its generation, starts beside
the old one, takes its listening socket over through a host folder both mount, and serves
(its serving file) before Pulumi deletes the old one, which finishes the slice calls it holds.
The answers the old one kept in memory go with it: a gateway that is alive has them already.

    keeper = SliceKeeper("local-gateway-keeper", SliceKeeperArgs(plan.gateway.keeper, upstreams,
                         image), pulumi.ResourceOptions(parent=gateway))
    keeper.installed  # the config install; the gateway's own waits for it
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_docker as docker

from components.configured import handed_over_container
from components.plan import KeeperPlan
from components.render import keeper as render
from components.render.common import config_install_command


@dataclass
class SliceKeeperArgs:
    plan: KeeperPlan
    upstreams: pulumi.Output[list[dict[str, Any]]]
    """The gateway's upstream entries (resolved once every PaddleX is ready)."""
    image: pulumi.Input[str]
    depends_on: Sequence[pulumi.Resource] = field(default_factory=list)
    """What the container waits for (the image's cleanup command)."""


class SliceKeeper(pulumi.ComponentResource):
    url: pulumi.Output[str]

    def __init__(
        self, name: str, args: SliceKeeperArgs, opts: pulumi.ResourceOptions | None = None
    ):
        super().__init__("paddleocr-fleet:fleet:SliceKeeper", name, {}, opts)
        keeper = args.plan
        handover_dir = render.keeper_handover_dir(keeper, pulumi.get_stack())
        service = handed_over_container(
            self,
            name,
            "keeper",
            keeper,
            args.image,
            render.keeper_argv(keeper),
            args.upstreams.apply(render.keeper_config_json),
            install_command=lambda c: config_install_command(c, keeper.config_path),
            ready_command=lambda c: render.keeper_ready_command(keeper, c),
            folder=docker.ContainerVolumeArgs(
                host_path=handover_dir, container_path=render.KEEPER_HANDOVER_DIR_IN_CONTAINER
            ),
            depends_on=args.depends_on,
            handover=handover_dir,
        )
        self.container, self.installed, self.ready = (
            service.container,
            service.install,
            service.ready,
        )
        self.container_name: pulumi.Output[str] = self.container.name
        self.url = self.ready.stdout.apply(lambda _: keeper.local_url)
        self.register_outputs({"url": self.url})
