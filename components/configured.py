"""A long-lived container whose config is swapped in by `docker exec`, then waited on until ready:
the gateway, its slice keeper and the balancer. The config is uploaded when the container is
created; a later config arrives through the install command and is read again in place, so a
changed config does not replace the container (its `uploads` are ignored after the create).

    service = configured_container(self, name, ConfiguredSpec(...), depends_on=cleanups)
    service.container, service.install, service.ready   # ready.stdout resolves once it serves
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_command as command
import pulumi_docker as docker

from components import containers
from components.plan import GatewayPlan, KeeperPlan
from components.render.common import content_hash


@dataclass
class ConfiguredSpec:
    container_name: pulumi.Input[str]
    image: pulumi.Input[str]
    argv: list[str]
    """Entrypoint and arguments."""
    envs: list[str]
    labels: list[docker.ContainerLabelArgs]
    config_path: str
    """Where the config sits in the container."""
    config: pulumi.Output[str]
    install_command: Callable[[str], str]
    """Of the container's name (as its engine reports it): reads the config on stdin and swaps
    it in inside the running container."""
    ready_command: Callable[[str], str]
    """Of the container's name: waits, bounded, until the container serves with its config."""
    docker_env: Mapping[str, str]
    """The environment of the `docker` CLI calls (the host's engine)."""
    container_args: dict[str, Any] = field(default_factory=dict)
    """Further `docker.Container` arguments (volumes)."""


@dataclass
class Configured:
    container: docker.Container
    install: command.local.Command
    ready: command.local.Command


def configured_container(
    parent: pulumi.Resource,
    name: str,
    spec: ConfiguredSpec,
    depends_on: Sequence[pulumi.Resource] = (),
    install_waits: Sequence[pulumi.Resource] = (),
    delete_before_replace: bool = True,
) -> Configured:
    """The container `name`, its config install `{name}-config` and its readiness wait
    `{name}-ready`, children of `parent` on its Docker provider. `depends_on`: what the
    container waits for; `install_waits`: what must hold the config before this one does."""
    container = containers.host_container(
        name,
        container_name=spec.container_name,
        image=spec.image,
        argv=spec.argv,
        envs=spec.envs,
        uploads=[docker.ContainerUploadArgs(file=spec.config_path, content=spec.config)],
        labels=spec.labels,
        **spec.container_args,
        opts=containers.child_opts(
            parent,
            delete_before_replace=delete_before_replace,
            ignore_changes=["uploads"],
            depends_on=list(depends_on),
        ),
    )
    install = command.local.Command(
        f"{name}-config",
        create=container.name.apply(spec.install_command),
        stdin=spec.config,
        environment=dict(spec.docker_env),
        triggers=[container.id, spec.config.apply(content_hash)],
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[container, *install_waits]),
    )
    ready = command.local.Command(
        f"{name}-ready",
        create=container.name.apply(spec.ready_command),
        environment=dict(spec.docker_env),
        triggers=[container.id],
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[install]),
    )
    return Configured(container, install, ready)


def handed_over_container(
    parent: pulumi.Resource,
    name: str,
    role: str,
    plan: GatewayPlan | KeeperPlan,
    image: pulumi.Input[str],
    argv: list[str],
    config: pulumi.Output[str],
    install_command: Callable[[str], str],
    ready_command: Callable[[str], str],
    folder: docker.ContainerVolumeArgs,
    depends_on: Sequence[pulumi.Resource] = (),
    install_waits: Sequence[pulumi.Resource] = (),
    **generation: pulumi.Input[str],
) -> Configured:
    """A `configured_container` of the gateway's image that a replacement takes over from
    rather than replaces in place (the gateway, its keeper): created before the old one is
    deleted, under a name that carries its generation (`containers.generation_named`, of its
    inputs and `generation`), so the listening sockets pass from one to the other through the
    host `folder` both mount."""
    envs = [f"GATEWAY_PORT={plan.port}"]  # the image's healthcheck probes it
    labels = containers.labels(role, plan.host, None, plan.port)
    return configured_container(
        parent,
        name,
        ConfiguredSpec(
            container_name=containers.generation_named(
                plan.container_name, image, argv, envs, labels, **generation
            ),
            image=image,
            argv=argv,
            envs=envs,
            labels=labels,
            config_path=plan.config_path,
            config=config,
            install_command=install_command,
            ready_command=ready_command,
            docker_env=plan.host.docker_env,
            container_args={"volumes": [folder]},
        ),
        depends_on=depends_on,
        install_waits=install_waits,
        delete_before_replace=False,
    )
