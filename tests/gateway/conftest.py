"""Fixtures: PaddleX doubles on loopback ports and gateways served by real uvicorn servers.

The whole suite in fallback mode (no fast path, every route through FastAPI's routing)::

    GATEWAY_FAST_PATH=0 PYTHONPATH=$PWD .venv/bin/python -m pytest tests/gateway -q

Tests of the fast path's own internals carry :data:`fast_path_only` and are skipped there.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from doubles.postgres_server import PostgresServer
from gateway.config.settings import parse_settings
from gateway.server.app import create_app
from gateway.server.connections import uvicorn_options
from gateway.wire.uvicorn_adapter import FAST_PATH_ENV, serving_plan
from tests.doubles.paddlex_double import DoubleFleet
from tests.doubles.servers import ServerThread
from tests.real_components import start_postgres

fast_path_only = pytest.mark.skipif(
    not serving_plan().fast,
    reason=f"asserts the fast path's internals; it is off ({FAST_PATH_ENV}=0 or the adapter "
    "cannot attach)",
)
"""Marks a test of the fast path itself (not of what a client sees)."""


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def gateway_config(upstreams: list[Any], **sections: Any) -> dict[str, Any]:
    """A test config: fast probes and reloads, small timeouts; ``sections`` deep-merged.

    The probe timeout is a few seconds, not less: the first probe decides an upstream's state
    at once, and two probe timeouts while it is busy cancel its attempts as "stuck", so a
    sub-second timeout lets one scheduling stall of a loaded machine take a live double out.
    Tests of stuck/timeout detection set their own ``health.timeout_s``."""
    base = {
        "upstreams": upstreams,
        "load_balance": {"mode": "round_robin", "max_attempts": 12},
        "http": {"timeout_s": 10, "connect_timeout_s": 1, "request_deadline_s": 30},
        "health": {"interval_s": 0.2, "timeout_s": 5},
        "reload": {"poll_interval_s": 0.05},
    }
    return deep_merge(base, sections)


class RunningGateway:
    """A gateway app under uvicorn on a loopback port (with the gateway's own connection
    bounds, as ``python -m gateway`` runs it), plus a client for it."""

    def __init__(self, app: Any, headers: dict[str, str] | None = None) -> None:
        self.app = app
        self.runtime = app.state.runtime
        self.server = ServerThread(app, **uvicorn_options(app)).start()
        self.url = self.server.url
        self.client = httpx.Client(
            base_url=self.url, timeout=30, trust_env=False, headers=headers or {}
        )

    def stop(self) -> None:
        self.client.close()
        self.server.stop()


@pytest.fixture
def fleet() -> Iterator[DoubleFleet]:
    with DoubleFleet(3) as doubles:
        yield doubles


@pytest.fixture
def start_gateway(tmp_path: Path) -> Iterator[Callable[..., RunningGateway]]:
    """``start_gateway(config_dict, file=False)``: with ``file=True`` the config is written to
    ``tmp_path/gateway.json`` and the gateway watches it."""
    running: list[RunningGateway] = []

    def start(config: dict[str, Any], file: bool = False) -> RunningGateway:
        if file:
            path = tmp_path / "gateway.json"
            path.write_text(json.dumps(config))
            app = create_app(path)
        else:
            app = create_app(parse_settings(config))
        gw = RunningGateway(app)
        running.append(gw)
        return gw

    yield start
    for gw in running:
        gw.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One real PostgreSQL for the session (a database per test: ``new_database``)."""
    server = start_postgres()  # in CI, PostgreSQL not starting fails the test
    yield server
    server.destroy()


@pytest.fixture(params=["sqlite", "postgres"])
def job_store(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """The ``jobs`` settings of a job store: SQLite in ``tmp_path/jobs``, or a new database
    on the session's PostgreSQL (``jobs.store_url``)."""
    if request.param == "sqlite":
        return {"dir": str(tmp_path / "jobs")}
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return {"dir": None, "store_url": server.new_database(), "store_timeout_s": 2}
