"""Smoke test of the scale-out benchmark (bench/hierarchy.py): two tiny hosts, each with a real
gateway, behind the real HAProxy. Asserts the shape of the results, never timings."""

from __future__ import annotations

import json

import pytest

from bench import hierarchy
from bench.ideal import simulate_ideal
from bench.loadgen import summarize
from bench.workload import make_workload
from tests.real_components import unavailable


def test_hosts_are_consecutive_blocks_of_equal_size():
    assert hierarchy.host_groups(48, 4) == [list(range(k * 12, k * 12 + 12)) for k in range(4)]
    assert [len(g) for g in hierarchy.host_groups(10, 3)] == [3, 4, 3]
    with pytest.raises(ValueError, match="5 hosts for 4 instances"):
        hierarchy.host_groups(4, 5)


def test_a_load_blind_split_replays_every_document_once_and_queues_more():
    workload = make_workload(68.0, 5.0, seed=3, sigma=1.0)  # 85 % of 8 x 10/s
    means = [0.1] * 8
    split = hierarchy.split_round_robin(workload, means, hierarchy.host_groups(8, 2))
    assert [s.id for s in split] == [r.id for r in workload.requests]
    whole = simulate_ideal(workload, means)
    p99 = [summarize(s, 0.0, 5.0, 68.0)["p99"] for s in (split, whole)]
    assert p99[0] > p99[1]  # two pools of 4 queue more than one pool of 8


def test_smoke_run_measures_the_hierarchy_against_the_ideal(tmp_path, capsys):
    if hierarchy.haproxy_binary() is None:
        unavailable("HAProxy", "haproxy is not installed (apt-get install haproxy)")
    out = tmp_path / "smoke.json"
    assert hierarchy.main(["--smoke", "--out", str(out)]) == 0
    results = json.loads(out.read_text())
    assert results["meta"]["hosts"] == 2 and results["meta"]["host_instances"] == [2, 2]
    rows = results["loads"]["85"]["rows"]
    assert set(rows) == {"ideal", "split_round_robin", "hierarchy", "one_gateway"}
    h = rows["hierarchy"]
    assert "died" not in h and h["sent"] > 0 and h["errors"] == 0
    assert len(h["host_share"]) == 2 and sum(h["host_share"]) == pytest.approx(1, abs=0.01)
    assert {"gateways", "haproxy", "fleet", "loadgen"} <= set(h["cpu_cores"])
    assert "85" in results["targets"]["loads"]
    printed = capsys.readouterr().out
    assert "p99 latency by load" in printed and "HAProxy leastconn" in printed
    assert hierarchy.main(["--report", str(out)]) == 0
    assert "| 85 % |" in capsys.readouterr().out
