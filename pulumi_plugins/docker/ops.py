"""What a resource operation gets from the server (its engine, preview flag, deadline and a
way to talk to the user) and the two ways it fails.

    op = Op(engine, urn, preview=False, timeout=1200, log=lambda sev, msg, eph: None)
    raise DockerError("Unable to start container: ...")        # nothing was left behind
    raise InitError(container_id, state, ["Unable to start"])  # created, but not healthy
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pulumi_plugins.docker.engine import Engine

DEFAULT_TIMEOUT = 20 * 60.0
"""The Terraform provider's create/update/delete timeout for containers and images."""


class DockerError(Exception):
    """The operation failed; nothing it created remains."""


class InitError(Exception):
    """The resource exists (`id`, `state`) but did not finish initialising; the engine records it
    with these reasons and retries on the next update, like the bridge's partial state."""

    def __init__(self, id: str, state: dict[str, Any], reasons: list[str]) -> None:
        super().__init__("; ".join(reasons))
        self.id, self.state, self.reasons = id, state, reasons


@dataclass
class Op:
    engine: Engine
    urn: str
    preview: bool
    timeout: float
    log: Callable[[str, str, bool], None]
    """(severity "info"/"warning"/"debug", message, ephemeral)"""

    def info(self, message: str) -> None:
        self.log("info", message, False)

    def warn(self, message: str) -> None:
        self.log("warning", message, False)

    def status(self, message: str) -> None:
        """A progress line, shown while the operation runs and not kept."""
        if message.strip():
            self.log("info", message, True)
