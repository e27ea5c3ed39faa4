"""The jobs benchmark's targets (issue 12) and its markdown tables.

Usage::

    result["targets"] = targets(result)
    print(markdown(result))
"""

from __future__ import annotations

from typing import Any

from bench.report import Table


def target(value: Any, bound: str, ok: bool) -> dict[str, Any]:
    """One target: the measured value, the bound, whether it holds (never for no value)."""
    return {"value": value, "bound": bound, "ok": value is not None and ok}


def verdict(flag: bool) -> str:
    return "pass" if flag else "FAIL"


def targets(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each measured scenario's target: the measured value, the bound and whether it holds."""
    s = result["scenarios"]
    out: dict[str, dict[str, Any]] = {}
    if "idle" in s:
        ratio = s["idle"]["ratio"]
        out["idle_latency_ratio"] = target(ratio, "<= 0.1", ratio <= 0.1)
    if "mixed" in s:
        ratio = s["mixed"]["ratio"]
        out["one_page_p99_ratio"] = target(ratio, "<= 1.5", ratio is not None and ratio <= 1.5)
    if "saturation" in s:
        ratio = s["saturation"]["ratio"]
        out["saturation_pages_ratio"] = target(ratio, ">= 0.95", ratio >= 0.95)
    if "kill" in s:
        k = s["kill"]
        whole = k["results"]["whole_in_order"] == k["jobs"] and k["failure"] is None
        done = f"{k['results']['whole_in_order']}/{k['jobs']}"
        out["kill_all_whole_in_order"] = target(done, "all", whole)
        twice, bound = k["parsed_twice_pages"], k["one_slice_per_job_pages"]
        out["kill_parsed_twice_pages"] = target(twice, f"<= {bound}", twice <= bound)
    return out


def _sizes(pairs: list[list[int]]) -> str:
    return ", ".join(f"{n}x{size}" for size, n in pairs) or "-"


def _first(where: dict[str, Any]) -> str:
    parts = [f"running at the kill for {where['running']}"]
    if where["ended_before"]:
        parts.append(
            f"ended at most {where['ended_within_s']:.2f} s before it (not stored yet) for"
            f" {where['ended_before']}"
        )
    if where["begun_after"]:
        parts.append(f"begun after it (queued at an instance) for {where['begun_after']}")
    return ", ".join(parts)


def markdown(result: dict[str, Any]) -> str:
    """The targets table, then one line of detail per scenario."""
    s, t, cap = result["scenarios"], result["targets"], result["capacity"]
    fleet = result["profile"]["fleet"]
    lines = [
        f"Fleet: {fleet['n']} instances, PDF cost {fleet['request_s'] * 1000:.0f} ms per request"
        f" + {fleet['page_s'] * 1000:.0f} ms per page; capacity {cap['pages_per_s']:.1f} pages/s"
        f" (every instance busy on {result['profile']['max_slice_pages']}-page slices; the"
        f" per-page ceiling is {cap['page_ceiling_per_s']:.0f} pages/s).",
        "",
    ]
    table = Table("targets", ("#", "target", "measured", "bound", "ok"), ("left",) * 5)
    details: list[str] = []  # one line per scenario, after the table

    def row(number: str, what: str, measured: str, key: str, bound: Any = None) -> None:
        target = t[key]
        bound = target["bound"] if bound is None else bound
        table.add(number, what, measured, str(bound), verdict(target["ok"]))

    if "idle" in s:
        i = s["idle"]
        row(
            "1",
            "100-page job on the idle fleet, latency vs one instance parsing it whole",
            f"{i['fanout_latency_s']:.3f} s / {i['whole_latency_s']:.3f} s = {i['ratio']:.3f}",
            "idle_latency_ratio",
        )
        runs = "; ".join(
            f"{r['latency_s']:.3f} s in {r['slices']} slices ({_sizes(r['slice_pages'])} pages)"
            for r in i["runs"]
        )
        details.append(f"- 1: runs {runs}; whole on one instance {i['whole_latency_s']:.3f} s"
                       f" (cost model {i['whole_model_s']:.1f} s).")  # fmt: skip
    if "mixed" in s:
        m = s["mixed"]
        a, b = m["alone"], m["with_jobs"]
        row(
            "2",
            "one-page p99 with 100-page jobs vs alone",
            f"{b['one_page']['p99']:.3f} s / {a['one_page']['p99']:.3f} s = {m['ratio']:.3f}",
            "one_page_p99_ratio",
        )
        details.append(
            f"- 2: {m['one_page_rate_per_s']:.1f} one-page documents/s (p50"
            f" {a['one_page']['p50']:.3f}"
            f" s alone, {b['one_page']['p50']:.3f} s with jobs; errors {a['one_page']['errors']},"
            f" {b['one_page']['errors']}), {m['jobs']} jobs at {m['job_rate_per_s']:.2f}/s; fleet"
            f" busy {a['busy']['one_page']:.0%} alone, {b['busy']['one_page']:.0%} one-page +"
            f" {b['busy']['jobs']:.0%} jobs with jobs; job slices {_sizes(m['job_slice_pages'])}"
            f" pages; jobs whole and in order"
            f" {m['results']['whole_in_order']}/{m['results']['jobs']};"
            f" gateway CPU {b['cpu_cores'].get('gateway', 0):.2f} cores with jobs."
        )
    if "saturation" in s:
        u = s["saturation"]
        row(
            "3",
            "pages/s with jobs alone vs capacity",
            f"{u['steady_pages_per_s']:.1f} / {cap['pages_per_s']:.1f} = {u['ratio']:.3f}",
            "saturation_pages_ratio",
        )
        details.append(
            f"- 3: {u['jobs']} jobs, {u['pages']} pages; steady window"
            f" {u['steady_window_s'][0]:.1f}-"
            f"{u['steady_window_s'][1]:.1f} s (10 % to 80 % of the pages done), fleet busy"
            f" {u['busy_in_window']['jobs']:.0%}; over the whole run (submit to last page)"
            f" {u['overall_pages_per_s']:.1f} pages/s = {u['ratio_overall']:.3f} of the capacity;"
            f" slices {_sizes(u['slice_pages'])} pages; gateway CPU"
            f" {u['cpu_cores'].get('gateway', 0):.2f} cores."
        )
    if "kill" in s:
        k = s["kill"]
        row(
            "4",
            f"`kill -9` while {k['jobs']} jobs run: jobs done whole and in order",
            str(t["kill_all_whole_in_order"]["value"]),
            "kill_all_whole_in_order",
            "all",
        )
        row(
            "4",
            "pages parsed twice (bound: the largest slice of each job, summed)",
            str(k["parsed_twice_pages"]),
            "kill_parsed_twice_pages",
        )
        details.append(
            f"- 4: killed at {k['extracted_at_kill']}/{k['pages']} pages extracted;"
            f" {k['in_flight_at_kill']['slices']} slices ({k['in_flight_at_kill']['pages']} pages)"
            f" were on instances then; pages parsed twice {k['parsed_twice_pages']} over"
            f" {k['parsed_twice_jobs']} jobs (at most {k['max_per_job_in_slices']:.2f} of a job's"
            f" largest slice per job), their first parse {_first(k['parsed_twice_first'])};"
            f" first parse {k['first_parse_after_restart_s']} s after the restart, all done"
            f" {k['recovery_s']:.1f} s after it."
        )
    return "\n".join([*lines, table.markdown(), "", *details])
