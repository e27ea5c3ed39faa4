"""PNG plot of the jobs benchmark: how busy the fleet was, over time, in scenarios 3 and 4.

    python -m bench.jobs_plot                                   # bench/results/jobs-default.json
    python -m bench.jobs_plot bench/results/jobs-quick.json --out /tmp/jobs_timeline.png

Writes ``docs/img/jobs_timeline.png`` (matplotlib, the bench extra): the fleet's busy share per
half second while 40 jobs saturate it (scenario 3), and while 20 jobs run through a ``kill -9``
of the gateway and its restart (scenario 4, both marked).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bench.common import parser, pyplot, save_figure

REPO = Path(__file__).resolve().parent.parent
DEFAULT_RESULTS = REPO / "bench" / "results" / "jobs-default.json"
DEFAULT_OUT = REPO / "docs" / "img" / "jobs_timeline.png"


def plot(result: dict[str, Any], out: Path) -> None:
    plt = pyplot()

    scenarios = result["scenarios"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), sharey=True)
    panels = (
        ("saturation", "3: jobs alone, from the first submit"),
        ("kill", "4: kill -9 and restart, from the first parse"),
    )
    for ax, (name, title) in zip(axes, panels, strict=True):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("s")
        ax.grid(alpha=0.3)
        if name not in scenarios or "busy_timeline" not in scenarios[name]:
            ax.text(0.5, 0.5, "not measured", ha="center", transform=ax.transAxes)
            continue
        line = scenarios[name]["busy_timeline"]
        xs = [i * line["step_s"] for i in range(len(line["busy"]))]
        ax.step(xs, [100 * b for b in line["busy"]], where="post", color="tab:blue")
        if name == "kill":
            ax.axvline(line["kill_s"], color="tab:red", linestyle="--", label="kill -9")
            ax.axvline(line["restart_s"], color="tab:green", linestyle="--", label="restarted")
            ax.legend(loc="lower left", fontsize=8)
    axes[0].set_ylabel("fleet busy (%)")
    axes[0].set_ylim(0, 105)
    save_figure(fig, out)


def main(argv: list[str] | None = None) -> int:
    ap = parser("jobs_plot", __doc__)
    ap.add_argument("results", nargs="?", type=Path, default=DEFAULT_RESULTS)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    plot(json.loads(args.results.read_text()), args.out)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
