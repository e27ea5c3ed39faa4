"""The gateway-against-nginx CPU benchmark (bench/proxy_cpu.py) and its parts.

Real processes, real /proc, real nginx, wrk and gateway on loopback; shapes and accounting are
asserted, never timings.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from bench import cpu_cell, plots, procstat, proxies, proxy_cpu, proxy_cpu_report
from bench.proxies import ensure_tools, nginx_config
from bench.workload import parse_work
from bench.wrk import parse_output, write_script

# ------------------------------------------------------------------------- process-tree accounting


BURNER = textwrap.dedent(
    """
    import subprocess, sys, time
    burn = "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.3: pass"
    subprocess.run([sys.executable, "-c", burn])          # a child that exits, reaped
    live = subprocess.Popen([sys.executable, "-c", burn + "\\ntime.sleep(60)"])  # one that stays
    print("ready", flush=True)
    live.wait()
    """
)


def test_tree_times_tell_the_kernels_part():
    calls = "import os\nfor _ in range(300_000): os.stat('/')"  # a system call each
    spin = "for _ in range(20_000_000): pass"  # none
    for code, kernel_heavy in ((calls, True), (spin, False)):
        child = f"import sys\n{code}\nprint('done', flush=True)\nsys.stdin.read()"
        root = subprocess.Popen([sys.executable, "-c", child], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)  # fmt: skip
        try:
            assert root.stdout.readline() == "done\n"
            cpu, sys_s = procstat.tree_times(root.pid)
        finally:
            root.communicate("")
        assert 0 <= sys_s <= cpu and cpu >= 0.1, (cpu, sys_s)
        assert (sys_s > 0.2 * cpu) == kernel_heavy, (code, cpu, sys_s)


def test_tree_cpu_counts_live_descendants_and_reaped_children():
    root = subprocess.Popen([sys.executable, "-c", BURNER], stdout=subprocess.PIPE, text=True)
    try:
        root.stdout.readline()  # the reaped child is done, the live one has started
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            kids = [p.pid for p in procstat.tree(root.pid) if p.pid != root.pid]
            if kids and procstat.tree_cpu_s(kids[0]) >= 0.3:
                break
            time.sleep(0.05)
        assert len(kids) == 1, "one live descendant"
        reaped = procstat.tree_cpu_s(root.pid) - procstat.tree_cpu_s(root.pid, reaped=False)
        # 0.3 s burnt by each child; the parent's own time is small
        assert procstat.tree_cpu_s(root.pid) >= 0.55
        assert reaped >= 0.25  # the reaped one, in the parent's children's times
    finally:
        for p in procstat.tree(root.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGKILL)
        root.wait()
    assert procstat.tree(root.pid) == []
    assert procstat.cpu_s(root.pid) == 0.0


def test_tree_meter_starts_at_zero_and_machine_meter_reads_cores():
    meter = procstat.TreeMeter(os.getpid())
    m = procstat.MachineMeter()
    t = time.process_time()
    while time.process_time() - t < 0.1:
        pass
    assert meter.read() >= 0.05
    assert 0.0 <= m.read() <= (os.cpu_count() or 1) + 0.01


# ------------------------------------------------------------------- wrk, nginx, documents


def test_wrk_output_and_script(tmp_path):
    out = (
        "Running 1s test\n"
        'WRK_JSON {"requests":900,"duration_us":1500000,"bytes":1,"connect":0,"read":0,'
        '"write":0,"status":3,"timeout":0,"p50_us":1234.5,"p90_us":2000,"p99_us":4000,'
        '"max_us":9000,"mean_us":1500}\n'
    )
    r = parse_output(out)
    assert (r.requests, r.rps, r.p50_ms, r.p99_ms, r.errors) == (
        900,
        600.0,
        1.234,
        4.0,
        {"status": 3},
    )
    with pytest.raises(ValueError, match="WRK_JSON"):
        parse_output("wrk: connection refused\n")
    body = tmp_path / "b.json"
    script = write_script(tmp_path / "s.lua", body, "/ocr")
    text = script.read_text()
    assert f'"{body}"' in text and 'wrk.path = "/ocr"' in text and "function done" in text


def test_nginx_config_lists_every_upstream(tmp_path):
    conf = nginx_config([9001, 9002, 9003], 8080, tmp_path, workers="auto")
    assert conf.count("server 127.0.0.1:900") == 3
    assert "worker_processes auto;" in conf and "listen 127.0.0.1:8080" in conf
    assert "keepalive 128;" in conf and 'proxy_set_header Connection "";' in conf


@pytest.mark.parametrize("size", ["tiny", "1 KB", "100 KB", "1 MB"])
def test_documents_are_pngs_of_the_size_asked(size):
    doc = proxy_cpu.document(size)
    assert doc[:8] == b"\x89PNG\r\n\x1a\n" and doc[12:16] == b"IHDR"
    width, height = struct.unpack(">II", doc[16:24])
    assert width > 0 and height > 0
    assert parse_work(doc) == (0.0, 0)  # the fleet reads its work: none
    want = proxy_cpu.SIZES[size]
    if want:
        assert 0.9 * want <= len(doc) <= 1.02 * want
    b = proxy_cpu.bodies(doc)
    assert json.loads(b["pass"])["fileType"] == 1
    assert json.loads(b["pass"])["file"] == json.loads(b["ocr"])["base64"]


def test_window_waits_a_round_and_measures_two():
    prof = cpu_cell.WindowSpec()
    fast = cpu_cell.plan_window(prof, 1, 1000.0)  # short cells: the shortest window
    assert (fast.start_s, fast.end_s, fast.wrk_s) == (prof.lead_s, 2 - prof.tail_s, 2)
    slow = cpu_cell.plan_window(prof, 32, 10.0)  # a round is 3.2 s
    assert slow.start_s == pytest.approx(3.2) and slow.end_s - slow.start_s >= 6.4
    worst = cpu_cell.plan_window(prof, 32, 0.5)  # capped at max_seconds
    assert worst.wrk_s == prof.max_seconds and worst.start_s < worst.end_s < worst.wrk_s


def test_a_window_with_too_few_requests_is_run_again(monkeypatch):
    tries = []

    def fake_window(ep, script, conc, win, fleet_pid, admin):
        tries.append(win)
        n = 3 if len(tries) == 1 else 40  # the first window saw 3 requests, the second 40
        return {
            "forwarded": n,
            "rps": n / 2,
            "wrk_rps": 1.0,
            "window_s": [win.start_s, win.end_s],
            "cpu_s": 0.4,
            "cpu_ms": None,
            "sys_s": 0.1,
            "fleet_cpu_s": 0.2,
            "fleet_cpu_ms": None,
            "other_cores": 0.0,
        }

    monkeypatch.setattr(cpu_cell, "check_answer", lambda ep, body: "")
    monkeypatch.setattr(cpu_cell, "measure_window", fake_window)
    ep = cpu_cell.Endpoint("gateway", "ocr", 1, 2)
    spec = cpu_cell.WindowSpec()
    out = cpu_cell.run_cell(ep, b"{}", Path("x.lua"), 32, spec, 12.0, 3, 4)
    assert len(tries) == 2 and tries[1].wrk_s <= spec.retry_seconds
    assert out["cpu_ms"] == 10.0 and out["first_try"]["forwarded"] == 3 and "failed" not in out
    assert out["sys_ms"] == 2.5 and "sys_s" not in out  # 0.1 s of the 0.4 in the kernel
    tries.clear()
    monkeypatch.setattr(cpu_cell, "measure_window", lambda *a: {**fake_window(*a), "forwarded": 5})
    out = cpu_cell.run_cell(ep, b"{}", Path("x.lua"), 32, spec, 12.0, 3, 4)
    assert "fewer than 32" in out["failed"] and out["cpu_ms"] is None


def test_a_window_while_other_processes_were_busy_is_measured_again(monkeypatch):
    others = iter([0.9, 0.4, 0.6])  # the quietest of three tries is kept

    def fake_window(ep, script, conc, win, fleet_pid, admin):
        other = next(others)
        return {"forwarded": 40, "rps": 20.0, "wrk_rps": 20.0, "window_s": [0.3, 1.8],
                "cpu_s": other, "cpu_ms": None, "sys_s": 0.1, "fleet_cpu_s": 0.2,
                "fleet_cpu_ms": None, "other_cores": other}  # fmt: skip

    monkeypatch.setattr(cpu_cell, "check_answer", lambda ep, body: "")
    monkeypatch.setattr(cpu_cell, "measure_window", fake_window)
    ep = cpu_cell.Endpoint("gateway", "pass", 1, 2)
    out = cpu_cell.run_cell(ep, b"{}", Path("x.lua"), 1, cpu_cell.WindowSpec(), 12.0, 3, 4)
    assert out["busy_windows"] == [0.9, 0.4, 0.6] and out["other_cores"] == 0.4
    assert out["cpu_ms"] == 10.0  # 0.4 s over 40 requests


def test_recorded_command_leaves_out_where_results_go():
    argv = ["--gateway-rev", "HEAD", "--docs", "none", "--out=/tmp/x", "--keep-logs"]
    argv += ["--gateway-args", "--workers 2"]
    want = "python -m bench.proxy_cpu --gateway-rev HEAD --gateway-args '--workers 2'"
    assert proxy_cpu.measured_command(argv) == want


def test_gateway_of_a_git_revision(tmp_path):
    src = proxies.snapshot_rev(tmp_path, "HEAD")
    assert (src / "gateway" / "__main__.py").is_file()
    with pytest.raises(SystemExit, match="--gateway-rev no-such-rev"):
        proxies.snapshot_rev(tmp_path / "x", "no-such-rev")
    rev = proxies.gateway_revision("HEAD")
    assert len(rev["commit"]) == 12 and rev["dirty"] is False


# ------------------------------------------------------------------------------ report and plots


def _cell(target, route, size, conc, cpu, **kw):
    c = {
        "target": target,
        "route": route,
        "size": size,
        "doc_bytes": proxy_cpu.SIZES[size] or 182,
        "body_bytes": 100,
        "concurrency": conc,
        "requests": 100,
        "rps": 100.0,
        "p50_ms": 1.0,
        "p99_ms": 2.0,
        "errors": {},
        "forwarded": 100,
        "cpu_ms": cpu,
        "other_cores": 0.1,
    }
    c.update(kw)
    return c


def _results():
    cells = []
    for size in ("tiny", "1 MB"):
        for conc in (1, 32):
            cells += [
                _cell("direct", "/layout-parsing", size, conc, None),
                _cell("nginx", "/layout-parsing", size, conc, 0.05),
                _cell("gateway", "/layout-parsing", size, conc, 0.5),
                _cell("gateway", "/ocr", size, conc, 3.0 if size == "1 MB" else 1.5),
            ]
    cells[-1]["cpu_ms"] = 5.0  # /ocr of 1 MB at c = 32 misses its 4 ms
    return {
        "meta": {
            "command": "python -m bench.proxy_cpu",
            "date": "2026-12-01T00:00:00+00:00",
            "cpus": 2,
            "machine": "test",
            "python": "3.11",
            "nginx": "nginx/1.22.1",
            "gateway_sources": {"sha256": "abc"},
            "gateway_policy": "queue",
            "gateway_args": [],
            "settings": {"sizes": ["tiny", "1 MB"], "concurrency": [1, 32], "instances": 48},
            "wall_s": 1.0,
        },
        "cells": cells,
        "targets": proxy_cpu.evaluate_targets(cells),
    }


def test_targets_judge_the_worst_concurrency():
    t = {x["name"]: x for x in _results()["targets"]}
    assert t["pass-through of a small document"]["met"] is True
    assert t["`/ocr` of a small image"]["met"] is False  # 1.5 > 1.0
    one_mb = t["`/ocr` of a 1 MB image"]
    assert one_mb["cpu_ms"] == {"1": 3.0, "32": 5.0} and one_mb["met"] is False
    assert proxy_cpu.evaluate_targets([])[0]["met"] is None


def test_report_tables_and_docs_markers(tmp_path):
    report = proxy_cpu_report.build_report(_results())
    md = proxy_cpu_report.markdown(report)
    assert "#### Targets: the gateway's CPU per document" in md
    assert "| tiny (182 B) | 1 | 0.050 | 0.500 | 10.0× | 1.500 | 30.0× |" in md
    assert "+0.00 / +0.00 ms" in md  # added over direct
    doc = tmp_path / "bench.md"
    doc.write_text("# B\n\nbefore\n")
    assert "no " in proxy_cpu_report.update_docs(doc, report)  # no markers: left alone
    assert doc.read_text() == "# B\n\nbefore\n"
    doc.write_text(
        f"# B\n\nbefore\n{proxy_cpu_report.BEGIN}\nold\n{proxy_cpu_report.END}\n\nafter\n"
    )
    proxy_cpu_report.update_docs(doc, report)
    text = doc.read_text()
    assert text.startswith("# B\n\nbefore\n") and text.endswith(
        f"{proxy_cpu_report.END}\n\nafter\n"
    )
    assert "old" not in text and "| tiny (182 B) |" in text
    proxy_cpu_report.update_docs(doc, report)
    assert doc.read_text() == text  # idempotent


def test_plots_write_pngs(tmp_path):
    if plots.unavailable():
        pytest.skip(plots.unavailable())
    png = plots.plot_cpu_by_size(_results(), tmp_path / "cpu.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    balancing = {
        "meta": {"policies": ["round_robin", "queue"], "default_policy": "queue"},
        "balancing": {
            "loads": {
                k: {
                    "rows": {
                        "ideal": {"p99": 3.0, "p99_censored": False},
                        "round_robin": {"p99": 10.0 * i, "p99_censored": True},
                        "queue": {"p99": 3.5, "p99_censored": False},
                    }
                }
                for i, k in enumerate(("50", "85"), start=1)
            }
        },
    }
    png = plots.plot_p99_by_load(balancing, tmp_path / "p99.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------------------ the smoke run


def test_smoke_run(tmp_path, capsys):
    missing = ensure_tools(("nginx", "wrk"))
    if "wrk" in missing:
        pytest.skip(missing["wrk"])
    out = tmp_path / "smoke.json"
    argv = ["--smoke", "--out", str(out), "--img-dir", str(tmp_path), "--docs", "none"]
    if "nginx" in missing:
        argv.append("--no-nginx")
    assert proxy_cpu.main(argv) == 0
    res = json.loads(out.read_text())
    cells = res["cells"]
    assert not [c for c in cells if "failed" in c], cells
    seen = {(c["target"], c["route"]) for c in cells}
    want = {("direct", "/layout-parsing"), ("gateway", "/layout-parsing"), ("gateway", "/ocr")}
    if "nginx" not in missing:
        want.add(("nginx", "/layout-parsing"))
    assert want == seen
    for c in cells:
        assert c["requests"] > 0 and c["forwarded"] > 0 and not c["errors"], c
        if c["target"] != "direct":
            assert c["cpu_ms"] > 0, c
    assert {t["name"] for t in res["targets"]} == {t.name for t in proxy_cpu.TARGETS}
    assert res["meta"]["gateway_sources"]["sha256"]
    printed = capsys.readouterr().out
    assert "CPU per request (ms)" in printed and "NOT MEASURED" in printed  # no 1 MB in smoke
    assert "in the process / in the kernel" in printed
    assert all(0 <= c["sys_ms"] <= c["cpu_ms"] for c in cells if c["target"] != "direct")
    if not plots.unavailable():
        assert (tmp_path / plots.CPU_BY_SIZE).exists()
    if "nginx" in missing:
        pytest.skip(f"the gateway part passed; {missing['nginx']}")
