"""The soak's short variant (issue 24): four minutes of mixed load on a sim stack of the real
engine with one fault of each kind, nothing lost (`python -m bench.soak` runs the hour)."""

from __future__ import annotations

import json

import pytest

from bench import soak
from tests.e2e.conftest import docker_engine  # noqa: F401  (the fixture)

pytestmark = pytest.mark.docker


@pytest.mark.usefixtures("docker_engine")
def test_four_minutes_with_a_fault_of_each_kind_lose_nothing(tmp_path):
    out = tmp_path / "soak.json"
    args = ["--minutes", "4", "--fault-every", "15", "--window", "60", "--ports", "24000"]
    status = soak.main([*args, "--out", str(out), "--plot", str(tmp_path / "soak.png")])
    result = json.loads(out.read_text())
    assert result["requests"] > 100 and result["jobs"]["done"] > 0, result
    assert result["requests_lost"] == 0 and result["pages_lost"] == 0, result["losses"]
    faults = result["faults"]
    assert len(faults) >= 4 and all(fault["ok"] for fault in faults), faults
    assert [p for p in result["memory"] if "gateway" in p], "no memory sample"
    assert status == 0
