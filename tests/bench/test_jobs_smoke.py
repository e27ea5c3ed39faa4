"""Smoke test of the jobs benchmark (``python -m bench.jobs --smoke``): 4 simulated instances,
12-page documents, every scenario through a real gateway process, in seconds.

Asserts the shape of what the benchmark produces and that every job came back whole and in
order (also after the ``kill -9``), never timings.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench import jobs
from bench.jobs_docs import check_result, numbered_pdf, page_of, parsed_twice
from bench.workload import FleetSpec


def test_cost_model_and_capacity() -> None:
    spec = FleetSpec(n=4, slow_factors=(2.0,), request_s=0.2, page_s=0.1)
    assert spec.pdf_seconds(16) == 1.8 and spec.pdf_seconds(1, factor=2.0) == 0.6
    # three fast instances and one at half speed, each on 16-page slices
    assert abs(spec.page_capacity(16) - 3.5 * 16 / 1.8) < 1e-9
    assert spec.instance_equivalents() == 3.5


def test_pages_tell_which_document_they_come_from() -> None:
    assert page_of(2 * (100 + 5), 2 * (1000 + 7)) == (7, 5)
    assert numbered_pdf(3, 2).startswith(b"%PDF")
    page = {"prunedResult": {"width": 200, "height": 2006, "page_index": 0}}
    line = {"result": {"layoutParsingResults": [page], "dataInfo": {"numPages": 1}}}
    assert check_result([line], doc=3, pages=1) is None
    assert check_result([line], doc=4, pages=1) is not None
    log = [{"pages": [[200, 2006], [202, 2006]]}, {"pages": [[202, 2006]]}]
    assert parsed_twice(log, {3}) == {3: 1}


def test_smoke_run_produces_every_scenario(tmp_path: Path, capsys) -> None:
    out = tmp_path / "jobs-smoke.json"
    assert jobs.main(["--smoke", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    s = result["scenarios"]
    assert set(s) == {"idle", "mixed", "saturation", "kill"}
    assert s["idle"]["runs"] and s["idle"]["whole_pages"] == 12
    assert all(run["problem"] is None for run in s["idle"]["runs"])
    for phase in ("alone", "with_jobs"):
        one_page = s["mixed"][phase]["one_page"]
        assert one_page["sent"] > 0 and one_page["errors"] == 0 and one_page["unfinished"] == 0
    for name in ("mixed", "saturation", "kill"):
        checked = s[name]["results"]
        assert checked["whole_in_order"] == checked["jobs"] > 0, checked["problems"]
    assert s["kill"]["failure"] is None
    assert s["kill"]["parsed_twice_pages"] >= 0 and s["kill"]["one_slice_per_job_pages"] > 0
    assert set(result["targets"]) == {
        "idle_latency_ratio", "one_page_p99_ratio", "saturation_pages_ratio",
        "kill_all_whole_in_order", "kill_parsed_twice_pages",
    }  # fmt: skip
    assert result["capacity"]["pages_per_s"] > 0
    printed = capsys.readouterr().out
    assert "| # | target | measured | bound | ok |" in printed
