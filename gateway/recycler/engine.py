"""The few Docker Engine API calls the recycler makes, over the host's Docker socket.

engine = Engine("/var/run/docker.sock")
engine.inspect("paddle-9120-sim-0")     # ContainerState(id, running, started_at)
engine.memory("paddle-9120-sim-0")      # bytes in use, as `docker stats` shows
engine.restart("paddle-9120-sim-0", grace_s=30)
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import httpx

from gateway.recycler.policy import memory_in_use


class EngineError(Exception):
    """The engine refused or failed a call (the message names the container)."""


@dataclass(frozen=True)
class ContainerState:
    id: str
    running: bool
    started_at: datetime | None


def parse_time(text: str) -> datetime | None:
    """The engine's RFC 3339 times (nanoseconds, `Z`); None for its zero time."""
    if not text or text.startswith("0001-"):
        return None
    head, _, rest = text.rstrip("Z").partition(".")
    fraction = rest[:6]
    value = f"{head}.{fraction}" if fraction else head
    return datetime.fromisoformat(value + "+00:00")


class Engine:
    def __init__(self, socket_path: str, timeout_s: float = 30.0) -> None:
        self._http = httpx.Client(
            transport=httpx.HTTPTransport(uds=socket_path),
            base_url="http://docker",
            timeout=timeout_s,
            trust_env=False,
        )

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, what: str, **kwargs: object) -> httpx.Response:
        try:
            r = self._http.request(method, path, **kwargs)  # type: ignore[arg-type]
        except httpx.HTTPError as exc:
            raise EngineError(f"{what}: the Docker engine does not answer: {exc}") from None
        if r.status_code >= 300:
            raise EngineError(f"{what}: HTTP {r.status_code}: {r.text[:300]}")
        return r

    def inspect(self, container: str) -> ContainerState:
        data = self._call("GET", f"/containers/{container}/json", container).json()
        state = data.get("State") or {}
        return ContainerState(
            id=str(data.get("Id", "")),
            running=bool(state.get("Running")),
            started_at=parse_time(str(state.get("StartedAt", ""))),
        )

    def memory(self, container: str) -> int | None:
        """One sample, without the second one `docker stats` waits a second for (CPU)."""
        r = self._call(
            "GET",
            f"/containers/{container}/stats",
            container,
            params={"stream": "false", "one-shot": "true"},
        )
        return memory_in_use(r.json().get("memory_stats") or {})

    def restart(self, container: str, grace_s: int) -> None:
        self._call(
            "POST",
            f"/containers/{container}/restart",
            container,
            params={"t": str(grace_s)},
            timeout=grace_s + 60,
        )
