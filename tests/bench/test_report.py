"""bench.report: one table model, written as Markdown (docs/benchmarks.md) and as rich tables.

The Markdown of bench/results/default.json must be the tables published in docs/benchmarks.md,
and the console must show exactly the cells of the Markdown tables.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from bench import report as rep
from bench.report import Report, Table, build_report, plain, print_console, render_markdown

REPO = Path(__file__).resolve().parents[2]
DEFAULT_JSON = REPO / "bench" / "results" / "default.json"
BOX_BARS = "│┃"


def markdown_tables(md: str) -> list[list[list[str]]]:
    """The tables of a Markdown text: per table, its header and body rows as cell lists."""
    tables: list[list[list[str]]] = []
    previous = ""
    for line in md.splitlines():
        if line.startswith("| ") and line.endswith(" |"):
            cells = line[2:-2].split(" | ")
            if not previous.startswith("| "):
                tables.append([])
            if not all(c in ("---", "---:") for c in cells):
                tables[-1].append(cells)
        previous = line
    return tables


def console_rows(text: str) -> list[list[str]]:
    """The header and body rows of every table in a rich export, as stripped cell lists."""
    rows = []
    for line in text.splitlines():
        stripped = line.strip()
        if len(stripped) > 1 and stripped[0] in BOX_BARS and stripped[-1] in BOX_BARS:
            for bar in BOX_BARS[1:]:
                stripped = stripped.replace(bar, BOX_BARS[0])
            rows.append([c.strip() for c in stripped[1:-1].split(BOX_BARS[0])])
    return rows


def console_text(report: Report) -> str:
    con = Console(record=True, width=300)
    print_console(report, con)
    return con.export_text()


def assert_console_matches_markdown(report: Report) -> None:
    md = render_markdown(report)
    text = console_text(report)
    md_rows = [[plain(c) for c in row] for table in markdown_tables(md) for row in table]
    assert md_rows == console_rows(text)
    flat = " ".join(text.split())
    for t in report.tables:
        assert " ".join(plain(t.title).split()) in flat
        assert " ".join(plain(t.note).split()) in flat
    assert " ".join(plain(report.intro).split()) in flat


@pytest.fixture(scope="module")
def default_report() -> Report:
    return build_report(json.loads(DEFAULT_JSON.read_text()))


def test_markdown_of_default_results_is_what_the_docs_publish(default_report: Report) -> None:
    md = render_markdown(default_report)
    assert md in (REPO / "docs" / "benchmarks.md").read_text()
    titles = [line.removeprefix("#### ") for line in md.splitlines() if line.startswith("#### ")]
    assert titles == [t.title for t in default_report.tables]
    assert titles[0] == "Scenario 1: p99 latency by policy and load" and titles[-1] == "Targets"


def test_markdown_writes_every_model_cell(default_report: Report) -> None:
    tables = markdown_tables(render_markdown(default_report))
    assert tables == [[list(t.columns), *map(list, t.rows)] for t in default_report.tables]


def test_console_shows_the_markdown_cells(default_report: Report) -> None:
    assert_console_matches_markdown(default_report)
    text = console_text(default_report)
    assert "`" not in text and "**" not in text


def test_cli_prints_markdown_or_console(capsys: pytest.CaptureFixture[str]) -> None:
    assert rep.main([str(DEFAULT_JSON)]) == 0
    md = capsys.readouterr().out
    assert md == render_markdown(build_report(json.loads(DEFAULT_JSON.read_text())))
    assert rep.main(["--console"]) == 0
    out = capsys.readouterr().out
    assert "Scenario 1: 85 % load" in out and "Targets" in out and "| ---" not in out


def summary(**over: Any) -> dict[str, Any]:
    """A scenario 1 row the way bench.balancing writes it (only the fields the report reads)."""
    row: dict[str, Any] = {
        "p50": 0.3,
        "p50_censored": False,
        "p95": 1.5,
        "p95_censored": False,
        "p99": 2.25,
        "p99_censored": False,
        "throughput_rps": 10.04,
        "errors": 0,
        "unfinished": 0,
        "error_kinds": {},
    }
    return row | over


def edge_results() -> dict[str, Any]:
    """A results dict with every special case: failed gateways, bounds, missing CPU, pipes."""
    return {
        "meta": {
            "command": "python -m bench.balancing --smoke",
            "date": "2026-01-01T00:00:00+00:00",
            "cpus": 2,
            "machine": "test",
            "python": "3.11.7",
            "default_policy": "queue",
            "policies": ["round_robin", "queue"],
            "fleet": {"n": 4, "mean_s": 0.5, "slow_factors": [3.0], "sigma": 1.0, "seed": 1},
        },
        "balancing": {
            "loads": {
                "85": {
                    "rate_rps": 10.0,
                    "requests": 100,
                    "rows": {
                        "ideal": summary(slow_share=0.0),
                        "round_robin": summary(
                            p99=12.5,
                            p99_censored=True,
                            disturbed="loadgen lag 900 ms",
                            cpu_cores={"gateway": 0.5, "fleet": 0.25},
                        ),
                        "queue": {"failed": "did not start"},
                    },
                }
            }
        },
        "kill": {
            "killed": [3],
            "kill_at_s": 5.0,
            "rate_rps": 7.5,
            "utilisation_after": 0.7,
            "requests": 80,
            "duration_s": 15.0,
            "drain_s": 6.0,
            "modes": {
                "hang": {
                    "round_robin": summary(
                        failures=2,
                        errors=1,
                        unfinished=1,
                        error_kinds={"502 a|b": 1, "unfinished": 1},
                        after_kill={"p99": 0.5, "p99_censored": True},
                    ),
                    "queue": {"failed": "did not start"},
                }
            },
        },
        "overhead": {
            "instances": 4,
            "direct": {
                "sequential": {"p50_ms": 0.25, "p99_ms": 0.5},
                "closed_loop": [{"concurrency": 8, "rps": 900.4, "p99_ms": 2.25}],
            },
            "policies": {"queue": {"failed": "did not start"}},
        },
        "targets": {"default_policy": "queue", "kill": {"hang": {"failures": 2, "met": False}}},
    }


def test_special_cases_in_both_writers() -> None:
    report = build_report(edge_results())
    lines = render_markdown(report).splitlines()
    for expected in (
        "| policy | 85 % |",
        "| --- | --- |",
        "| ideal (replay) | 2.25 s |",
        "| `round_robin` | ≥12.50 s |",
        "| ideal (replay) | 300 ms | 1.50 s | 2.25 s | 10.0 | 0 | 0 | 0.0 % | - |",
        "| `round_robin` (disturbed: loadgen lag 900 ms) | 300 ms | 1.50 s | ≥12.50 s | 10.0 "
        "| 0 | 0 | - | 0.50 / 0.25 / - / - |",
        "| `queue` | gateway failed |  |  |  |  |  |  |  |",
        "| `round_robin` | **2** | 1 | 1 | 2.25 s | ≥500 ms | 1× 502 a/b; 1× unfinished |",
        "| `queue` | gateway failed |  |  |  |  |  |",
        "| client → fleet `/layout-parsing` (direct) | 0.25 ms | 0.50 ms |  |  | 900 (c = 8) "
        "| 2.2 ms | - |",
        "| gateway `queue` | gateway failed |  |  |  |  |  |  |",
        "| 10 % of instances die (hang): no client-visible failure | 2 failures | **no** |",
    ):
        assert expected in lines
    assert not any(line.startswith("All closed-loop points") for line in lines)
    assert_console_matches_markdown(report)


def test_results_without_scenarios_still_have_targets() -> None:
    results = edge_results()
    for key in ("balancing", "kill", "overhead", "targets"):
        del results[key]
    report = build_report(results)
    assert [t.title for t in report.tables] == ["Targets"] and report.tables[0].rows == []
    assert "wall time ? s" in report.intro and "capacity ? req/s" in report.intro
    assert_console_matches_markdown(report)


def test_table_rejects_rows_of_the_wrong_width() -> None:
    with pytest.raises(ValueError, match="2 columns"):
        Table("t", ("a", "b"), ("left",))
    t = Table("t", ("a", "b"), ("left", "right"))
    with pytest.raises(ValueError, match="for 2 columns"):
        t.add("only one")
