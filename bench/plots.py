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

import argparse
import json
import sys
from pathlib import Path
from typing import Any

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


def unavailable() -> str:
    """Why no plot can be drawn here, or "" if matplotlib imports."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "matplotlib is not installed (pip install -e '.[bench]')"
    return ""


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, metadata={"Software": None})
    return path


def plot_cpu_by_size(results: dict[str, Any], path: Path) -> Path:
    """CPU ms per request against document bytes; one panel per concurrency."""
    plt = _pyplot()
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
    fig.tight_layout()
    out = _save(fig, path)
    plt.close(fig)
    return out


def plot_p99_by_load(results: dict[str, Any], path: Path) -> Path:
    """p99 latency against offered load for each policy of ``python -m bench.balancing``."""
    plt = _pyplot()
    from matplotlib.ticker import FuncFormatter

    loads = results["balancing"]["loads"]
    keys = sorted(loads, key=float)
    policies = [*IDEAL_LINES, *results["meta"]["policies"]]
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for i, name in enumerate(policies):
        pts = []
        for k in keys:
            row = loads[k]["rows"].get(name)
            if row and "failed" not in row and row.get("p99") is not None:
                pts.append((float(k), row["p99"], bool(row.get("p99_censored"))))
        if not pts:
            continue
        style = IDEAL_LINES.get(name)
        color = style[1] if style else POLICY_COLORS.get(name, f"C{i}")
        xs, ys, _ = zip(*pts, strict=True)
        ax.plot(
            xs,
            ys,
            color=color,
            linestyle=style[2] if style else "-",
            marker="o" if len(pts) == 1 else None,
            linewidth=2.5 if name == results["meta"].get("default_policy") else 1.5,
            label=style[0] if style else name,
        )
        for x, y, censored in pts:
            ax.plot(
                x,
                y,
                marker="o",
                color=color,
                markerfacecolor="white" if censored else color,
                linestyle="none",
            )
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _pos: f"{v:g}" if v in _MINOR else ""))
    ax.set_xticks([float(k) for k in keys])
    ax.set_xlabel("offered load (% of the fleet's capacity)")
    ax.set_ylabel("p99 latency (s)")
    ax.set_title("p99 against load by policy (open marker: a lower bound)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", ncols=2)
    fig.tight_layout()
    out = _save(fig, path)
    plt.close(fig)
    return out


def _maybe(path_arg: str | None, default: Path) -> Path | None:
    if path_arg is None:
        return default
    return None if path_arg == "none" else Path(path_arg)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.plots",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--proxy-cpu", help="bench.proxy_cpu results, or none")
    ap.add_argument("--balancing", help="bench.balancing results, or none")
    ap.add_argument("--out-dir", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    why = unavailable()
    if why:
        print(f"bench.plots: {why}", file=sys.stderr)
        return 2
    jobs = (
        (_maybe(args.proxy_cpu, DEFAULT_PROXY_CPU), plot_cpu_by_size, CPU_BY_SIZE),
        (_maybe(args.balancing, DEFAULT_BALANCING), plot_p99_by_load, P99_BY_LOAD),
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
