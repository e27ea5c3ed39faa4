"""What a test does when a real component it needs (PostgreSQL, Prometheus's promtool, a
headless Chromium, a Docker engine, the Pulumi engine, ...) cannot start here: in CI
(``CI=true``) the test fails, naming the component, for CI must provide it and a skip there
would pass without the evidence; elsewhere it skips, saying why.

Usage::

    if shutil.which("promtool") is None:
        unavailable("Prometheus (promtool)", "promtool is not installed")
"""

from __future__ import annotations

import os
import subprocess
from typing import TYPE_CHECKING, NoReturn

import pytest

if TYPE_CHECKING:
    from doubles.postgres_server import PostgresServer


def in_ci() -> bool:
    """True in CI (``CI=true``), where every real component must be there."""
    return os.environ.get("CI") == "true"


def unavailable(component: str, reason: str) -> NoReturn:
    """Fail (CI) or skip (elsewhere) the test: ``component`` could not start, for ``reason``."""
    message = f"{component} could not start: {reason}"
    if in_ci():
        pytest.fail(f"{message} (CI=true: CI must provide {component})", pytrace=False)
    pytest.skip(message)


def start_postgres() -> PostgresServer:
    """A new PostgreSQL cluster, started (:class:`doubles.postgres_server.PostgresServer`), or
    :func:`unavailable` when it cannot be: its binaries absent, or ``initdb``/``pg_ctl``
    failing."""
    import psycopg

    from doubles.postgres_server import PostgresServer, pg_absent_reason

    try:
        server = PostgresServer.create()
    except (RuntimeError, OSError, subprocess.SubprocessError, psycopg.Error) as exc:
        unavailable("PostgreSQL", str(exc)[-1500:])
    if server is None:
        unavailable("PostgreSQL", pg_absent_reason())
    return server
