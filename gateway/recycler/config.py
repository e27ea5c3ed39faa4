"""The recycler's config file (written by the stack: components/render.recycler_config)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gateway.errors import ConfigError


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class InstanceConfig(_Strict):
    url: str = Field(description="as the gateway knows it (its upstream URL)")
    health_url: str = Field(description="its /health on this host's loopback")
    container: str
    card: int


class GatewayConfig(_Strict):
    url: str
    token_file: str | None = Field(
        None, description="a file with the admin token to call it with (none: an open gateway)"
    )


class RecyclerConfig(_Strict):
    host: str
    gateway: GatewayConfig
    instances: list[InstanceConfig] = Field(min_length=1)
    max_memory_mb: int | None = Field(None, gt=0)
    max_documents: int | None = Field(None, gt=0)
    check_interval_s: float = Field(30.0, gt=0)
    min_uptime_s: float = Field(300.0, ge=0)
    drain_timeout_s: float = Field(900.0, gt=0)
    ready_timeout_s: float = Field(600.0, gt=0)
    stop_grace_s: int = Field(30, ge=0)
    docker_socket: str = "/var/run/docker.sock"


def load_config(path: Path) -> RecyclerConfig:
    try:
        return RecyclerConfig.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, ValidationError) as exc:
        raise ConfigError(f"{path}: {exc}") from None
