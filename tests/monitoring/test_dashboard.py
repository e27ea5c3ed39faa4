"""The Grafana dashboard is importable: its structure, its datasource input, its variables, and
the vLLM series it reads are the simulator's (= vLLM's). Its PromQL runs against the sim stack's
real Prometheus in tests/e2e/test_monitoring.py."""

from __future__ import annotations

import re

from tests.monitoring.dashboard import dashboards, queries
from tests.sim.test_vllm_metrics import VLLM_SERIES


def test_dashboards_are_importable() -> None:
    found = dashboards()
    assert found, "no dashboard in monitoring/grafana"
    for path, dash in found:
        assert dash["uid"] and dash["title"] and dash["schemaVersion"] >= 30, path
        assert [i["name"] for i in dash["__inputs"]] == ["DS_PROMETHEUS"]
        ids = [p["id"] for p in dash["panels"]]
        assert len(ids) == len(set(ids)), f"{path.name}: panel ids repeat"
        rows = [p["title"] for p in dash["panels"] if p["type"] == "row"]
        assert [r.split(" ")[0] for r in rows] == ["Fleet", "Per", "Jobs"]
        for panel in dash["panels"]:
            grid = panel["gridPos"]
            assert grid["x"] + grid["w"] <= 24 and grid["h"] > 0, panel["title"]
            if panel["type"] != "row":
                assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]
                assert panel["targets"], f"{panel['title']}: no query"


def test_every_variable_used_is_defined_and_vllm_series_exist() -> None:
    assert dashboards()
    for _, dash in dashboards():
        defined = {v["name"] for v in dash["templating"]["list"]}
        text = " ".join(t["expr"] for p in dash["panels"] for t in p.get("targets", []))
        used = set(re.findall(r"\$(\w+)", text)) - {"__rate_interval", "__interval"}
        assert used <= defined
        for label, expr in queries(dash):
            assert "$" not in expr, label
        assert set(re.findall(r"vllm:[a-z0-9_]+", text)) <= VLLM_SERIES
