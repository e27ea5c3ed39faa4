"""`PaddlexServer`: an idle PaddleX container, its service started by `docker exec` once its vLLM
is ready, and a bounded wait on the service's `/health`."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_command as command
import pulumi_docker as docker

from components import containers
from components.render import paddlex as render
from components.render.common import content_hash
from components.render.paddlex import PaddlexLaunch
from components.vllm import VllmServer

RECHECK_CONTAINER = "PADDLEOCR_FLEET_CONTAINER_STARTED"
RECHECK_VLLM = "PADDLEOCR_FLEET_VLLM_READY"


@dataclass
class PaddlexServerArgs:
    launch: PaddlexLaunch
    image: pulumi.Input[str]
    vllm: VllmServer
    """The vLLM the pipeline config names: the service starts once it is ready, and again
    whenever its container is replaced."""
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
        launch = args.launch
        paddlex = launch.instance
        kind = paddlex.host.kind
        self.container = containers.host_container(
            name,
            container_name=paddlex.container_name,
            image=args.image,
            entrypoints=render.paddlex_idle_argv(paddlex),
            envs=containers.envs(launch.env),
            uploads=[
                docker.ContainerUploadArgs(
                    file=paddlex.pipeline_config_path,
                    content=launch.pipeline_config,
                )
            ],
            labels=containers.labels("paddlex", paddlex.host, paddlex.card, paddlex.port),
            **containers.accelerator_args(
                launch.model_dir,
                paddlex.host,
                paddlex.card,
                kind.paddlex_mounts,
                kind.paddlex_shm_mb,
            ),
            opts=containers.child_opts(self, depends_on=args.after),
        )
        start, stop = launch.start_command, launch.stop_command
        started = containers.last_started(self.container, paddlex.container_name, paddlex.host)
        self.start = command.local.Command(
            f"{name}-start",
            create=start,
            # pulumi-command runs `update` on a change of any input that is not a trigger; the
            # start script leaves a running service alone, so running it again is safe.
            update=start,
            delete=stop,
            environment={
                **paddlex.host.docker_env,
                # Not read by the script: a start of either container, or a vLLM waited for
                # again, changes them and so re-runs the start (a service that died is started).
                RECHECK_CONTAINER: started,
                RECHECK_VLLM: args.vllm.ready.id,
            },
            # A changed command replaces instead, and the replacement stops the old service
            # first; so does a replaced container of its own or of its vLLM.
            triggers=[
                self.container.id,
                args.vllm.container.id,
                content_hash(start + stop),
            ],
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[self.container, args.vllm.ready],
                delete_before_replace=True,
            ),
        )
        self.ready = command.local.Command(
            f"{name}-ready",
            create=launch.ready_command,
            environment=paddlex.host.docker_env,
            # A service started again, or checked again after a start of its container or of
            # its vLLM, is waited for.
            triggers=[self.container.id, self.start.id, started, args.vllm.ready.id],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.start]),
        )
        self.url = self.ready.stdout.apply(lambda _: paddlex.url)
        self.register_outputs({"url": self.url, "container_id": self.container.id})
