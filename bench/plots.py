"""PNG plots of the benchmarks' results files, for docs/benchmarks.md (matplotlib, the bench extra).

    python -m bench.plots        # both plots from bench/results/{proxy_cpu,default}.json
    python -m bench.plots --proxy-cpu bench/results/proxy_cpu.json --balancing none --out-dir /tmp

- ``docs/img/proxy_cpu_by_size.png``: CPU per request against document size, nginx against the
  gateway, one panel per concurrency, log axes, with issue 13's CPU targets marked
  (``python -m bench.proxy_cpu`` writes it too).
- ``docs/img/balancing_p99_by_load.png``: p99 latency against load for each policy and the ideal
  dispatchers, from ``python -m bench.balancing``'s results; an open marker is a lower bound
  (requests were still open at the cut-off).

Install: ``pip install -e '.[bench]'``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bench.common import parser, path_or_none, pyplot, save_figure, unavailable

REPO = Path(__file__).resolve().parent.parent
CPU_BY_SIZE = "proxy_cpu_by_size.png"
P99_BY_LOAD = "balancing_p99_by_load.png"
DEFAULT_PROXY_CPU = REPO / "bench" / "results" / "proxy_cpu.json"
DEFAULT_BALANCING = REPO / "bench" / "results" / "default.json"
DEFAULT_OUT = REPO / "docs" / "img"

# (label, target, route, style) of each line of the CPU plot
CPU_LINES = (
    ("nginx", "nginx", "/layout-parsing", {"color": "tab:green", "marker": "o"}),
    ("nginx, auto workers", "nginx-auto", "/layout-parsing", {"color": "tab:olive", "marker": "o"}),
    ("gateway pass-through", "gateway", "/layout-parsing", {"color": "tab:blue", "marker": "s"}),
    ("gateway /ocr", "gateway", "/ocr", {"color": "tab:red", "marker": "^"}),
)
# label, color, line style of the ideal dispatchers in the p99 plot
IDEAL_LINES = {
    "ideal": ("ideal (replay)", "black", "--"),
    "ideal_blind": ("ideal, speed-blind (replay)", "dimgray", ":"),
    "ideal_live": ("ideal (live dispatcher)", "black", "-"),
}
POLICY_COLORS = {
    "round_robin": "tab:red",
    "random": "tab:purple",
    "least_inflight": "tab:brown",
    "p2c": "tab:orange",
    "queue": "tab:blue",
}
_MINOR = {2.0, 3.0, 5.0, 20.0, 30.0, 50.0}  # seconds labelled between the powers of ten


def plot_cpu_by_size(results: dict[str, Any], path: Path) -> Path:
    """CPU ms per request against document bytes; one panel per concurrency."""
    plt = pyplot()
    cells = [c for c in results["cells"] if c.get("cpu_ms") is not None and "failed" not in c]
    concs = sorted({c["concurrency"] for c in results["cells"]})
    fig, axes = plt.subplots(
        1, len(concs), figsize=(5.2 * len(concs), 4.2), squeeze=False, sharey=True
    )
    size_bytes = {c["size"]: c["doc_bytes"] for c in results["cells"]}
    for ax, conc in zip(axes[0], concs, strict=True):
        for label, target, route, style in CPU_LINES:
            pts = sorted(
                (c["doc_bytes"], c["cpu_ms"])
                for c in cells
                if (c["target"], c["route"], c["concurrency"]) == (target, route, conc)
            )
            if pts:
                ax.plot(*zip(*pts, strict=True), label=label, **style)
        for i, t in enumerate(results.get("targets", [])):
            if t["size"] in size_bytes:
                ax.plot(
                    size_bytes[t["size"]],
                    t["limit_ms"],
                    linestyle="none",
                    marker="_",
                    markersize=22,
                    markeredgewidth=2.5,
                    color="black",
                    label="issue 13 targets (gateway)" if i == 0 else None,
                )
                ax.annotate(
                    f"{t['limit_ms']:g} ms {'/ocr' if t['route'] == 'ocr' else 'pass'}",
                    (size_bytes[t["size"]], t["limit_ms"]),
                    textcoords="offset points",
                    xytext=(12, -3),
                    fontsize=7,
                )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("document size (bytes of the image; the JSON body is 4/3 of it)")
        ax.set_ylabel("CPU per request (ms)")
        ax.set_title(f"{conc} request{'s' if conc > 1 else ''} in flight")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8, loc="upper left")
    m = results["meta"]
    sha = m.get("gateway_sources", {}).get("sha256", "?")
    commit = (m.get("gateway_revision") or {}).get("commit")
    at = f"gateway of {commit}, sources {sha}" if commit else f"gateway sources {sha}"
    fig.suptitle(
        f"CPU per request, nginx against the gateway\n({m['date'][:10]}, {at})", fontsize=10
    )
    return save_figure(fig, path)


def p99_lines(ax: Any, loads: dict[str, Any], styles: dict[str, dict[str, Any]]) -> None:
    """On ``ax``, for each row name of ``styles`` (its ``label``, ``color`` and other line
    settings): its p99 against the load (``loads``: percentage -> ``{"rows": {name: summary}}``),
    a point whose p99 is a lower bound (requests still open at the cut-off) with an open marker."""
    for name, style in styles.items():
        pts = [
            (float(k), row["p99"], bool(row.get("p99_censored")))
            for k in sorted(loads, key=float)
            if (row := loads[k]["rows"].get(name)) and row.get("p99") is not None
        ]
        if not pts:
            continue
        xs, ys, _ = zip(*pts, strict=True)
        ax.plot(xs, ys, **{"marker": None, **style})
        for x, y, censored in pts:
            face = "white" if censored else style["color"]
            marker = style.get("marker") or "o"
            ax.plot(
                x, y, marker=marker, color=style["color"], markerfacecolor=face, linestyle="none"
            )


def plot_p99_by_load(results: dict[str, Any], path: Path) -> Path:
    """p99 latency against offered load for each policy of ``python -m bench.balancing``."""
    plt = pyplot()
    from matplotlib.ticker import FuncFormatter

    loads = results["balancing"]["loads"]
    default = results["meta"].get("default_policy")
    styles = {
        name: {"label": label, "color": color, "linestyle": line}
        for name, (label, color, line) in IDEAL_LINES.items()
    }
    for i, name in enumerate(results["meta"]["policies"], start=len(IDEAL_LINES)):
        color = POLICY_COLORS.get(name, f"C{i}")
        styles[name] = {"label": name, "color": color, "linewidth": 2.5 if name == default else 1.5}
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    p99_lines(ax, loads, styles)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _pos: f"{v:g}" if v in _MINOR else ""))
    ax.set_xticks(sorted(float(k) for k in loads))
    ax.set_xlabel("offered load (% of the fleet's capacity)")
    ax.set_ylabel("p99 latency (s)")
    ax.set_title("p99 against load by policy (open marker: a lower bound)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", ncols=2)
    return save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    ap = parser("plots", __doc__)
    ap.add_argument("--proxy-cpu", help="bench.proxy_cpu results, or none")
    ap.add_argument("--balancing", help="bench.balancing results, or none")
    ap.add_argument("--out-dir", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    why = unavailable()
    if why:
        print(f"bench.plots: {why}", file=sys.stderr)
        return 2
    jobs = (
        (path_or_none(args.proxy_cpu, DEFAULT_PROXY_CPU), plot_cpu_by_size, CPU_BY_SIZE),
        (path_or_none(args.balancing, DEFAULT_BALANCING), plot_p99_by_load, P99_BY_LOAD),
    )
    for src, plot, name in jobs:
        if src is None:
            continue
        if not src.exists():
            print(f"bench.plots: {src} does not exist; skipped {name}", file=sys.stderr)
            continue
        print(plot(json.loads(src.read_text()), args.out_dir / name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
