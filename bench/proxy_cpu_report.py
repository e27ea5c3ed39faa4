"""The tables of ``bench.proxy_cpu``: a ``bench.report.Report``, printed or written into the docs.

    python -m bench.proxy_cpu --from bench/results/proxy_cpu.json   # print, plot, update the docs

``build_report(results)`` makes the targets table, CPU per request by size (nginx against the
gateway, with the ratio), latency and throughput, and the latency each proxy adds over the fleet
answered directly. ``update_docs(path, report)`` replaces what stands between the two
``BEGIN``/``END`` markers of docs/benchmarks.md (and nothing else) with the report's Markdown.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.report import Report, Table, render_markdown

BEGIN = "<!-- bench.proxy_cpu results: begin (python -m bench.proxy_cpu rewrites this part) -->"
END = "<!-- bench.proxy_cpu results: end -->"
Results = dict[str, Any]


def cell(cells: list[dict], target: str, route: str, size: str, conc: int) -> dict | None:
    """The cell measured for target/route/size/concurrency, or None."""
    for c in cells:
        if (c["target"], c["route"], c["size"], c["concurrency"]) == (target, route, size, conc):
            return c
    return None


def _columns(cells: list[dict]) -> list[tuple[str, str, str]]:
    """(label, target, route) of each proxy column, in a fixed order, as measured."""
    seen = {(c["target"], c["route"]) for c in cells}
    cols = [("nginx", "nginx", "/layout-parsing")]
    cols += [
        (f"nginx, {t.removeprefix('nginx-')} workers", t, r)
        for t, r in sorted(seen)
        if t.startswith("nginx-")
    ]
    cols += [
        ("gateway pass-through", "gateway", "/layout-parsing"),
        ("gateway `/ocr`", "gateway", "/ocr"),
    ]
    return [c for c in cols if (c[1], c[2]) in seen]


def _grid(results: Results) -> list[tuple[str, int]]:
    s = results["meta"]["settings"]
    return [(size, conc) for size in s["sizes"] for conc in s["concurrency"]]


def _size(size: str, cells: list[dict]) -> str:
    c = next((c for c in cells if c["size"] == size), None)
    if c is None:
        return size
    return f"tiny ({c['doc_bytes']} B)" if size == "tiny" else size


def _ms(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _cpu(c: dict | None) -> str:
    if c is None:
        return "-"
    if "failed" in c:
        return "failed"
    mark = f" ({_errors(c)})" if c.get("errors") else ""
    return _ms(c.get("cpu_ms")) + mark


def _errors(c: dict) -> str:
    return ", ".join(f"{n} {k} errors" for k, n in c["errors"].items())


def _ratio(a: dict | None, b: dict | None, key: str = "cpu_ms") -> str:
    if not a or not b or "failed" in a or "failed" in b or not a.get(key) or not b.get(key):
        return "-"
    return f"{a[key] / b[key]:.1f}×"


def _lat(c: dict | None) -> str:
    if c is None:
        return "-"
    if "failed" in c:
        return "failed"
    return f"{c['p50_ms']:.2f} / {c['p99_ms']:.2f} ms, {c['rps']:,.0f}/s"


def _added(c: dict | None, direct: dict | None) -> str:
    if not c or not direct or "failed" in c or "failed" in direct:
        return "-"
    return f"{c['p50_ms'] - direct['p50_ms']:+.2f} / {c['p99_ms'] - direct['p99_ms']:+.2f} ms"


def build_report(results: Results) -> Report:
    """The intro and the tables of docs/benchmarks.md's issue-13 section (the kernel's share
    where the results have it: runs before it was measured do not)."""
    return Report(
        _intro(results),
        [
            _targets_table(results["targets"]),
            _cpu_table(results),
            *_kernel_table(results),
            _latency_table(results),
            _added_table(results),
        ],
    )


def _intro(results: Results) -> str:
    m = results["meta"]
    s = m["settings"]
    others = [c["other_cores"] for c in results["cells"] if "other_cores" in c]
    busy = (
        f" Other processes on the machine used {statistics.median(others):.2f} cores during a "
        f"median cell, {max(others):.2f} at most."
        if others
        else ""
    )
    args = " ".join(m["gateway_args"]) or "none"
    n = m.get("processes", {}).get("gateway")
    procs = f"{n} process{'es' if n != 1 else ''}" if n else "? processes"
    rev = m.get("gateway_revision") or {}
    if rev.get("source") == "working tree":
        dirty = ", with uncommitted changes" if rev.get("dirty") else ""
        origin = f"gateway/ of the working tree (HEAD {rev.get('commit', '?')}{dirty})"
    else:
        origin = f"gateway/ of {rev.get('source', '?')} ({rev.get('commit', '?')})"
    runs = sorted({c["wrk_s"] for c in results["cells"] if "wrk_s" in c}) or ["?"]
    span = f"{runs[0]}-{runs[-1]}" if len(runs) > 1 else str(runs[0])
    return (
        f"Run: `{m['command']}`, {m['date']}, {m['cpus']} cores ({m['machine']}, Python "
        f"{m['python']}), nginx {m['nginx'] or '-'}, {origin}, sources sha256 "
        f"{m['gateway_sources'].get('sha256', '?')} (policy `{m['gateway_policy']}`, extra "
        f"arguments: {args}, {procs}), {s['instances']} "
        f"zero-latency upstreams, a wrk run of {span} s per cell, wall time "
        f"{m.get('wall_s', '?')} s.{busy}"
    )


def _targets_table(targets: list[dict]) -> Table:
    concs = sorted({int(k) for t in targets for k in t["cpu_ms"]})
    t = Table(
        "Targets: the gateway's CPU per document",
        ("target", *[f"c = {c}" for c in concs], "limit", "met?"),
        ("left", *["right"] * (len(concs) + 1), "left"),
    )
    for x in targets:
        met = "not measured" if x["met"] is None else "**yes**" if x["met"] else "**no**"
        t.add(
            x["name"],
            *[
                _ms(x["cpu_ms"].get(str(c))) + " ms" if str(c) in x["cpu_ms"] else "-"
                for c in concs
            ],
            f"{x['limit_ms']} ms",
            met,
        )
    return t


Show = Callable[[str, int], str]
"""What a column of a grid table shows for a (document size, concurrency)."""


def _at(results: Results, target: str, route: str) -> Callable[[str, int], dict | None]:
    """The cell of ``target``/``route`` for a size and a concurrency (None if not measured)."""
    return lambda size, conc: cell(results["cells"], target, route, size, conc)


def _grid_table(
    results: Results, title: str, cols: list[tuple[str, Show]], note: str = ""
) -> Table:
    """A row per (document, c), a column per (label, what it shows) of ``cols``."""
    t = Table(title, ("document", "c", *(label for label, _ in cols)), note=note)
    for size, conc in _grid(results):
        t.add(_size(size, results["cells"]), str(conc), *(show(size, conc) for _, show in cols))
    return t


def _cpu_table(results: Results) -> Table:
    nginx = _at(results, "nginx", "/layout-parsing")
    cols: list[tuple[str, Show]] = []
    for label, target, route in _columns(results["cells"]):
        at = _at(results, target, route)
        cols.append((label, lambda size, c, at=at: _cpu(at(size, c))))
        if target == "gateway":
            cols.append(("× nginx", lambda size, c, at=at: _ratio(at(size, c), nginx(size, c))))
    note = (
        "CPU of the whole process tree (nginx: master and workers; the gateway: every "
        "process) over the window, divided by the requests that reached the upstreams."
    )
    return _grid_table(results, "CPU per request (ms): nginx against the gateway", cols, note)


def _split(c: dict | None) -> str:
    if c is None or "failed" in c or c.get("sys_ms") is None or c.get("cpu_ms") is None:
        return "-"
    return f"{c['cpu_ms'] - c['sys_ms']:.3f} / {c['sys_ms']:.3f}"


def _shown(
    results: Results, show: Callable[..., str], *more: tuple[str, str, str]
) -> list[tuple[str, Show]]:
    """A column per proxy route (``more`` first), showing ``show(cell, size, c)``."""
    cols = []
    for label, target, route in [*more, *_columns(results["cells"])]:
        at = _at(results, target, route)
        cols.append((label, lambda size, c, at=at: show(at(size, c), size, c)))
    return cols


def _kernel_table(results: Results) -> list[Table]:
    """User / kernel ms per request of each proxy route: a lone request costs every proxy
    the same wake-ups in the kernel (nginx too), which the user part does not show."""
    if not any("sys_ms" in c for c in results["cells"]):
        return []
    title = "CPU per request (ms): in the process / in the kernel"
    note = (
        "The same windows as above: user time, then system time (the kernel's work for "
        "the process: its sockets, its wake-ups), of the whole process tree."
    )
    return [_grid_table(results, title, _shown(results, lambda c, *_: _split(c)), note)]


def _latency_table(results: Results) -> Table:
    direct = ("direct to the fleet", "direct", "/layout-parsing")
    title = "Latency p50 / p99 (wrk) and throughput (steady window), c requests in flight"
    return _grid_table(results, title, _shown(results, lambda c, *_: _lat(c), direct))


def _added_table(results: Results) -> Table:
    direct = _at(results, "direct", "/layout-parsing")
    title = "Latency added over the fleet answered directly (p50 / p99)"
    cols = _shown(results, lambda c, size, conc: _added(c, direct(size, conc)))
    return _grid_table(results, title, cols)


def markdown(report: Report) -> str:
    return render_markdown(report)


def update_docs(path: Path, report: Report) -> str:
    """Put the report's Markdown between the markers of ``path``; say what was done."""
    try:
        text = path.read_text()
    except OSError as exc:
        return f"docs not updated: {exc}"
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
    if not pattern.search(text):
        return f"docs not updated: {path} has no {BEGIN!r} ... {END!r} markers"
    block = f"{BEGIN}\n{markdown(report)}{END}"
    path.write_text(pattern.sub(lambda _m: block, text, count=1))
    return f"tables written into {path}"
