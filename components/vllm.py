"""`VllmServer`: one vLLM container serving the VL model, and a bounded wait until it is ready."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_command as command

from components import containers
from components.render.vllm import VllmLaunch


@dataclass
class VllmServerArgs:
    launch: VllmLaunch
    image: pulumi.Input[str]
    after: pulumi.Input[list[pulumi.Resource]] | None = None
    """What the container waits for before it is created or replaced (the rollout's wave
    before this card's)."""


class VllmServer(pulumi.ComponentResource):
    """The vLLM container (host network, the kind's devices) and its readiness wait.

    `url` resolves only once `/v1/models` lists the served model, so whatever consumes it starts
    after the model is loaded.
    """

    url: pulumi.Output[str]
    ready: command.local.Command
    started: pulumi.Output[str]
    """When the container last started (see `containers.last_started`)."""

    def __init__(self, name: str, args: VllmServerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("paddleocr-fleet:fleet:VllmServer", name, {}, opts)
        launch = args.launch
        vllm, argv = launch.instance, launch.argv
        kind = vllm.host.kind
        self.container = containers.host_container(
            name,
            container_name=vllm.container_name,
            image=args.image,
            argv=argv,
            envs=containers.envs(launch.env),
            labels=containers.labels("vllm", vllm.host, vllm.card, vllm.port),
            **containers.accelerator_args(
                launch.model_dir, vllm.host, vllm.card, kind.vllm_mounts, kind.vllm_shm_mb
            ),
            opts=containers.child_opts(self, depends_on=args.after),
        )
        self.started = containers.last_started(self.container, vllm.container_name, vllm.host)
        self.ready = command.local.Command(
            f"{name}-ready",
            create=launch.ready_command,
            environment=vllm.host.docker_env,
            # A replaced container, and one started again (`pulumi up --refresh` after a
            # `docker stop`, a host reboot): `up` ends only once the model is loaded again.
            triggers=[self.container.id, self.started],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.container]),
        )
        self.url = self.ready.stdout.apply(lambda _: vllm.url)
        self.register_outputs({"url": self.url, "container_id": self.container.id})
