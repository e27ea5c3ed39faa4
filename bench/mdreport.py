"""Render a balancing results JSON as the Markdown tables of docs/benchmarks.md.

python -m bench.mdreport bench/results/default.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _t(v: float | None, censored: bool = False) -> str:
    if v is None:
        return "-"
    s = f"{v * 1000:.0f} ms" if v < 1 else f"{v:.2f} s"
    return ("≥" + s) if censored else s


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def to_markdown(r: dict) -> str:
    meta = r["meta"]
    out: list[str] = []
    f = meta["fleet"]
    sha = meta.get("gateway_sources", {}).get("sha256", "?")
    out.append(
        f"Run: `{meta['command']}`, {meta['date']}, {meta['cpus']} cores ({meta['machine']}, "
        f"Python {meta['python']}), gateway sources sha256 {sha}, "
        f"default policy `{meta['default_policy']}`, wall time {meta.get('wall_s', '?')} s. "
        f"Fleet: {f['n']} instances, fast mean {f['mean_s'] * 1000:.0f} ms, slow factors "
        f"{f['slow_factors']}, lognormal sigma {f['sigma']}, seed {f['seed']}; capacity "
        f"{meta.get('capacity_rps', '?')} req/s."
    )
    s1 = r.get("balancing")
    if s1:
        order = ["ideal", "ideal_blind", "ideal_live", *meta["policies"]]
        label = {
            "ideal": "ideal (replay)",
            "ideal_blind": "ideal, speed-blind (replay)",
            "ideal_live": "ideal (live dispatcher)",
        }
        out.append("\n#### Scenario 1: p99 latency by policy and load\n")
        loads = list(s1["loads"])
        out.append(_row(["policy", *[f"{k} %" for k in loads]]))
        out.append(_row(["---"] * (len(loads) + 1)))
        for name in order:
            cells = []
            for k in loads:
                s = s1["loads"][k]["rows"].get(name)
                cells.append("-" if not s or "failed" in s else _t(s["p99"], s["p99_censored"]))
            if any(c != "-" for c in cells):
                out.append(_row([label.get(name, f"`{name}`"), *cells]))
        for k, blk in s1["loads"].items():
            out.append(
                f"\n#### Scenario 1: {k} % load ({blk['rate_rps']} req/s offered, "
                f"{blk['requests']} requests)\n"
            )
            out.append(
                _row(
                    [
                        "policy",
                        "p50",
                        "p95",
                        "p99",
                        "throughput req/s",
                        "errors",
                        "unfinished",
                        "to slow instances",
                        "CPU gateway / fleet / loadgen / other",
                    ]
                )
            )
            out.append(_row(["---"] + ["---:"] * 8))
            for name in order:
                s = blk["rows"].get(name)
                if s is None:
                    continue
                if "failed" in s:
                    out.append(_row([label.get(name, f"`{name}`"), "gateway failed"] + [""] * 7))
                    continue
                cpu = s.get("cpu_cores") or {}
                cpu_s = " / ".join(
                    f"{cpu[k]:.2f}" if k in cpu else "-"
                    for k in ("gateway", "fleet", "loadgen", "other")
                )
                mark = f" (disturbed: {s['disturbed']})" if s.get("disturbed") else ""
                out.append(
                    _row(
                        [
                            label.get(name, f"`{name}`") + mark,
                            _t(s["p50"], s["p50_censored"]),
                            _t(s["p95"], s["p95_censored"]),
                            _t(s["p99"], s["p99_censored"]),
                            f"{s['throughput_rps']:.1f}",
                            str(s["errors"]),
                            str(s["unfinished"]),
                            f"{s['slow_share'] * 100:.1f} %" if "slow_share" in s else "-",
                            cpu_s if cpu else "-",
                        ]
                    )
                )
    s2 = r.get("kill")
    if s2:
        for mode, per in s2["modes"].items():
            out.append(
                f"\n#### Scenario 2: {len(s2['killed'])} of {f['n']} instances die ({mode}) at "
                f"t = {s2['kill_at_s']} s; {s2['rate_rps']} req/s = "
                f"{s2['utilisation_after'] * 100:.0f} % of the capacity left; {s2['requests']} "
                f"requests over {s2['duration_s']} s; cut-off {s2['drain_s']} s after the last "
                "arrival\n"
            )
            out.append(
                _row(
                    [
                        "policy",
                        "client-visible failures",
                        "errors",
                        "unfinished",
                        "p99 (all)",
                        "p99 (sent after the kill)",
                        "what the client saw",
                    ]
                )
            )
            out.append(_row(["---", "---:", "---:", "---:", "---:", "---:", "---"]))
            for name, s in per.items():
                if "failed" in s:
                    out.append(_row([f"`{name}`", "gateway failed", "", "", "", "", ""]))
                    continue
                a = s["after_kill"]
                kinds = "; ".join(f"{v}× {k}" for k, v in s["error_kinds"].items())
                out.append(
                    _row(
                        [
                            f"`{name}`",
                            f"**{s['failures']}**",
                            str(s["errors"]),
                            str(s["unfinished"]),
                            _t(s["p99"], s["p99_censored"]),
                            _t(a["p99"], a["p99_censored"]),
                            kinds.replace("|", "/") or "-",
                        ]
                    )
                )
    s3 = r.get("overhead")
    if s3:
        out.append(
            f"\n#### Scenario 3: gateway overhead ({s3['instances']} zero-latency upstreams)\n"
        )
        out.append(
            _row(
                [
                    "path",
                    "sequential p50",
                    "sequential p99",
                    "added p50",
                    "added p99",
                    "max req/s (closed loop)",
                    "p99 at that rate",
                    "gateway CPU then",
                ]
            )
        )
        out.append(_row(["---"] + ["---:"] * 7))
        d = s3["direct"]
        best = max(d["closed_loop"], key=lambda x: x["rps"])
        out.append(
            _row(
                [
                    "client → fleet `/layout-parsing` (direct)",
                    f"{d['sequential']['p50_ms']:.2f} ms",
                    f"{d['sequential']['p99_ms']:.2f} ms",
                    "",
                    "",
                    f"{best['rps']:.0f} (c = {best['concurrency']})",
                    f"{best['p99_ms']:.1f} ms",
                    "-",
                ]
            )
        )
        for pol, x in s3["policies"].items():
            if "failed" in x:
                out.append(_row([f"gateway `{pol}`", "gateway failed", "", "", "", "", "", ""]))
                continue
            best = max(x["closed_loop_ocr"], key=lambda y: y["rps"])
            out.append(
                _row(
                    [
                        f"client → gateway `/ocr` (`{pol}`)",
                        f"{x['sequential_ocr']['p50_ms']:.2f} ms",
                        f"{x['sequential_ocr']['p99_ms']:.2f} ms",
                        f"{x['added_ocr_p50_ms']:.2f} ms",
                        f"{x['added_ocr_p99_ms']:.2f} ms",
                        f"{best['rps']:.0f} (c = {best['concurrency']})",
                        f"{best['p99_ms']:.1f} ms",
                        f"{best['cpu_cores'].get('gateway', 0):.2f} cores",
                    ]
                )
            )
            out.append(
                _row(
                    [
                        f"client → gateway `/layout-parsing` (`{pol}`)",
                        f"{x['sequential_layout']['p50_ms']:.2f} ms",
                        f"{x['sequential_layout']['p99_ms']:.2f} ms",
                        f"{x['added_layout_p50_ms']:.2f} ms",
                        f"{x['added_layout_p99_ms']:.2f} ms",
                        "",
                        "",
                        "",
                    ]
                )
            )
        lines = []
        for pol, x in s3["policies"].items():
            for c in x.get("closed_loop_ocr", []):
                lines.append(
                    f"`{pol}` c = {c['concurrency']}: {c['rps']:.0f} req/s, p99 "
                    f"{c['p99_ms']:.0f} ms, gateway {c['cpu_cores'].get('gateway', 0):.2f}"
                    " cores"
                )
        if lines:
            out.append("\nAll closed-loop points: " + "; ".join(lines) + ".")
    t = r.get("targets", {})
    out.append("\n#### Targets\n")
    out.append(_row(["target", "measured", "met?"]))
    out.append(_row(["---", "---", "---"]))
    if "p99_vs_round_robin" in t:
        x = t["p99_vs_round_robin"]
        lb = (
            " (round robin's p99 is a lower bound, so the ratio is an upper bound)"
            if x["round_robin_p99_is_lower_bound"]
            else ""
        )
        out.append(
            _row(
                [
                    f"85 % load: `{t['default_policy']}` p99 ≤ 0.15 × round robin's",
                    f"{_t(x['default_p99_s'])} / "
                    f"{_t(x['round_robin_p99_s'], x['round_robin_p99_is_lower_bound'])}"
                    f" = {x['ratio']:.3f}{lb}",
                    "**yes**" if x["met"] else "**no**",
                ]
            )
        )
    if "p99_vs_ideal" in t:
        x = t["p99_vs_ideal"]
        extra = ", ".join(
            f"{k.removeprefix('ratio_vs_')}: {v:.3f}"
            for k, v in x.items()
            if k.startswith("ratio_vs_")
        )
        out.append(
            _row(
                [
                    f"85 % load: `{t['default_policy']}` p99 ≤ 1.25 × the ideal dispatcher's",
                    f"{_t(x['default_p99_s'])} / {_t(x['ideal_p99_s'])} = {x['ratio']:.3f}"
                    + (f" (against {extra})" if extra else ""),
                    "**yes**" if x["met"] else "**no**",
                ]
            )
        )
    for mode, x in t.get("kill", {}).items():
        out.append(
            _row(
                [
                    f"10 % of instances die ({mode}): no client-visible failure",
                    f"{x['failures']} failures",
                    "**yes**" if x["met"] else "**no**",
                ]
            )
        )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    path = Path(args[0]) if args else Path(__file__).resolve().parent / "results" / "default.json"
    sys.stdout.write(to_markdown(json.loads(path.read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
