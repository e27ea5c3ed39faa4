"""The balancing benchmark's results as tables: one table model, a Markdown and a console writer.

    python -m bench.report                             # Markdown of bench/results/default.json
    python -m bench.report bench/results/quick.json    # the Markdown of another results file
    python -m bench.report --console                   # the same tables, drawn by rich

``build_report(results)`` turns what ``python -m bench.balancing`` writes into a ``Report``: the
leading paragraph and the tables, each with the note that follows it, if any.
``render_markdown(report)`` writes the Markdown of docs/benchmarks.md, and
``print_console(report)`` the same tables with rich (``python -m bench.balancing`` prints them
at the end of a run). Cells are strings that may hold two inline Markdown marks, ``code`` and
**bold**; the console shows them as styles, and ``plain(cell)`` is what it shows.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from bench.common import parser

Align = Literal["left", "right"]
Results = dict[str, Any]

DEFAULT_RESULTS = Path(__file__).resolve().parent / "results" / "default.json"
CONSOLE_WIDTH = 160
IDEAL_LABELS = {
    "ideal": "ideal (replay)",
    "ideal_blind": "ideal, speed-blind (replay)",
    "ideal_live": "ideal (live dispatcher)",
}
CPU_PARTS = ("gateway", "fleet", "loadgen", "other")


@dataclass(frozen=True)
class Table:
    """One table: its title, columns (name and alignment), rows of cells and the note after it."""

    title: str
    columns: tuple[str, ...]
    align: tuple[Align, ...] = ()
    """By default a label column, left-aligned, then numbers, right-aligned."""
    rows: list[tuple[str, ...]] = field(default_factory=list)
    note: str = ""

    def __post_init__(self) -> None:
        if not self.align:
            object.__setattr__(self, "align", _aligns(1, len(self.columns) - 1))
        if len(self.align) != len(self.columns):
            raise ValueError(f"{self.title}: {len(self.columns)} columns, {len(self.align)} aligns")

    def add(self, *cells: str) -> None:
        """Append a row; it must have one cell per column."""
        if len(cells) != len(self.columns):
            raise ValueError(f"{self.title}: row {cells} for {len(self.columns)} columns")
        self.rows.append(cells)

    def markdown(self) -> str:
        """The pipe table alone (header, rule, rows), without the title and the note."""
        rule = [_MD_RULE[a] for a in self.align]
        return "\n".join(_md_row(row) for row in (self.columns, rule, *self.rows))


@dataclass(frozen=True)
class Report:
    """The leading paragraph and the tables, in order."""

    intro: str
    tables: list[Table]


def _aligns(first: int, right: int, last: int = 0) -> tuple[Align, ...]:
    """``first`` left-aligned columns, then ``right`` right-aligned, then ``last`` left."""
    return ("left",) * first + ("right",) * right + ("left",) * last


# ------------------------------------------------------------------------------ cells


def fmt_latency(v: float | None, censored: bool = False) -> str:
    """Seconds as ``319 ms`` or ``3.59 s``; ``≥`` marks a lower bound; ``-`` if none."""
    if v is None:
        return "-"
    s = f"{v * 1000:.0f} ms" if v < 1 else f"{v:.2f} s"
    return ("≥" + s) if censored else s


def fmt_percentile(s: dict[str, Any], key: str) -> str:
    """The latency percentile ``key`` (``p99``) of a summary, with its censoring mark."""
    return fmt_latency(s[key], s[f"{key}_censored"])


def _label(name: str) -> str:
    """A policy's row label: the ideal dispatchers in words, policies as code."""
    return IDEAL_LABELS.get(name, f"`{name}`")


def _yes_no(met: bool) -> str:
    return "**yes**" if met else "**no**"


def _cpu(s: dict[str, Any]) -> str:
    """CPU cores of gateway / fleet / loadgen / other during a run, ``-`` if not measured."""
    cpu = s.get("cpu_cores") or {}
    if not cpu:
        return "-"
    return " / ".join(f"{cpu[k]:.2f}" if k in cpu else "-" for k in CPU_PARTS)


# ------------------------------------------------------------------------------ model


def build_report(r: Results) -> Report:
    """Every table of a results dict, in the order of docs/benchmarks.md."""
    meta = r["meta"]
    tables: list[Table] = []
    if r.get("balancing"):
        tables += _balancing_tables(r["balancing"], meta)
    if r.get("kill"):
        tables += [_kill_table(r["kill"], mode, meta["fleet"]["n"]) for mode in r["kill"]["modes"]]
    if r.get("overhead"):
        tables.append(_overhead_table(r["overhead"]))
    tables.append(_targets_table(r.get("targets", {})))
    return Report(_intro(meta), tables)


def _intro(meta: dict[str, Any]) -> str:
    f = meta["fleet"]
    sha = meta.get("gateway_sources", {}).get("sha256", "?")
    return (
        f"Run: `{meta['command']}`, {meta['date']}, {meta['cpus']} cores ({meta['machine']}, "
        f"Python {meta['python']}), gateway sources sha256 {sha}, "
        f"default policy `{meta['default_policy']}`, wall time {meta.get('wall_s', '?')} s. "
        f"Fleet: {f['n']} instances, fast mean {f['mean_s'] * 1000:.0f} ms, slow factors "
        f"{f['slow_factors']}, lognormal sigma {f['sigma']}, seed {f['seed']}; capacity "
        f"{meta.get('capacity_rps', '?')} req/s."
    )


def _balancing_tables(s1: dict[str, Any], meta: dict[str, Any]) -> list[Table]:
    """Scenario 1: the p99 summary, then one table per load."""
    order = [*IDEAL_LABELS, *meta["policies"]]
    return [_p99_table(s1, order)] + [
        _load_table(load, blk, order) for load, blk in s1["loads"].items()
    ]


def _p99_table(s1: dict[str, Any], order: list[str]) -> Table:
    loads = list(s1["loads"])
    t = Table(
        "Scenario 1: p99 latency by policy and load",
        ("policy", *[f"{k} %" for k in loads]),
        _aligns(len(loads) + 1, 0),
    )
    for name in order:
        cells = [_load_p99(s1["loads"][k]["rows"].get(name)) for k in loads]
        if any(c != "-" for c in cells):
            t.add(_label(name), *cells)
    return t


def _load_p99(s: dict[str, Any] | None) -> str:
    return "-" if not s or "failed" in s else fmt_percentile(s, "p99")


def _load_table(load: str, blk: dict[str, Any], order: list[str]) -> Table:
    t = Table(
        f"Scenario 1: {load} % load ({blk['rate_rps']} req/s offered, {blk['requests']} requests)",
        (
            "policy",
            "p50",
            "p95",
            "p99",
            "throughput req/s",
            "errors",
            "unfinished",
            "to slow instances",
            "CPU gateway / fleet / loadgen / other",
        ),
    )
    for name in order:
        s = blk["rows"].get(name)
        if s is not None:
            t.add(*_load_row(name, s))
    return t


def _load_row(name: str, s: dict[str, Any]) -> tuple[str, ...]:
    if "failed" in s:
        return (_label(name), "gateway failed", *[""] * 7)
    mark = f" (disturbed: {s['disturbed']})" if s.get("disturbed") else ""
    return (
        _label(name) + mark,
        fmt_percentile(s, "p50"),
        fmt_percentile(s, "p95"),
        fmt_percentile(s, "p99"),
        f"{s['throughput_rps']:.1f}",
        str(s["errors"]),
        str(s["unfinished"]),
        f"{s['slow_share'] * 100:.1f} %" if "slow_share" in s else "-",
        _cpu(s),
    )


def _kill_table(s2: dict[str, Any], mode: str, n: int) -> Table:
    """Scenario 2, one kill mode (``refuse`` or ``hang``)."""
    t = Table(
        f"Scenario 2: {len(s2['killed'])} of {n} instances die ({mode}) at "
        f"t = {s2['kill_at_s']} s; {s2['rate_rps']} req/s = "
        f"{s2['utilisation_after'] * 100:.0f} % of the capacity left; {s2['requests']} "
        f"requests over {s2['duration_s']} s; cut-off {s2['drain_s']} s after the last arrival",
        (
            "policy",
            "client-visible failures",
            "errors",
            "unfinished",
            "p99 (all)",
            "p99 (sent after the kill)",
            "what the client saw",
        ),
        _aligns(1, 5, 1),
    )
    for name, s in s2["modes"][mode].items():
        t.add(*_kill_row(name, s))
    return t


def _kill_row(name: str, s: dict[str, Any]) -> tuple[str, ...]:
    if "failed" in s:
        return (f"`{name}`", "gateway failed", "", "", "", "", "")
    kinds = "; ".join(f"{v}× {k}" for k, v in s["error_kinds"].items())
    return (
        f"`{name}`",
        f"**{s['failures']}**",
        str(s["errors"]),
        str(s["unfinished"]),
        fmt_percentile(s, "p99"),
        fmt_percentile(s["after_kill"], "p99"),
        kinds.replace("|", "/") or "-",
    )


def _overhead_table(s3: dict[str, Any]) -> Table:
    """Scenario 3: the direct path, then ``/ocr`` and ``/layout-parsing`` per policy."""
    t = Table(
        f"Scenario 3: gateway overhead ({s3['instances']} zero-latency upstreams)",
        (
            "path",
            "sequential p50",
            "sequential p99",
            "added p50",
            "added p99",
            "max req/s (closed loop)",
            "p99 at that rate",
            "gateway CPU then",
        ),
        note=_closed_loop_note(s3["policies"]),
    )
    d = s3["direct"]
    t.add(
        "client → fleet `/layout-parsing` (direct)",
        f"{d['sequential']['p50_ms']:.2f} ms",
        f"{d['sequential']['p99_ms']:.2f} ms",
        "",
        "",
        *_closed_loop_cells(d["closed_loop"])[:2],
        "-",
    )
    for pol, x in s3["policies"].items():
        for row in _overhead_rows(pol, x):
            t.add(*row)
    return t


def _closed_loop_cells(points: list[dict[str, Any]]) -> tuple[str, str, str]:
    """Rate, p99 and gateway CPU at the closed-loop point with the highest rate."""
    best = max(points, key=lambda p: p["rps"])
    return (
        f"{best['rps']:.0f} (c = {best['concurrency']})",
        f"{best['p99_ms']:.1f} ms",
        f"{best.get('cpu_cores', {}).get('gateway', 0):.2f} cores",
    )


def _overhead_rows(pol: str, x: dict[str, Any]) -> list[tuple[str, ...]]:
    if "failed" in x:
        return [(f"gateway `{pol}`", "gateway failed", *[""] * 6)]
    return [
        (
            f"client → gateway `/ocr` (`{pol}`)",
            *_added(x, "ocr"),
            *_closed_loop_cells(x["closed_loop_ocr"]),
        ),
        (f"client → gateway `/layout-parsing` (`{pol}`)", *_added(x, "layout"), "", "", ""),
    ]


def _added(x: dict[str, Any], path: str) -> tuple[str, str, str, str]:
    """Sequential p50/p99 through the gateway and what the gateway adds to each."""
    seq = x[f"sequential_{path}"]
    return (
        f"{seq['p50_ms']:.2f} ms",
        f"{seq['p99_ms']:.2f} ms",
        f"{x[f'added_{path}_p50_ms']:.2f} ms",
        f"{x[f'added_{path}_p99_ms']:.2f} ms",
    )


def _closed_loop_note(policies: dict[str, Any]) -> str:
    points = [
        f"`{pol}` c = {c['concurrency']}: {c['rps']:.0f} req/s, p99 {c['p99_ms']:.0f} ms, "
        f"gateway {c['cpu_cores'].get('gateway', 0):.2f} cores"
        for pol, x in policies.items()
        for c in x.get("closed_loop_ocr", [])
    ]
    return "All closed-loop points: " + "; ".join(points) + "." if points else ""


def _targets_table(t: dict[str, Any]) -> Table:
    table = Table("Targets", ("target", "measured", "met?"), _aligns(3, 0))
    if "p99_vs_round_robin" in t:
        table.add(*_vs_round_robin(t["p99_vs_round_robin"], t["default_policy"]))
    if "p99_vs_ideal" in t:
        table.add(*_vs_ideal(t["p99_vs_ideal"], t["default_policy"]))
    for mode, x in t.get("kill", {}).items():
        table.add(
            f"10 % of instances die ({mode}): no client-visible failure",
            f"{x['failures']} failures",
            _yes_no(x["met"]),
        )
    return table


def _vs_round_robin(x: dict[str, Any], default: str) -> tuple[str, str, str]:
    bound = x["round_robin_p99_is_lower_bound"]
    lb = " (round robin's p99 is a lower bound, so the ratio is an upper bound)" if bound else ""
    return (
        f"85 % load: `{default}` p99 ≤ 0.15 × round robin's",
        f"{fmt_latency(x['default_p99_s'])} / {fmt_latency(x['round_robin_p99_s'], bound)}"
        f" = {x['ratio']:.3f}{lb}",
        _yes_no(x["met"]),
    )


def _vs_ideal(x: dict[str, Any], default: str) -> tuple[str, str, str]:
    extra = ", ".join(
        f"{k.removeprefix('ratio_vs_')}: {v:.3f}" for k, v in x.items() if k.startswith("ratio_vs_")
    )
    return (
        f"85 % load: `{default}` p99 ≤ 1.25 × the ideal dispatcher's",
        f"{fmt_latency(x['default_p99_s'])} / {fmt_latency(x['ideal_p99_s'])} = {x['ratio']:.3f}"
        + (f" (against {extra})" if extra else ""),
        _yes_no(x["met"]),
    )


# ------------------------------------------------------------------------------ Markdown

# "---" (no colon) is what docs/benchmarks.md has always used for left: renderers default to it.
_MD_RULE: dict[Align, str] = {"left": "---", "right": "---:"}


def render_markdown(report: Report) -> str:
    """The report as the Markdown of docs/benchmarks.md (``####`` headings, pipe tables)."""
    lines = [report.intro]
    for t in report.tables:
        lines += _markdown_table(t)
    return "\n".join(lines) + "\n"


def _markdown_table(t: Table) -> list[str]:
    lines = [f"\n#### {t.title}\n", t.markdown()]
    if t.note:
        lines.append("\n" + t.note)
    return lines


def _md_row(cells: tuple[str, ...] | list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


# ------------------------------------------------------------------------------ console

_INLINE = re.compile(r"`([^`]+)`|\*\*([^*]+)\*\*")


def rich_text(s: str) -> Text:
    """A cell or paragraph as rich text: ``code`` in cyan, **bold** in bold, marks dropped."""
    text = Text()
    pos = 0
    for m in _INLINE.finditer(s):
        code, bold = m.groups()
        text.append(s[pos : m.start()])
        if code is not None:
            text.append(code, style="cyan")
        else:
            text.append(bold, style="bold")
        pos = m.end()
    text.append(s[pos:])
    return text


def plain(s: str) -> str:
    """What the console shows of a cell: the text without its Markdown marks."""
    return rich_text(s).plain


def rich_table(t: Table) -> RichTable:
    """One table of the model as a rich table."""
    out = RichTable(title=rich_text(t.title), title_justify="left")
    for name, align in zip(t.columns, t.align, strict=True):
        out.add_column(name, justify=align)
    for row in t.rows:
        out.add_row(*[rich_text(c) for c in row])
    return out


def print_console(report: Report, console: Console | None = None) -> None:
    """The report as rich tables, on ``console`` (by default stdout, 160 columns)."""
    con = console if console is not None else Console(width=CONSOLE_WIDTH)
    con.print(rich_text(report.intro))
    for t in report.tables:
        con.print()
        con.print(rich_table(t))
        if t.note:
            con.print(rich_text(t.note))


# ------------------------------------------------------------------------------ CLI


def main(argv: list[str] | None = None) -> int:
    ap = parser("report", __doc__)
    ap.add_argument("results", nargs="?", type=Path, default=DEFAULT_RESULTS, help="results JSON")
    ap.add_argument("--console", action="store_true", help="rich tables instead of Markdown")
    args = ap.parse_args(argv)
    report = build_report(json.loads(args.results.read_text()))
    if args.console:
        print_console(report)
    else:
        sys.stdout.write(render_markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
