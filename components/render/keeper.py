"""The slice keeper's rendering (components/keeper.py): its config, launch command and
readiness wait."""

from __future__ import annotations

import json
from typing import Any

from components.plan import (
    KeeperPlan,
)
from components.render.common import (
    SERVING_FILE,
    service_ready_command,
    serving_probe,
)

KEEPER_HANDOVER_DIR_IN_CONTAINER = "/run/paddleocr-fleet/handover"


def keeper_ready_command(keeper: KeeperPlan, container: str) -> str:
    """As `gateway_ready_command`, for the slice keeper in `container`: its own process serves
    (its serving file) and `/health` answers."""
    return service_ready_command(
        keeper, "the slice keeper", "/health", serving_probe(SERVING_FILE), container
    )


def keeper_handover_dir(keeper: KeeperPlan, stack: str) -> str:
    """The host folder where a keeper hands its listening socket to the one that replaces it
    (mounted at `KEEPER_HANDOVER_DIR_IN_CONTAINER` by every keeper container of the stack on
    that host). Under /run: a unix socket outlives no reboot, nor needs to."""
    return f"/run/paddleocr-fleet/{stack}/keeper-{keeper.port}"


def keeper_config_json(upstreams: list[dict[str, Any]]) -> str:
    """The keeper's config: the instances it may call (it reads the file again on change)."""
    return json.dumps({"upstreams": [entry["url"] for entry in upstreams]}, indent=2) + "\n"


def keeper_argv(keeper: KeeperPlan) -> list[str]:
    """On its host's loopback only: its one client is the gateway beside it, and what it keeps
    is other callers' results."""
    return [
        "python", "-m", "gateway.keeper", "--config", keeper.config_path,
        "--host", "127.0.0.1", "--port", str(keeper.port),
        "--handover", f"{KEEPER_HANDOVER_DIR_IN_CONTAINER}/keeper-{keeper.port}.sock",
        "--serving-file", SERVING_FILE,
    ]  # fmt: skip
