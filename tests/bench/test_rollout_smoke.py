"""Smoke test of the rollout benchmark (`python -m bench.rollout`) on the real Pulumi engine and a
real Docker engine: 2 sim cards with 2 s vLLM loads, 2 clients, one change (recycling card 0),
about a minute and a half. It runs the benchmark's own command line, then checks what it wrote:
the results, the table put between the markers of a docs file, the plot; and the two targets,
no failed request and never more than one card out (the sampler saw that card go).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.rollout.report import BEGIN, END
from tests.e2e.conftest import _unavailable, docker_available
from tests.pulumi_sets import find_cli

REPO = Path(__file__).resolve().parents[2]
PORT = 21500  # the fleet takes the next 220 ports; the full benchmark runs on 21100

pytestmark = pytest.mark.docker


def test_a_tiny_rollout_benchmark_runs_and_meets_its_targets(tmp_path: Path) -> None:
    reason = docker_available() or ("" if find_cli() else "no Pulumi CLI ($PADDLEOCR_FLEET_PULUMI)")
    if reason:
        _unavailable(reason)
    docs = tmp_path / "benchmarks.md"
    docs.write_text(f"# Benchmarks\n\n{BEGIN}\nold\n{END}\n\nafter\n")
    out, plot = tmp_path / "rollout.json", tmp_path / "capacity.png"
    argv = [
        sys.executable, "-m", "bench.rollout", "--cards", "2", "--scenarios", "d",
        "--vllm-load-s", "2", "--clients", "2", "--warmup-s", "3", "--settle-s", "3",
        "--port", str(PORT), "--out", str(out), "--plot", str(plot), "--docs", str(docs),
    ]  # fmt: skip
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    results = json.loads(out.read_text())
    assert results["errors"] == []
    (record,) = results["records"]
    print(record | {"capacity": len(record["capacity"])})
    assert record["requests"] > 20, record
    assert record["failed"] == 0, record["failures"]
    # 2 cards of 2 PaddleX: card 0 drained and restarted, card 1 serving all along
    assert record["capacity_total"] == 4
    assert record["capacity_floor"] == record["target_floor"] == 2, record
    assert record["p99_before_s"] is not None and record["p99_during_s"] is not None
    text = docs.read_text()
    assert "old" not in text and text.endswith("after\n")
    assert "| 2 | recycle one card (`fleetctl recycle`) | rolling |" in text
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
