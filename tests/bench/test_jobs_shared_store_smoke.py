"""Smoke test of the shared-store benchmark (``python -m bench.jobs_shared_store --smoke``): 4
simulated instances, a real PostgreSQL, 12 jobs of 8 pages through 1 gateway on SQLite, 1 on
PostgreSQL and 2 on the same PostgreSQL, in about 15 s.

Asserts the shape of what the benchmark produces and that the work got done (every job whole,
both gateways of the shared store parsing, the store's CPU measured), never timings.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench import jobs_shared_store
from doubles.postgres_server import pg_absent_reason, pg_bin_dir
from tests.real_components import unavailable


def test_shared_store_smoke_measures_every_scenario(tmp_path: Path, capsys) -> None:
    if pg_bin_dir() is None:  # the benchmark starts its own (doubles/postgres_server.py)
        unavailable("PostgreSQL", pg_absent_reason())
    out = tmp_path / "shared.json"
    assert jobs_shared_store.main(["--smoke", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    runs = result["scenarios"]
    assert list(runs) == ["sqlite", "postgres-1", "postgres-2"]
    for label, run in runs.items():
        assert run["whole_in_order"] == run["jobs"] == 12, (label, run["problems"])
        assert run["pages"] == run["pages_expected"] == 96, label
        assert run["cpu_s"]["gateways"] > 0, label
        assert sum(run["pages_by_gateway"]) >= 96, label
    assert runs["sqlite"]["cpu_s"]["store"] == 0
    assert runs["postgres-1"]["cpu_s"]["store"] > 0 and runs["postgres-2"]["cpu_s"]["store"] > 0
    assert len(runs["postgres-2"]["pages_by_gateway"]) == 2
    assert all(p > 0 for p in runs["postgres-2"]["pages_by_gateway"])
    assert result["capacity"]["pages_per_s"] > 0
    assert "| 2 gateways, one PostgreSQL |" in capsys.readouterr().out
