"""Container inputs shared by the components (pulumi-docker argument objects), and
`host_container`: every service container of the fleet is made through it."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_command as command
import pulumi_docker as docker

from components.plan import HostPlan
from components.render.common import (
    MODEL_DIR_IN_CONTAINER,
    container_started_command,
    generation_name,
)

ROLE_LABEL = "paddleocr-fleet.role"
STOP_GRACE_S = 30
"""How long a replaced or destroyed container gets to stop before it is killed (the
provider's default is 0: an immediate kill, even of a vLLM or a gateway with work in flight)."""
STACK_LABEL = "paddleocr-fleet.stack"
"""`project/stack`: several stacks (or test runs) can share one Docker engine."""


def accelerator_args(
    model_dir: str,
    host: HostPlan,
    card: int,
    mounts: tuple[tuple[str, str], ...],
    shm_mb: int | None,
) -> dict[str, Any]:
    """Devices, GPU requests, privileges, shared memory and mounts for a container of `card`."""
    kind = host.kind
    args: dict[str, Any] = {
        "privileged": kind.privileged,
        "devices": [
            docker.ContainerDeviceArgs(host_path=node, container_path=node, permissions="rwm")
            for node in kind.device_nodes(card)
        ],
        "volumes": [
            docker.ContainerVolumeArgs(host_path=model_dir, container_path=MODEL_DIR_IN_CONTAINER),
            *(
                docker.ContainerVolumeArgs(host_path=src, container_path=dst, read_only=True)
                for src, dst in mounts
            ),
        ],
    }
    if kind.gpu_request:
        args["device_requests"] = [
            docker.ContainerDeviceRequestArgs(
                driver="nvidia", device_ids=[str(card)], capabilities=["gpu"]
            )
        ]
    if shm_mb is not None:
        args["shm_size"] = shm_mb
    return args


HOST_LABEL = "paddleocr-fleet.host"
PORT_LABEL = "paddleocr-fleet.port"


def stack_label() -> str:
    """The value of :data:`STACK_LABEL` for this stack."""
    return f"{pulumi.get_project()}/{pulumi.get_stack()}"


def labels(
    role: str, host: HostPlan, card: int | None, port: int
) -> list[docker.ContainerLabelArgs]:
    values = {
        ROLE_LABEL: role,
        STACK_LABEL: stack_label(),
        HOST_LABEL: host.name,
        PORT_LABEL: str(port),
    }
    if card is not None:
        values["paddleocr-fleet.card"] = str(card)
    return [docker.ContainerLabelArgs(label=k, value=v) for k, v in values.items()]


def envs(values: dict[str, str]) -> list[str]:
    return [f"{key}={value}" for key, value in values.items()]


def host_container(
    name: str,
    *,
    container_name: pulumi.Input[str],
    image: pulumi.Input[str],
    opts: pulumi.ResourceOptions,
    argv: list[str] | None = None,
    stop_grace_s: int | None = STOP_GRACE_S,
    **args: Any,
) -> docker.Container:
    """The container `name` as the fleet runs each of its services: on the host's network (the
    plan's ports are the host's own), started again by its engine unless stopped by hand, and
    given `stop_grace_s` seconds to stop (None: the provider's immediate kill). `argv`, when
    given, runs in place of the image's entrypoint; `args`: the rest of its `docker.Container`
    arguments."""
    if argv is not None:
        args.update(entrypoints=argv[:1], command=argv[1:])
    if stop_grace_s is not None:
        args["destroy_grace_seconds"] = stop_grace_s
    return docker.Container(
        name,
        name=container_name,
        image=image,
        network_mode="host",
        restart="unless-stopped",
        **args,
        opts=opts,
    )


def child_opts(
    parent: pulumi.Resource,
    delete_before_replace: bool = True,
    **extra: Any,
) -> pulumi.ResourceOptions:
    """Options for a child container: parented (and so on the Docker provider of its parent's
    opts: its host's), by default deleted
    before replaced (host networking: the old and new container cannot hold the same port at
    once, and Docker holds each name once). The gateway is the exception: it hands its port
    over, and so does its keeper (components/gateway.py, components/keeper.py)."""
    return pulumi.ResourceOptions(
        parent=parent, delete_before_replace=delete_before_replace, **extra
    )


def last_started(container: docker.Container, name: str, host: HostPlan) -> pulumi.Output[str]:
    """When `container` last started, and whether it runs, as its engine says now: read on
    every preview and update (the `command:local:run` invoke), once the container's own step
    is done. The docker provider has no output that changes when a stopped container is started
    again (`mustRun` reads `true` before the stop and after the start), so a readiness wait
    holds this among its triggers to run again after such a start; a container that has not
    started again costs one `docker inspect` and changes nothing."""
    return command.local.run_output(
        command=container.id.apply(lambda cid: container_started_command(cid, name)),
        environment=host.docker_env,
        logging=command.local.Logging.NONE,
    ).stdout


def generation_named(
    base: str,
    image: pulumi.Input[str],
    argv: list[str],
    envs: list[str],
    labels: list[docker.ContainerLabelArgs],
    **more: pulumi.Input[str],
) -> pulumi.Output[str]:
    """The name of a container handed over rather than replaced in place (the gateway, its
    keeper): `base` and a hash of what forces its replacement (`render.generation_name`):
    its image, command, environment, labels and `more` (host folders, the shared job store; an
    empty value is left out, so a generation without it keeps its name)."""
    keys = list(more)
    return pulumi.Output.all(image, *more.values()).apply(
        lambda found: generation_name(
            base,
            {
                "image": found[0],
                "argv": argv,
                "envs": envs,
                **{key: value for key, value in zip(keys, found[1:], strict=True) if value},
                "labels": {label.label: label.value for label in labels},
            },
        )
    )
