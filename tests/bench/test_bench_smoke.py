"""Smoke test of the balancing benchmark machinery (bench/): tiny fleet, a handful of requests.

Asserts the shape of what the benchmark produces (rows, columns, a table), never timings.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

import pytest

from bench import balancing
from bench.ideal import simulate_ideal
from bench.loadgen import summarize
from bench.minihttp import MiniClient
from bench.procs import start_fleet
from bench.workload import FleetSpec, make_workload, parse_work, png_with_work

REPO = Path(__file__).resolve().parents[2]
HAVE_GATEWAY = (REPO / "gateway" / "__main__.py").exists()


def test_workload_is_seeded_and_scaled():
    a = make_workload(10.0, 5.0, seed=7, sigma=1.0)
    b = make_workload(20.0, 5.0, seed=7, sigma=1.0)
    assert a.requests == make_workload(10.0, 5.0, seed=7, sigma=1.0).requests
    # the same documents (work) at every load; only the arrival times scale
    n = min(len(a.requests), len(b.requests))
    assert [r.work for r in a.requests[:n]] == [r.work for r in b.requests[:n]]
    assert all(r.t < 5.0 for r in b.requests)
    assert parse_work(png_with_work(1.25, 17)) == (1.25, 17)


def test_capacity_counts_slow_instances():
    spec = FleetSpec(n=4, mean_s=0.5, slow_factors=(4.0,))
    assert spec.capacity_rps() == pytest.approx(3 / 0.5 + 1 / 2.0)


def test_ideal_replay_is_fifo_to_idle():
    wl = make_workload(5.0, 4.0, seed=1, sigma=1.0)
    samples = simulate_ideal(wl, [0.1, 0.1, 0.3])
    assert len(samples) == len(wl.requests)
    assert all(s.ok and s.latency >= 0 for s in samples)
    s = summarize(samples, 0.0, 4.0, 5.0)
    assert s["errors"] == 0 and s["unfinished"] == 0 and s["p99"] >= s["p50"]


def test_fleet_speaks_the_paddlex_envelope():
    async def go():
        fleet = start_fleet(FleetSpec(n=2, mean_s=0.01, slow_factors=()))
        try:
            c = MiniClient("127.0.0.1", fleet.ports[0])
            import base64

            body = {"file": base64.b64encode(png_with_work(1.0, 3)).decode(), "fileType": 1}
            st, _, data = await c.request("POST", "/layout-parsing", json.dumps(body).encode())
            env = json.loads(data)
            assert st == 200 and env["errorCode"] == 0 and env["errorMsg"] == "Success"
            assert env["result"]["dataInfo"]["type"] == "image"
            assert env["result"]["layoutParsingResults"][0]["markdown"]["images"] == {}
            del body["fileType"]
            st, _, data = await c.request("POST", "/layout-parsing", json.dumps(body).encode())
            assert st == 422 and json.loads(data)["errorCode"] == 422
            st, _, data = await c.request("GET", "/health")
            assert st == 200 and json.loads(data)["errorMsg"] == "Healthy"
            await fleet.kill([1], "refuse")
            with pytest.raises(OSError):
                await MiniClient("127.0.0.1", fleet.ports[1]).request("GET", "/health")
            await fleet.reset()
            st, _, _ = await MiniClient("127.0.0.1", fleet.ports[1]).request("GET", "/health")
            assert st == 200
            await c.close()
        finally:
            fleet.stop()

    asyncio.run(go())


@pytest.mark.skipif(not HAVE_GATEWAY, reason="gateway/__main__.py is not there yet")
def test_smoke_run_produces_tables(tmp_path, capsys):
    default = balancing.default_policy()
    out = tmp_path / "smoke.json"
    rc = balancing.main(["--smoke", "--out", str(out)])
    assert rc == 0
    res = json.loads(out.read_text())
    loads = res["balancing"]["loads"]
    assert set(loads) == {"85"}
    for blk in loads.values():
        assert {"ideal", "ideal_blind", "round_robin", default} <= set(blk["rows"])
        for name in ("round_robin", default):
            row = blk["rows"][name]
            assert "failed" not in row, row
            assert {"p50", "p95", "p99", "throughput_rps", "errors", "unfinished"} <= set(row)
            assert row["sent"] > 0
    assert "ideal_live" in loads["85"]["rows"]
    assert set(res["kill"]["modes"]["refuse"]) == {"round_robin", default}
    assert "failures" in res["kill"]["modes"]["refuse"][default]
    assert res["overhead"]["direct"]["sequential"]["n"] > 0
    assert res["overhead"]["policies"]
    assert "p99_vs_round_robin" in res["targets"] and "p99_vs_ideal" in res["targets"]
    printed = capsys.readouterr().out
    assert "Scenario 1: 85 % load" in printed and "Targets" in printed
    for name in ("ideal (replay)", "round_robin", default):
        assert name in printed


def test_profiles_are_consistent():
    for prof in balancing.PROFILES.values():
        assert set(prof.policies) <= set(balancing.ALL_POLICIES)
        assert prof.warmup_s < prof.duration_s and prof.kill_at_s < prof.kill_duration_s
    assert replace(balancing.PROFILES["default"]).fleet.n == 48


def test_dispatch_cost_times_real_leases(capsys):
    from bench import dispatch_cost

    assert asyncio.run(dispatch_cost.cost_us(8, 0.5, 50)) > 0
    assert asyncio.run(dispatch_cost.cost_us(8, 0.5, 50, workers=2)) > 0  # over a shared board
    assert dispatch_cost.main(["--upstreams", "8", "--rounds", "20", "--repeat", "1"]) == 0
    assert "8 upstreams, 0% busy, 1 worker(s):" in capsys.readouterr().out
