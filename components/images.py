"""Images the stack builds itself on a host (the gateway's, the balancer's), each removed again
once nothing of the stack uses it.

    digest, cleanup = build_image(
        parent, "local-gateway-image", BuildSpec("gateway", "paddleocr-fleet/gateway"), host, guard
    )  # on the Docker provider `parent` was given in its opts
    # a container with image=digest and depends_on=[cleanup]
"""

from __future__ import annotations

import platform
from dataclasses import dataclass

import pulumi
import pulumi_command as command
import pulumi_docker as docker

from components.plan import HostPlan
from components.render import common as render


@dataclass(frozen=True)
class BuildSpec:
    context: str
    """The build context, relative to the project root (only what the image needs)."""
    repository: str
    """Tagged `<repository>:<stack>`."""


GO_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "i686": "386", "armv7l": "arm"}
"""`platform.machine()` in Docker's (Go's) architecture names; others are the same in both."""


def local_platform() -> str:
    """The platform of the machine that runs `pulumi`, in Docker's words (`linux/amd64`).

    What pulumi-docker builds for when an image's `platform` is unset (it says so in a note on
    every preview and update): the program says it itself, so nothing is left to a default.

        >>> local_platform().startswith("linux/")
        True
    """
    machine = platform.machine().lower()
    return f"linux/{GO_ARCH.get(machine, machine)}"


def build_image(
    parent: pulumi.Resource,
    name: str,
    spec: BuildSpec,
    host: HostPlan,
    guard: pulumi.Output[str] | None,
    provider: pulumi.ProviderResource | None = None,
) -> tuple[pulumi.Output[str], command.local.Command]:
    """Build `spec` on `host` for its platform (the host's `platform`, else the platform of the
    machine that runs `pulumi`, as pulumi-docker would); returns the image's id (`repoDigest`,
    the local image id when nothing is pushed), so a rebuilt image replaces its container, and
    the cleanup command a container using it must depend on. It runs on the Docker provider of
    `parent`, unless `provider` names another host's.

    pulumi-docker rebuilds when the context's files change and never deletes an image, so a
    command beside it removes each image the stack built once its container is gone: on a
    rebuild the old one, on destroy the last.
    """
    built = docker.Image(
        name,
        image_name=pulumi.Output.from_input(guard or "").apply(
            lambda _: f"{spec.repository}:{pulumi.get_stack()}"
        ),
        build=docker.DockerBuildArgs(
            context=spec.context,
            dockerfile=f"{spec.context}/Dockerfile",
            args=dict(host.build_args) or None,
            platform=host.platform or local_platform(),
            network="host",
        ),
        skip_push=True,
        opts=pulumi.ResourceOptions(parent=parent, provider=provider),
    )
    cleanup = command.local.Command(
        f"{name}-cleanup",
        create="true",
        delete=pulumi.Output.all(built.image_name, built.repo_digest).apply(
            lambda parts: render.image_cleanup_command(*parts)
        ),
        environment=host.docker_env,
        triggers=[built.repo_digest],
        opts=pulumi.ResourceOptions(parent=parent, delete_before_replace=False),
    )
    return built.repo_digest, cleanup
