"""``python -m bench.rollout``: what clients see while the fleet changes (issue 21).

    python -m bench.rollout                                  # 2 and 3 cards, changes a-d (25 min)
    python -m bench.rollout --cards 2 --scenarios a --vllm-load-s 2 --clients 2 --warmup-s 3 \\
        --out /tmp/r.json --plot /tmp/r.png --docs none      # a smoke run (1.5 min)
    python -m bench.rollout --from bench/results/rollout.json   # the table and plot of a file

Per card count, one sim stack on the real Pulumi engine ($PADDLEOCR_FLEET_PULUMI); per change
(see bench/rollout/fleet.py) the clients send `/ocr-file` through the gateway from `--warmup-s`
before the change to `--settle-s` after it, rolling (`maxUnavailableCards` 1) and, for the
changes that replace cards, all at once (`maxUnavailableCards` = the cards). Writes the results
(JSON), the table into docs/benchmarks.md (between its markers) and the capacity plot.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import comma_list, parser, write_json
from bench.rollout.fleet import ALL_AT_ONCE, SCENARIOS, BenchFleet, Shape
from bench.rollout.measure import measure
from bench.rollout.report import markdown, plot_capacity, update_docs

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / "bench" / "results" / "rollout.json"
DEFAULT_PLOT = REPO / "docs" / "img" / "rollout_capacity.png"
DEFAULT_DOCS = REPO / "docs" / "benchmarks.md"


def _path(value: str) -> Path | None:
    return None if value == "none" else Path(value)


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = parser("rollout", __doc__)
    ap.add_argument(
        "--cards",
        type=comma_list(int, least=2),
        default=[2, 3],
        help="card counts, 2 or more: a rolling change needs two (default 2,3)",
    )
    ap.add_argument("--scenarios", type=comma_list(choices=SCENARIOS), default=list(SCENARIOS),
                    help="changes among a,b,c,d (default all)")  # fmt: skip
    ap.add_argument("--vllm-load-s", type=float, default=60.0, help="sim vLLM load (default 60)")
    ap.add_argument("--clients", type=int, default=8, help="clients sending /ocr-file (8)")
    ap.add_argument("--vllm-per-card", type=int, default=1)
    ap.add_argument("--paddlex-per-vllm", type=int, default=2)
    ap.add_argument("--warmup-s", type=float, default=15.0, help="load before a change (15)")
    ap.add_argument("--settle-s", type=float, default=5.0, help="load after a change (5)")
    ap.add_argument("--no-all-at-once", action="store_true", help="rolling changes only")
    ap.add_argument("--port", type=int, default=21100,
                    help="the gateway's port; the fleet takes the next 220")  # fmt: skip
    ap.add_argument("--out", type=_path, default=DEFAULT_OUT, help="results JSON, or none")
    ap.add_argument("--plot", type=_path, default=DEFAULT_PLOT, help="capacity PNG, or none")
    ap.add_argument(
        "--docs", type=_path, default=DEFAULT_DOCS, help="Markdown with the markers, or none"
    )
    ap.add_argument("--note", default="", help="a sentence for the table's intro (the machine)")
    ap.add_argument("--from", dest="source", type=Path, help="render a results file, run nothing")
    ap.add_argument("--merge", type=Path, metavar="FILE",
                    help="put this run's records into the results FILE, in place of its records "
                    "of the same cards and changes (a change measured again)")  # fmt: skip
    a = ap.parse_args(argv)
    if a.clients < 1:
        ap.error(f"--clients {a.clients}: at least 1")
    return a


def run(a: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    started = time.monotonic()
    results: dict[str, Any] = {
        "meta": {
            "command": shlex.join(["python", "-m", "bench.rollout", *argv]),
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": f"{os.cpu_count() or 1} cores ({platform.platform()}, "
            f"Python {platform.python_version()})",
            "vllm_per_card": a.vllm_per_card,
            "paddlex_per_card": a.vllm_per_card * a.paddlex_per_vllm,
            "vllm_load_s": a.vllm_load_s,
            "clients": a.clients,
            "keep_alive": (a.clients + 1) // 2,
            "warmup_s": a.warmup_s,
            "note": a.note,
        },
        "records": [],
        "errors": [],
    }
    for cards in a.cards:
        shape = Shape(cards, a.vllm_load_s, a.vllm_per_card, a.paddlex_per_vllm)
        print(f"== {cards} cards: creating the stack", flush=True)
        with BenchFleet.create(shape, a.port) as fleet:
            for scenario in a.scenarios:
                modes = [False] + (
                    [True] if scenario in ALL_AT_ONCE and not a.no_all_at_once else []
                )
                for all_at_once in modes:
                    what = (
                        f"{cards} cards, {scenario}, {'all at once' if all_at_once else 'rolling'}"
                    )
                    print(f"-- {what}", flush=True)
                    try:
                        record = measure(
                            fleet, scenario, all_at_once, a.clients, a.warmup_s, a.settle_s
                        )
                    except Exception as exc:  # one change failing leaves the others to measure
                        traceback.print_exc()
                        results["errors"].append(f"{what}: {type(exc).__name__}: {exc}"[:2000])
                        continue
                    results["records"].append(record)
                    print(_line(record), flush=True)
                    results["meta"]["wall_s"] = time.monotonic() - started
                    _write(results, a.out)
    results["meta"]["wall_s"] = time.monotonic() - started
    return results


def _line(r: dict[str, Any]) -> str:
    return (
        f"   {r['requests']} requests, {r['failed']} failed, floor {r['capacity_floor']}/"
        f"{r['capacity_total']} (target {r['target_floor']}), p99 {r['p99_before_s']} -> "
        f"{r['p99_during_s']} s, gap {r['longest_gap_s']:.1f} s, took {r['duration_s']:.0f} s"
    )


def _write(results: dict[str, Any], out: Path | None) -> None:
    if out is not None:
        write_json(out, results)


def merge(base: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """`base` with `new`'s records in place of its records of the same cards and change; the
    meta of `base`, with `new`'s command added."""
    redone = {(r["cards"], r["scenario"]) for r in new["records"]}
    kept = [r for r in base["records"] if (r["cards"], r["scenario"]) not in redone]
    order = {s: i for i, s in enumerate(SCENARIOS)}
    records = sorted(
        [*kept, *new["records"]],
        key=lambda r: (r["cards"], order[r["scenario"]], r["mode"] != "rolling"),
    )
    meta = dict(base["meta"])
    meta["merged"] = [*meta.get("merged", []), f"{new['meta']['command']} ({new['meta']['date']})"]
    return {"meta": meta, "records": records, "errors": [*base["errors"], *new["errors"]]}


def publish(results: dict[str, Any], a: argparse.Namespace) -> None:
    print(markdown(results))
    for error in results.get("errors", []):
        print(f"error: {error}", file=sys.stderr)
    if not results["records"]:
        return
    if a.plot is not None:
        print(f"plot: {plot_capacity(results, a.plot)}")
    if a.docs is not None:
        print(update_docs(a.docs, results))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    a = parse(argv)
    if a.source is not None:
        results = json.loads(a.source.read_text())
    else:
        base = json.loads(a.merge.read_text()) if a.merge is not None else None  # before
        results = run(a, argv)  # which writes --out as it goes, perhaps over --merge's file
        if base is not None:
            results = merge(base, results)
        _write(results, a.out)
    publish(results, a)
    return 1 if results.get("errors") else 0


if __name__ == "__main__":
    sys.exit(main())
