"""Smoke test of the jobs-at-scale benchmark (``python -m bench.jobs_scale --smoke``): 4
simulated instances, 24 jobs of 12 pages from 3 tokens, a 6 s window and a ``kill -9``
restart through a real gateway process, in about 20 s.

Asserts the shape of what the benchmark produces and that work got done, never timings.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench import jobs_scale


def test_scale_smoke_run_measures_every_target(tmp_path: Path, capsys) -> None:
    out, png = tmp_path / "scale.json", tmp_path / "scale.png"
    assert jobs_scale.main(["--smoke", "--out", str(out), "--plot", str(png)]) == 0
    result = json.loads(out.read_text())
    summary = result["runs"]["this"]["summary"]
    assert summary["jobs"] == 24 and summary["pages_done"] > 0
    assert summary["status_drain"]["n"] > 0 and summary["status_drain"]["errors"] == 0
    assert summary["late"]["submitted"] > 0
    assert len(summary["fairness_window"]["pages"]) == 3
    assert sum(summary["fairness_window"]["pages"]) > 0
    assert summary["restart"]["status_served_s"] is not None
    assert summary["rss_mb"]["max"] > 0 and summary["disk_mb"]["end"] > 0
    assert set(result["targets"]["this"]) == {
        "submit_p99_ms", "status_p99_ms", "restart_served_s", "pages_ratio", "fairness_jain",
    }  # fmt: skip
    assert png.stat().st_size > 0
    assert "| measured | `this` | target |" in capsys.readouterr().out
