"""bench.cpu_ab: gateway variants (revision x worker count) side by side, and its canned fleet."""

from __future__ import annotations

import json

import pytest

from bench import cpu_ab
from bench.cpucap import CpuCapError, cgroup_root
from bench.proxies import call_json, canned_config, ensure_tools, start_canned_fleet


def _need(*tools: str) -> None:
    missing = ensure_tools(tools)
    if missing:
        pytest.skip("; ".join(missing.values()))


def test_two_revisions_in_turn(capsys):
    _need("wrk")
    argv = ["--revs", "HEAD,", "--routes", "pass", "--sizes", "tiny", "--rounds", "2", "-s", "1"]
    assert cpu_ab.main(argv) == 0
    table = capsys.readouterr().out.strip().splitlines()
    assert table[0].startswith("| route | document | `HEAD` ms median (best) | `worktree` ms")
    cells = table[2].split(" | ")
    assert cells[0] == "| pass" and cells[1] == "tiny"
    assert float(cells[2].split()[0]) > 0 and float(cells[3].split()[0]) > 0  # ms
    assert float(cells[4].replace(",", "")) > 0  # answers/s
    assert float(cells[8]) > 0 and float(cells[9].strip("*")) > 0  # ms, answers/s ratios


def test_worker_counts_against_the_canned_fleet(tmp_path, capsys):
    _need("wrk", "nginx")
    try:
        cgroup_root()
    except CpuCapError as exc:
        pytest.skip(f"--worker-cores needs a CPU cgroup: {exc}")
    out = tmp_path / "scaling.json"
    argv = ["--revs", "", "--workers", "1,2", "--fleet", "canned", "-c", "4", "--routes", "ocr"]
    argv += ["--sizes", "tiny", "--rounds", "2", "-s", "1", "--out", str(out)]
    argv += ["--worker-cores", "0.9"]  # each worker in a CPU cgroup of its own (root)
    assert cpu_ab.main(argv) == 0
    printed = capsys.readouterr().out
    assert "`worktree x2` / `worktree x1`: answers/s" in printed
    assert "`worktree x2` bound answers/s (reached)" in printed
    assert "`worktree x2` / `worktree x1`: bound" in printed
    assert "two CPU-bound processes against one" in printed
    res = json.loads(out.read_text())
    assert res["meta"]["fleet"] == "canned" and len(res["meta"]["parallel_speedup"]) == 2
    assert res["meta"]["worker_cores"] == 0.9
    assert not list(cgroup_root()[0].glob("paddleocr-bench-*"))  # the groups are gone
    assert res["meta"]["gateways"]["worktree"]["source"] == "working tree"
    (cell,) = res["cells"]
    assert set(cell["rounds"]) == {"worktree x1", "worktree x2"}
    for runs in cell["rounds"].values():
        assert len(runs) == 2
        for r in runs:  # /ocr answered from the canned pages: no errors, the gateway busy
            assert r["rps"] > 0 and not r["errors"] and r["gateway_cores"] > 0, r


def test_the_bound_is_a_core_per_worker_or_the_machine_shared_with_the_others():
    assert cpu_ab.bound_rps(1, 0.2, 0.05, 2) == pytest.approx(5000)  # its one core
    assert cpu_ab.bound_rps(2, 0.2, 0.05, 2) == pytest.approx(8000)  # 2 cores / 0.25 ms
    assert cpu_ab.bound_rps(2, 0.2, 0.0, 2) == pytest.approx(10000)  # cores of its own: 2x
    assert cpu_ab.bound_rps(4, 0.2, 0.05, 8) == pytest.approx(20000)


def test_the_canned_fleet_answers_every_port_with_its_answer(tmp_path):
    _need("nginx")
    answers = cpu_ab.canned_answers()
    fleet = start_canned_fleet(3, tmp_path / "fleet", answers)
    try:
        assert len(set(fleet.ports)) == 3
        for port in fleet.ports:
            status, body = call_json(port, "/layout-parsing", b'{"file": "x", "fileType": 1}')
            assert (status, body) == (200, answers["/layout-parsing"])
        status, body = call_json(fleet.ports[1], "/restructure-pages", b"{}")
        assert status == 200 and body["result"]["layoutParsingResults"][0]["markdown"]["text"]
        assert call_json(fleet.ports[2], "/elsewhere", b"{}")[0] == 404
    finally:
        fleet.stop()


def test_a_canned_answer_that_nginx_would_read_as_a_variable_is_refused(tmp_path):
    with pytest.raises(ValueError, match="/layout-parsing"):
        canned_config([1], tmp_path, {"/layout-parsing": {"text": "costs $5"}})


@pytest.mark.parametrize(
    "flag, value, named",
    [
        ("--routes", "pass,fast", "fast"),
        ("--sizes", "2 GB", "2 GB"),
        ("--workers", "0", "0"),
        ("--worker-cores", "1.5", "1.5"),
    ],
)
def test_bad_arguments_are_named(flag, value, named, capsys):
    with pytest.raises(SystemExit) as exc:
        cpu_ab.main([flag, value])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert flag in err and named in err
