"""What :mod:`bench.jobs_scale` measured: the summary, the targets, the table and the plot.

Usage::

    run = summarize(prof, capacity, raw)         # {"summary": ..., "timeline": ...}
    result["targets"] = {label: targets(run["summary"]) for label, run in runs.items()}
    print(markdown(result)); plot(result, Path("docs/img/jobs_scale.png"))
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from pathlib import Path
from typing import Any

from bench.common import pyplot, save_figure
from bench.jobs_docs import page_of
from bench.jobs_report import target, verdict
from bench.loadgen import percentile
from bench.report import Table

CPU_PARTS = ("gateway", "keeper", "fleet", "loadgen", "other")
WARMUP_S = 10.0  # pages/s is counted from here (the fleet's first slices, the client's start)


# the table's rows: what, a str.format template over a run's summary (with ``target``: each
# target's value and verdict, ``cores``: its CPU by process), the target
ROWS = (
    ("bulk submit: s, jobs/s, p50 / p99 ms",
     "{bulk[seconds]:.0f} s, {bulk[jobs_per_s]:.0f}/s, {bulk[p50_ms]} / {bulk[p99_ms]}", ""),
    ("submit p99 ms while draining (probe)", "{target[submit_p99_ms]}", "< 50 ms"),
    ("status p99 ms while draining (probe)", "{target[status_p99_ms]}", "< 10 ms"),
    ("submit / status p99 ms during the bulk submit",
     "{submit_bulk[p99_ms]} / {status_bulk[p99_ms]}", ""),
    ("pages/s while draining / capacity", "{pages_per_s_drain} = {target[pages_ratio]}", ">= 0.95"),
    ("pages/s from 10 s (bulk submit included) / capacity", "{pages_per_s_steady} = {ratio_steady}",
     ""),
    ("fairness while draining: Jain, min / max share",
     "{fairness_drain[jain]}, {fairness_drain[min_share]} / {fairness_drain[max_share]}",
     "Jain >= 0.95"),
    ("late token's 100-page jobs: done / sent, p50 / max s",
     "{late[done]}/{late[submitted]}, {late[p50_s]} / {late[max_s]}", ""),
    ("gateway RSS MB: start / at bulk end / max / end",
     "{rss_mb[start]} / {rss_mb[at_bulk_end]} / {rss_mb[max]} / {rss_mb[end]}", "bounded"),
    ("store on disk MB (end), KB per job", "{disk_mb[end]}, {disk_mb[per_job_kb]}", ""),
    ("restart with the backlog: status served s", "{target[restart_served_s]}", "<= 10 s"),
    ("restart: healthy s, first parse s", "{restart[healthy_s]}, {restart[first_parse_s]}", ""),
    ("pages done in the window, backlog left", "{pages_done}, {backlog_pages_left}", ""),
    ("CPU cores: " + " / ".join(CPU_PARTS), "{cores}", ""),
)  # fmt: skip


def _latency(samples: list[tuple[float, float | None]], lo: float, hi: float) -> dict[str, Any]:
    """p50/p99/max of the probes scheduled in [lo, hi), in ms; failures counted apart."""
    inside = [s for t, s in samples if lo <= t < hi]
    ok = sorted(s for s in inside if s is not None)
    out: dict[str, Any] = {"n": len(inside), "errors": len(inside) - len(ok)}
    for name, q in (("p50", 50), ("p99", 99)):
        value = percentile(ok, q)
        out[f"{name}_ms"] = None if math.isnan(value) else round(1000 * value, 2)
    out["max_ms"] = round(1000 * ok[-1], 2) if ok else None
    return out


def _rate(timeline: list[dict[str, float]], lo: float, hi: float) -> float | None:
    """Pages/s between the samples nearest ``lo`` and ``hi``."""
    inside = [p for p in timeline if lo <= p["t"] <= hi]
    if len(inside) < 2:
        return None
    first, last = inside[0], inside[-1]
    return (last["pages"] - first["pages"]) / max(1e-9, last["t"] - first["t"])


def _fairness(log: list[dict[str, Any]], tokens: int, lo: float, hi: float) -> dict[str, Any]:
    """Pages each token got from parses that ended in [lo, hi) (wall clock): Jain's index and
    the smallest and largest share against an even split."""
    pages: Counter[int] = Counter()
    for entry in log:
        if lo <= entry["end"] < hi and entry["pages"]:
            doc, _ = page_of(*entry["pages"][0])
            pages[doc] += len(entry["pages"])
    counts = [pages.get(t, 0) for t in range(tokens)]
    total = sum(counts)
    jain = total**2 / (tokens * sum(c * c for c in counts)) if total else None
    even = total / tokens if tokens else 0
    return {
        "pages": counts,
        "jain": None if jain is None else round(jain, 4),
        "min_share": round(min(counts) / even, 3) if even else None,
        "max_share": round(max(counts) / even, 3) if even else None,
    }


def summarize(prof: Any, capacity: dict[str, float], raw: dict[str, Any]) -> dict[str, Any]:
    """The run's numbers (``summary``) and what the plot needs (``timeline``, probes)."""
    end = prof.window_s
    bulk = raw["bulk_done_s"] or end
    timeline = raw["timeline"]
    wall0 = raw["wall0"]
    submits = sorted(s for _, s, _ in raw["submits"])
    rss = [p["rss"] for p in timeline]
    disks = [p["disk"] for p in timeline if "disk" in p]
    drain_rate = _rate(timeline, bulk, end)
    steady_rate = _rate(timeline, WARMUP_S, end)
    late = []
    for job_id, submitted in raw["late_jobs"].items():
        done = raw["late_done"].get(job_id)
        late.append(None if done is None else max(0.0, done - submitted))
    late_done = sorted(x for x in late if x is not None)
    backlog_pages = (raw["jobs_submitted"] + len(late)) * prof.doc_pages
    done_pages = timeline[-1]["pages"] if timeline else 0
    restart = raw["restart"]
    summary = {
        "jobs": raw["jobs_submitted"],
        "bulk": {
            "seconds": round(bulk, 3),
            "jobs_per_s": round(raw["jobs_submitted"] / max(1e-9, bulk), 2),
            "p50_ms": round(1000 * percentile(submits, 50), 1) if submits else None,
            "p99_ms": round(1000 * percentile(submits, 99), 1) if submits else None,
        },
        "status_drain": _latency(raw["statuses"], bulk, end),
        "submit_drain": _latency(raw["probe_submits"], bulk, end),
        "status_bulk": _latency(raw["statuses"], 0, bulk),
        "submit_bulk": _latency(raw["probe_submits"], 0, bulk),
        "pages_per_s_drain": None if drain_rate is None else round(drain_rate, 2),
        "pages_per_s_steady": None if steady_rate is None else round(steady_rate, 2),
        "capacity_pages_per_s": capacity["pages_per_s"],
        "ratio_drain": None
        if drain_rate is None
        else round(drain_rate / capacity["pages_per_s"], 4),
        "ratio_steady": None
        if steady_rate is None
        else round(steady_rate / capacity["pages_per_s"], 4),
        "pages_done": done_pages,
        "backlog_pages_left": backlog_pages - done_pages,
        "fairness_drain": _fairness(raw["log"], prof.tokens, wall0 + bulk, wall0 + end),
        "fairness_window": _fairness(raw["log"], prof.tokens, wall0, wall0 + end),
        "late": {
            "submitted": len(late),
            "done": len(late_done),
            "p50_s": round(percentile(late_done, 50), 1) if late_done else None,
            "max_s": round(late_done[-1], 1) if late_done else None,
        },
        "rss_mb": {
            "start": round(rss[0] / 2**20, 1) if rss else None,
            "max": round(max(rss) / 2**20, 1) if rss else None,
            "at_bulk_end": round(min(timeline, key=lambda p: abs(p["t"] - bulk))["rss"] / 2**20, 1)
            if rss
            else None,
            "end": round(rss[-1] / 2**20, 1) if rss else None,
        },
        "disk_mb": {
            "max": round(max(disks) / 2**20, 1) if disks else None,
            "end": round(raw["disk_end"] / 2**20, 1),
            "per_job_kb": round(raw["disk_end"] / max(1, raw["jobs_submitted"]) / 1024, 1),
        },
        "restart": restart,
        "cpu_cores": raw["cpu_cores"],
    }
    return {
        "summary": summary,
        "timeline": timeline,
        "statuses": [(round(t, 3), s and round(s, 5)) for t, s in raw["statuses"]],
        "probe_submits": [(round(t, 3), s and round(s, 5)) for t, s in raw["probe_submits"]],
    }


def targets(s: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each target of issue 24 item 3: the measured value, the bound and whether it holds."""
    submit, status = s["submit_drain"]["p99_ms"], s["status_drain"]["p99_ms"]
    served, ratio = s["restart"]["status_served_s"], s["ratio_drain"]
    jain = s["fairness_drain"]["jain"]
    return {
        "submit_p99_ms": target(submit, "< 50", submit is not None and submit < 50),
        "status_p99_ms": target(status, "< 10", status is not None and status < 10),
        "restart_served_s": target(served, "<= 10", served is not None and served <= 10),
        "pages_ratio": target(ratio, ">= 0.95", ratio is not None and ratio >= 0.95),
        "fairness_jain": target(jain, ">= 0.95", jain is not None and jain >= 0.95),
    }


def markdown(result: dict[str, Any]) -> str:
    """One table with a column per gateway run (the compared revision first)."""
    runs = result["runs"]
    labels = list(runs)
    prof, cap = result["profile"], result["capacity"]
    fleet = prof["fleet"]
    lines = [
        f"{prof['jobs']} jobs x {prof['doc_pages']} pages from {prof['tokens']} tokens;"
        f" fleet {fleet['n']} instances at {fleet['request_s'] * 1000:.0f} ms + "
        f"{fleet['page_s'] * 1000:.0f} ms per page, capacity {cap['pages_per_s']:.1f} pages/s;"
        f" window {prof['window_s']:.0f} s from the first submit.",
        "",
    ]
    columns = ("measured", *(f"`{label}`" for label in labels), "target")
    table = Table("jobs at scale", columns, ("left",) * len(columns))

    def row(name: str, template: str, bound: str) -> None:
        cells = []
        for x in labels:
            s = runs[x]["summary"]
            met = {k: f"{v['value']} ({verdict(v['ok'])})" for k, v in result["targets"][x].items()}
            cores = " / ".join(f"{s['cpu_cores'].get(k, 0):.2f}" for k in CPU_PARTS)
            cells.append(template.format(**s, target=met, cores=cores))
        table.add(name, *cells, bound)

    for name, template, bound in ROWS:
        row(name, template, bound)
    return "\n".join([*lines, table.markdown()])


def plot(result: dict[str, Any], out: Path) -> None:
    """Backlog and pages/s, gateway RSS, and probe latencies over the window, per run."""
    plt = pyplot()

    fig, axes = plt.subplots(1, 3, figsize=(15, 3.8))
    cap = result["capacity"]["pages_per_s"]
    doc_pages = result["profile"]["doc_pages"]
    for index, (label, run) in enumerate(result["runs"].items()):
        color = f"C{index}"
        line = run["timeline"]
        ts = [p["t"] for p in line]
        rates = [0.0] + [
            (b["pages"] - a["pages"]) / max(1e-9, b["t"] - a["t"])
            for a, b in itertools.pairwise(line)
        ]
        backlog = [p["submitted_jobs"] * doc_pages - p["pages"] for p in line]
        axes[0].plot(ts, rates, color=color, label=f"pages/s ({label})")
        axes[1].plot(ts, [b / 1000 for b in backlog], color=color, linestyle="--",
                     label=f"backlog k pages ({label})")  # fmt: skip
        axes[1].plot(ts, [p["rss"] / 2**20 for p in line], color=color,
                     label=f"gateway RSS MB ({label})")  # fmt: skip
        for key, marker in (("statuses", "."), ("probe_submits", "x")):
            pts = [(t, 1000 * s) for t, s in run[key] if s is not None]
            name = "status" if key == "statuses" else "submit"
            axes[2].scatter([t for t, _ in pts], [v for _, v in pts], s=4, marker=marker,
                            color=color, alpha=0.5, label=f"{name} ({label})")  # fmt: skip
    axes[0].axhline(cap, color="grey", linestyle=":", label="capacity")
    axes[0].set_title("pages/s (fleet)", fontsize=10)
    axes[1].set_title("backlog (k pages, dashed) and gateway RSS (MB)", fontsize=10)
    axes[2].set_title("probe latency (ms, log)", fontsize=10)
    axes[2].set_yscale("log")
    axes[2].axhline(50, color="grey", linestyle=":")
    axes[2].axhline(10, color="grey", linestyle=":")
    for ax in axes:
        ax.set_xlabel("s from the first submit")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    save_figure(fig, out, dpi=100)
