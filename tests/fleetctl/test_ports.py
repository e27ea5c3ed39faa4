"""`fleetctl ports` against real sockets on loopback."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from fleetctl.cli import main
from fleetctl.ports import _proc_owner
from tests.doubles.servers import ServerThread
from tests.fleetctl.conftest import one_card_topology
from tests.fleetctl.fakes import fake_paddlex, fake_vllm
from tests.ports import free_port


def outputs(tmp_path: Path, vllm: list[int], paddlex: list[int]) -> Path:
    pdx = [{"port": p, "container": f"paddle-{p}-sim-0", "start_command": "true"} for p in paddlex]
    topo = one_card_topology(
        [
            {
                "port": v,
                "container": f"vllm-sim-paddleocr-{v}-sim-0",
                "paddlex": pdx if i == 0 else [],
            }
            for i, v in enumerate(vllm)
        ]
    )
    p = tmp_path / "outputs.json"
    p.write_text(json.dumps({"topology": topo}))
    return p


def test_ports_states(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = socket.socket()
    raw.bind(("127.0.0.1", 0))
    raw.listen()
    bound = socket.socket()
    bound.bind(("127.0.0.1", 0))  # bound, never listening (like vLLM while it loads)
    free, raw_port, bound_port = free_port(), raw.getsockname()[1], bound.getsockname()[1]
    with ServerThread(fake_paddlex()) as pdx, ServerThread(fake_vllm()) as vll:
        # the last planned PaddleX port is where the vLLM fake answers: taken by the wrong kind
        path = outputs(
            tmp_path, vllm=[vll.port, bound_port], paddlex=[pdx.port, raw_port, free, vll.port]
        )
        code = main(["ports", "--outputs", str(path), "--json"])
        rows = json.loads(capsys.readouterr().out)
    raw.close()
    bound.close()
    assert code == 1
    got = {(r["kind"], r["port"]): r for r in rows}
    assert got[("vllm", vll.port)]["state"] == "listening"
    assert got[("paddlex", pdx.port)]["state"] == "listening"
    taken = got[("paddlex", raw_port)]
    assert taken["state"] == "taken" and taken["detail"] == "not a fleet service"
    assert f"[{os.getpid()}]" in (taken["owner"] or "")
    assert got[("paddlex", free)]["state"] == "free"
    assert got[("vllm", bound_port)]["state"] == "bound, not listening"
    wrong = got[("paddlex", vll.port)]
    assert wrong["state"] == "taken" and wrong["detail"] == "vllm answers, expected paddlex"


def test_ports_all_fine_and_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with ServerThread(fake_paddlex()) as pdx:
        path = outputs(tmp_path, vllm=[free_port()], paddlex=[pdx.port])
        assert main(["ports", "--outputs", str(path)]) == 0
    out = capsys.readouterr().out
    assert "planned ports" in out and "1 free, 1 listening" in out


def test_proc_owner_finds_this_process() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    try:
        assert _proc_owner(s.getsockname()[1]).endswith(f"[{os.getpid()}]")
    finally:
        s.close()
