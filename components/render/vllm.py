"""The vLLM server's rendering (components/vllm.py): its launch command, environment and
readiness wait."""

from __future__ import annotations

import re
from dataclasses import dataclass

from components.plan import (
    VllmInstance,
)
from components.render.common import (
    SIM_FAULTS_ENV,
    SIM_LOAD_ENV,
    CardLaunch,
    card_ready_command,
)
from components.settings import FleetSettings


def official_model_name(served_model_name: str) -> str:
    """The model name the official PaddleOCR API clients ask for: the served model without its
    size suffix (`PaddleOCR-VL-1.5-0.9B` -> `PaddleOCR-VL-1.5`)."""
    return re.sub(r"-[0-9.]+B$", "", served_model_name)


def vllm_argv(settings: FleetSettings, vllm: VllmInstance) -> list[str]:
    """`vllm serve ...` with the seed's flags, the kind's flags and the operator's extras."""
    return [
        "vllm",
        "serve",
        settings.container_model_path,
        "--served-model-name",
        settings.served_model_name,
        "--port",
        str(vllm.port),
        "--max-num-batched-tokens",
        str(settings.max_num_batched_tokens),
        "--trust-remote-code",
        "--no-enable-prefix-caching",
        "--mm-processor-cache-gb",
        "0",
        "--gpu-memory-utilization",
        f"{settings.memory_fraction:g}",
        *vllm.host.kind.vllm_flags,
        *settings.vllm_extra_args,
    ]


def vllm_env(settings: FleetSettings, vllm: VllmInstance) -> dict[str, str]:
    """The container's environment: the kind's exports and card, and on sim hosts the
    simulator's load time and injected faults (`simVllmLoadSeconds`, `simVllmFaults`)."""
    kind = vllm.host.kind
    env = dict(kind.vllm_env + kind.card_env(vllm.card))
    if kind.name == "sim" and settings.sim_vllm_load_seconds is not None:
        env[SIM_LOAD_ENV["vllm"]] = f"{settings.sim_vllm_load_seconds:g}"
    if kind.name == "sim" and settings.sim_vllm_faults is not None:
        env[SIM_FAULTS_ENV] = settings.sim_vllm_faults.env_value()
    return env


def vllm_ready_command(settings: FleetSettings, vllm: VllmInstance) -> str:
    return card_ready_command(
        settings,
        vllm,
        "/v1/models",
        timeout_s=settings.vllm_ready_timeout,
        log_hint=f"docker logs {vllm.container_name}",
        expect=f'"{settings.served_model_name}"',
    )


@dataclass(frozen=True)
class VllmLaunch(CardLaunch[VllmInstance]):
    """What one vLLM container is started and waited on with (`VllmServer` takes this)."""

    argv: list[str]


def vllm_launch(settings: FleetSettings, vllm: VllmInstance) -> VllmLaunch:
    return VllmLaunch(
        vllm,
        argv=vllm_argv(settings, vllm),
        env=vllm_env(settings, vllm),
        ready_command=vllm_ready_command(settings, vllm),
        model_dir=settings.model_dir,
    )
