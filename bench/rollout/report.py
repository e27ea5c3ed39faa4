"""The rollout benchmark's table, its place in docs/benchmarks.md and its capacity plot.

report = build_report(results)          # bench.report.Report: the intro and one table
update_docs(Path("docs/benchmarks.md"), report)
plot_capacity(results, Path("docs/img/rollout_capacity.png"))
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from bench.common import pyplot, save_figure
from bench.report import Report, Table, fmt_latency, render_markdown
from bench.rollout.fleet import ALL_AT_ONCE, SCENARIOS

BEGIN = "<!-- bench.rollout results: begin (python -m bench.rollout rewrites this part) -->"
END = "<!-- bench.rollout results: end -->"
COLUMNS = (
    "cards", "change", "mode", "requests", "failed", "capacity floor (target)",
    "p99 before", "p99 during", "longest gap", "duration", "rolling / all at once",
)  # fmt: skip


def _floor(r: dict[str, Any]) -> str:
    floor, total, target = r["capacity_floor"], r["capacity_total"], r["target_floor"]
    if floor is None:
        return "-"
    cell = f"{floor} of {total} (≥ {target})" if r["mode"] == "rolling" else f"{floor} of {total}"
    return f"**{cell}**" if r["mode"] == "rolling" and floor < target else cell


def _ratio(r: dict[str, Any], records: list[dict[str, Any]]) -> str:
    if r["mode"] != "rolling":
        return ""
    if r["scenario"] not in ALL_AT_ONCE:
        return "n/a"
    other = next(
        (o for o in records if (o["cards"], o["scenario"], o["mode"]) ==
         (r["cards"], r["scenario"], "all-at-once")),
        None,
    )  # fmt: skip
    if other is None:
        return "-"
    rolling, at_once = r["duration_s"], other["duration_s"]
    return f"{rolling:.0f} s / {at_once:.0f} s = {rolling / at_once:.2f}"


def build_report(results: dict[str, Any]) -> Report:
    m, records = results["meta"], results["records"]
    intro = (
        f"Run: `{m['command']}`, {m['date']}, {m['machine']}; per card {m['vllm_per_card']} vLLM"
        f" and {m['paddlex_per_card']} PaddleX, {m['vllm_load_s']:g} s vLLM loads, "
        f"{m['clients']} clients ({m['keep_alive']} on kept-alive connections), "
        f"{m['warmup_s']:g} s of load before each change; wall time {m['wall_s'] / 60:.1f} min."
        f" {m.get('note', '')}".rstrip()
    )
    for command in m.get("merged", []):
        intro += f" Measured again and merged in: `{command.rsplit(' (', 1)[0]}`."
    table = Table(
        "Clients during each change (capacity: PaddleX instances serving, sampled from "
        "`/upstreams`)",
        COLUMNS,
        ("right", "left", "left", *("right",) * 8),
    )
    for r in records:
        table.add(
            str(r["cards"]),
            SCENARIOS[r["scenario"]],
            r["mode"],
            str(r["requests"]),
            f"**{r['failed']}**" if r["failed"] and r["mode"] == "rolling" else str(r["failed"]),
            _floor(r),
            fmt_latency(r["p99_before_s"]),
            fmt_latency(r["p99_during_s"]),
            fmt_latency(r["longest_gap_s"]),
            f"{r['duration_s']:.0f} s",
            _ratio(r, records),
        )
    failures = sorted({f for r in records for f in r["failures"]})
    table_note = (
        "Targets, rolling: 0 failed requests; capacity floor ≥ all cards minus "
        "`maxUnavailableCards` (1), in instances. n/a: a change that replaces no card has no "
        "all-at-once form. Duration: the `pulumi up` (refresh included), "
        "or the `fleetctl recycle`. Failures seen: " + ("; ".join(failures)[:600] or "none") + "."
    )
    table = Table(table.title, table.columns, table.align, table.rows, table_note)
    return Report(intro, [table])


def markdown(results: dict[str, Any]) -> str:
    return render_markdown(build_report(results))


def update_docs(path: Path, results: dict[str, Any]) -> str:
    """Put the table between the markers of `path`; say what was done."""
    text = path.read_text()
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
    if not pattern.search(text):
        raise ValueError(f"{path} has no {BEGIN!r} ... {END!r} markers")
    block = f"{BEGIN}\n{markdown(results)}{END}"
    path.write_text(pattern.sub(lambda _m: block, text, count=1))
    return f"table written into {path}"


def plot_capacity(results: dict[str, Any], path: Path) -> Path:
    """Instances serving against seconds since the change began: one panel per change, a line
    per card count and mode, the rolling target dotted."""
    plt = pyplot()

    records = results["records"]
    scenarios = [s for s in SCENARIOS if any(r["scenario"] == s for r in records)]
    cards = sorted({r["cards"] for r in records})
    columns = min(2, len(scenarios))
    rows = -(-len(scenarios) // columns)
    fig, axes = plt.subplots(
        rows, columns, figsize=(6.4 * columns, 3.6 * rows + 0.4), squeeze=False, sharey=True
    )
    for ax in axes.flat[len(scenarios) :]:
        ax.set_visible(False)
    colors = {n: f"C{i}" for i, n in enumerate(cards)}
    for ax, scenario in zip(axes.flat, scenarios, strict=False):
        for r in records:
            if r["scenario"] != scenario or not r["capacity"]:
                continue
            xs, ys = zip(*r["capacity"], strict=True)
            rolling = r["mode"] == "rolling"
            ax.step(
                xs, ys, where="post", color=colors[r["cards"]], linestyle="-" if rolling else "--",
                linewidth=1.8 if rolling else 1.2,
                label=f"{r['cards']} cards, {r['mode']} ({r['duration_s']:.0f} s)",
            )  # fmt: skip
            if rolling:
                ax.axhline(r["target_floor"], color=colors[r["cards"]], linestyle=":", alpha=0.6)
                ax.axvline(r["duration_s"], color=colors[r["cards"]], linewidth=0.6, alpha=0.5)
        ax.set_title(re.sub(r"[`]", "", SCENARIOS[scenario]), fontsize=9)
        ax.set_xlabel("seconds since the change began")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    for row in axes:
        row[0].set_ylabel("PaddleX instances serving")
    fig.suptitle(
        "Capacity during each change (dotted: the rolling floor; thin line: the rolling change's "
        "end)",
        fontsize=9,
    )
    return save_figure(fig, path)
