"""`Gateway`: the OCR gateway container; its config derives from the PaddleX servers' outputs and
is swapped in by `docker exec` (the gateway reloads it without a restart)."""

from __future__ import annotations

import fnmatch
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
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
PROJECT_ROOT = Path(__file__).resolve().parent.parent


def context_digest(context: Path) -> str:
    """A digest of the build context's files (names and contents, minus `.dockerignore`).

    The image is tagged with it, so a changed source file is a new tag: the image is rebuilt and
    the container that refers to it is replaced; an unchanged tree changes nothing.

    >>> len(context_digest(PROJECT_ROOT / GATEWAY_CONTEXT))
    16
    """
    ignore_file = context / ".dockerignore"
    patterns = [
        line.strip().rstrip("/")
        for line in (ignore_file.read_text().splitlines() if ignore_file.exists() else [])
        if line.strip() and not line.startswith("#")
    ]
    digest = hashlib.sha256()
    for path in sorted(p for p in context.rglob("*") if p.is_file()):
        relative = path.relative_to(context).as_posix()
        parts = relative.split("/")
        if any(fnmatch.fnmatch(part, pat) for pat in patterns for part in parts) or any(
            fnmatch.fnmatch(relative, pat) for pat in patterns
        ):
            continue
        digest.update(relative.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@dataclass
class GatewayArgs:
    settings: FleetSettings
    plan: GatewayPlan
    upstreams: list[pulumi.Output[dict[str, Any]]]
    """One entry per PaddleX server, each resolving once that server is ready."""
    image: pulumi.Input[str] | None = None
    """A prebuilt image; None builds `gateway/Dockerfile` on the gateway's host."""
    provider: pulumi.ProviderResource | None = None


class Gateway(pulumi.ComponentResource):
    url: pulumi.Output[str]
    config_json: pulumi.Output[str]

    def __init__(self, name: str, args: GatewayArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("paddleocr-fleet:fleet:Gateway", name, {}, opts)
        settings, gateway = args.settings, args.plan
        image = args.image
        if image is None:
            host = gateway.host
            tag = context_digest(PROJECT_ROOT / GATEWAY_CONTEXT)
            built = docker.Image(
                f"{name}-image",
                image_name=f"{GATEWAY_REPOSITORY}:{tag}",
                build=docker.DockerBuildArgs(
                    context=GATEWAY_CONTEXT,
                    dockerfile=f"{GATEWAY_CONTEXT}/Dockerfile",
                    args=dict(host.build_args) or None,
                    platform=host.platform,
                    network="host",
                ),
                skip_push=True,
                opts=pulumi.ResourceOptions(parent=self, provider=args.provider),
            )
            image = built.image_name
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
            uploads=[
                docker.ContainerUploadArgs(file=gateway.config_path, content=self.config_json)
            ],
            labels=containers.labels("gateway", gateway.host, None, gateway.port),
            # Later configs arrive through `install` below and are reloaded in place.
            opts=containers.child_opts(self, args.provider, ignore_changes=["uploads"]),
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
