"""`PaddlexServer`: an idle PaddleX container, its service started by `docker exec` once its vLLM
is ready, and a bounded wait on the service's `/health`."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_command as command
import pulumi_docker as docker

from components import containers, render
from components.plan import PaddlexInstance
from components.settings import FleetSettings
from components.vllm import VllmServer


@dataclass
class PaddlexServerArgs:
    settings: FleetSettings
    instance: PaddlexInstance
    image: pulumi.Input[str]
    vllm: VllmServer
    """The vLLM the pipeline config names: the service starts once it is ready, and again
    whenever its container is replaced."""
    provider: pulumi.ProviderResource | None = None
    after: pulumi.Input[list[pulumi.Resource]] | None = None
    """What the container waits for before it is created or replaced (the rollout's wave
    before this card's)."""


class PaddlexServer(pulumi.ComponentResource):
    """One PaddleX instance bound to one vLLM through its rendered pipeline config.

    `url` resolves only once the service answers `/health`.
    """

    url: pulumi.Output[str]
    ready: command.local.Command

    def __init__(
        self, name: str, args: PaddlexServerArgs, opts: pulumi.ResourceOptions | None = None
    ):
        super().__init__("paddleocr-fleet:fleet:PaddlexServer", name, {}, opts)
        settings, paddlex = args.settings, args.instance
        kind = paddlex.host.kind
        self.container = docker.Container(
            name,
            name=paddlex.container_name,
            image=args.image,
            network_mode="host",
            restart="unless-stopped",
            entrypoints=render.paddlex_idle_argv(paddlex),
            envs=containers.envs(render.paddlex_env(settings, paddlex)),
            uploads=[
                docker.ContainerUploadArgs(
                    file=paddlex.pipeline_config_path,
                    content=render.pipeline_config_yaml(settings, paddlex),
                )
            ],
            labels=containers.labels("paddlex", paddlex.host, paddlex.card, paddlex.port),
            **containers.accelerator_args(
                settings, paddlex.host, paddlex.card, kind.paddlex_mounts, kind.paddlex_shm_mb
            ),
            destroy_grace_seconds=containers.STOP_GRACE_S,
            opts=containers.child_opts(self, args.provider, depends_on=args.after),
        )
        start = render.paddlex_start_command(settings, paddlex)
        stop = render.paddlex_stop_command(paddlex)
        self.start = command.local.Command(
            f"{name}-start",
            create=start,
            delete=stop,
            environment=paddlex.host.docker_env,
            # pulumi-command runs a changed `create` again in place (it has no `update` here),
            # which would start a second service: a changed command replaces instead, and the
            # replacement stops the old service first.
            triggers=[
                self.container.id,
                args.vllm.container.id,
                render.content_hash(start + stop),
            ],
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[self.container, args.vllm.ready],
                delete_before_replace=True,
            ),
        )
        self.ready = command.local.Command(
            f"{name}-ready",
            create=render.paddlex_ready_command(settings, paddlex),
            environment=paddlex.host.docker_env,
            triggers=[self.container.id, self.start.id],  # a service started again is waited for
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.start]),
        )
        self.url = self.ready.stdout.apply(lambda _: paddlex.url)
        self.register_outputs({"url": self.url, "container_id": self.container.id})
