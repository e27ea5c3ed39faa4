"""`Gateway`: the OCR gateway container; its config derives from the PaddleX servers' outputs and
is swapped in by `docker exec` (the gateway reloads it without a restart)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_command as command
import pulumi_docker as docker

from components import containers, render
from components.plan import GatewayPlan
from components.settings import FleetSettings

GATEWAY_CONTEXT = "gateway"
"""The gateway image's build context, relative to the project root (only what the image needs)."""
GATEWAY_REPOSITORY = "paddleocr-fleet/gateway"


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
        self._cleanups: list[pulumi.Resource] = []
        image = args.image
        if image is None:
            image = self._build(name, gateway, args.provider, args.guard)
        self.config_json = pulumi.Output.all(*args.upstreams).apply(
            lambda entries: render.gateway_config_json(settings, list(entries))
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
                self, args.provider, ignore_changes=["uploads"], depends_on=self._cleanups
            ),
        )
        self.install = command.local.Command(
            f"{name}-config",
            create=render.gateway_config_install_command(gateway),
            stdin=self.config_json,
            environment=gateway.host.docker_env,
            triggers=[self.container.id, self.config_json.apply(render.content_hash)],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.container]),
        )
        self.ready = command.local.Command(
            f"{name}-ready",
            create=render.gateway_ready_command(settings, gateway),
            environment=gateway.host.docker_env,
            triggers=[self.container.id],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.install]),
        )
        self.url = self.ready.stdout.apply(lambda _: gateway.url)
        self.register_outputs({"url": self.url, "config": self.config_json.apply(json.loads)})

    def _build(
        self,
        name: str,
        gateway: GatewayPlan,
        provider: pulumi.ProviderResource | None,
        guard: pulumi.Output[str] | None,
    ) -> pulumi.Output[str]:
        """Build the image on the gateway's host; the container refers to its id (`repoDigest`,
        the local image id when nothing is pushed), so a rebuilt image replaces the container.

        pulumi-docker rebuilds when the context's files change and never deletes an image, so a
        command beside it removes each image the stack built once its container is gone: on a
        rebuild the old one, on destroy the last.
        """
        host = gateway.host
        built = docker.Image(
            f"{name}-image",
            image_name=pulumi.Output.from_input(guard or "").apply(
                lambda _: f"{GATEWAY_REPOSITORY}:{pulumi.get_stack()}"
            ),
            build=docker.DockerBuildArgs(
                context=GATEWAY_CONTEXT,
                dockerfile=f"{GATEWAY_CONTEXT}/Dockerfile",
                args=dict(host.build_args) or None,
                platform=host.platform,
                network="host",
            ),
            skip_push=True,
            opts=pulumi.ResourceOptions(parent=self, provider=provider),
        )
        cleanup = command.local.Command(
            f"{name}-image-cleanup",
            create="true",
            delete=pulumi.Output.all(built.image_name, built.repo_digest).apply(
                lambda parts: render.image_cleanup_command(*parts)
            ),
            environment=host.docker_env,
            triggers=[built.repo_digest],
            opts=pulumi.ResourceOptions(parent=self, delete_before_replace=False),
        )
        self._cleanups.append(cleanup)
        return built.repo_digest
