"""The slice keeper's rendering (components/keeper.py): its config, launch command and
readiness wait."""

from __future__ import annotations

import json
from typing import Any

from components.plan import (
    KeeperPlan,
)
from components.render.common import (
    service_ready_command,
)


def keeper_ready_command(keeper: KeeperPlan) -> str:
    return service_ready_command(keeper, "the slice keeper", "/health")


def keeper_config_json(upstreams: list[dict[str, Any]]) -> str:
    """The keeper's config: the instances it may call (it reads the file again on change)."""
    return json.dumps({"upstreams": [entry["url"] for entry in upstreams]}, indent=2) + "\n"


def keeper_argv(keeper: KeeperPlan) -> list[str]:
    """On its host's loopback only: its one client is the gateway beside it, and what it keeps
    is other callers' results."""
    return [
        "python", "-m", "gateway.keeper", "--config", keeper.config_path,
        "--host", "127.0.0.1", "--port", str(keeper.port),
    ]  # fmt: skip
