"""Ops commands: HTTP parts against loopback fakes, Docker parts against a fake `docker`."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from fleetctl.cli import main
from fleetctl.topology import compact_ranges, load_fleet
from tests.doubles.servers import ServerThread
from tests.fleetctl.conftest import FakeDocker
from tests.fleetctl.fakes import fake_gateway, fake_paddlex, fake_vllm
from tests.ports import free_port


class Fleet:
    def __init__(self) -> None:
        self.v1 = ServerThread(fake_vllm()).start()
        self.v2 = ServerThread(fake_vllm(model="some-other-model")).start()
        self.p1 = ServerThread(fake_paddlex()).start()
        self.p3 = ServerThread(fake_paddlex()).start()
        self.p2_port = free_port()  # nothing listens: PaddleX down
        self.gw = ServerThread(fake_gateway()).start()
        ups = [
            {
                "url": self.p1.url,
                "host": "local",
                "card": 0,
                "vllm": self.v1.url,
                "container": self.c("paddle", self.p1.port, "npu-0"),
                "state": "healthy",
                "in_flight": 2,
                "requests": {},
            },
            {
                "url": f"http://127.0.0.1:{self.p2_port}",
                "host": "local",
                "card": 0,
                "vllm": self.v1.url,
                "container": self.c("paddle", self.p2_port, "npu-0"),
                "state": "ejected",
                "in_flight": 0,
                "requests": {},
            },
            {
                "url": self.p3.url,
                "host": "gpu2",
                "card": 1,
                "vllm": self.v2.url,
                "container": self.c("paddle", self.p3.port, "gpu-1"),
                "state": "healthy",
                "in_flight": 0,
                "requests": {},
            },
        ]
        self.gw.app.state.upstreams = ups

    @staticmethod
    def c(prefix: str, port: int, dev: str) -> str:
        return f"{prefix}-{port}-{dev}"

    def paddlex(self, port: int, dev: str) -> dict[str, Any]:
        name = self.c("paddle", port, dev)
        return {
            "port": port,
            "url": f"http://127.0.0.1:{port}",
            "container": name,
            "pipeline_config": f"/etc/paddleocr-fleet/pipeline_config_vllm-{port}.yaml",
            "log": f"/data/logs/paddle-{port}.log",
            "start_command": f"docker exec -d {name} bash -c 'paddlex --serve --port {port}'",
        }

    def outputs(self) -> dict[str, Any]:
        v1, v2 = self.v1.port, self.v2.port
        hosts = [
            {
                "name": "local",
                "address": "127.0.0.1",
                "docker_host": None,
                "accelerator": "ascend",
                "cards": [
                    {
                        "card": 0,
                        "vllm": [
                            {
                                "port": v1,
                                "url": self.v1.url,
                                "log": f"/data/logs/vllm-{v1}.log",
                                "container": self.c("vllm-ascend-paddleocr", v1, "npu-0"),
                                "paddlex": [
                                    self.paddlex(self.p1.port, "npu-0"),
                                    self.paddlex(self.p2_port, "npu-0"),
                                ],
                            }
                        ],
                    }
                ],
            },
            {
                "name": "gpu2",
                "address": "127.0.0.1",
                "docker_host": "tcp://gpu2:2375",
                "accelerator": "nvidia",
                "cards": [
                    {
                        "card": 1,
                        "vllm": [
                            {
                                "port": v2,
                                "url": self.v2.url,
                                "log": f"/data/logs/vllm-{v2}.log",
                                "container": self.c("vllm-paddleocr", v2, "gpu-1"),
                                "paddlex": [self.paddlex(self.p3.port, "gpu-1")],
                            }
                        ],
                    }
                ],
            },
        ]
        return {
            "upstreams": [self.p1.url, f"http://127.0.0.1:{self.p2_port}", self.p3.url],
            "vllm_endpoints": [self.v1.url, self.v2.url],
            "gateway_url": self.gw.url,
            "topology": {
                "hosts": hosts,
                "gateway": {
                    "host": "local",
                    "port": self.gw.port,
                    "url": self.gw.url,
                    "container": "paddleocr-fleet-gateway",
                    "config_path": "/etc/paddleocr-fleet/gateway.json",
                },
            },
        }

    def containers(self) -> list[str]:
        return [
            self.c("vllm-ascend-paddleocr", self.v1.port, "npu-0"),
            self.c("paddle", self.p1.port, "npu-0"),
            self.c("paddle", self.p2_port, "npu-0"),
            self.c("vllm-paddleocr", self.v2.port, "gpu-1"),
            self.c("paddle", self.p3.port, "gpu-1"),
            "paddleocr-fleet-gateway",
        ]

    def stop(self) -> None:
        for s in (self.v1, self.v2, self.p1, self.p3, self.gw):
            s.stop()


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    f = Fleet()
    yield f
    f.stop()


@pytest.fixture
def outputs(
    fleet: Fleet, tmp_path: Path, fake_docker: FakeDocker, monkeypatch: pytest.MonkeyPatch
) -> Path:
    p = tmp_path / "outputs.json"
    p.write_text(json.dumps(fleet.outputs()))
    fake_docker.set_states({n: "running" for n in fleet.containers()})
    monkeypatch.setenv("DOCKER_HOST", "unix:///run/env-docker.sock")
    monkeypatch.setenv("FLEETCTL_OUTPUTS", str(p))
    fleet.p1.app.state.bodies.clear()
    return p


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any]:
    code = main([*args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_status(
    fleet: Fleet, outputs: Path, fake_docker: FakeDocker, capsys: pytest.CaptureFixture[str]
) -> None:
    states = {n: "running" for n in fleet.containers()}
    states[fleet.c("vllm-paddleocr", fleet.v2.port, "gpu-1")] = "exited"
    fake_docker.set_states(states)
    code, data = run_json(capsys, "status")
    assert code == 1 and data["ok"] is False
    rows = {(r["kind"], r["port"]): r for r in data["instances"]}
    assert len(rows) == 6
    p1, p2 = rows[("paddlex", fleet.p1.port)], rows[("paddlex", fleet.p2_port)]
    assert p1["ok"] and p1["health"] == "ok" and p1["gateway"] == "healthy, 2 in flight"
    assert p1["vllm"] == fleet.v1.port and p1["container_state"] == "running"
    assert not p2["ok"] and p2["health"].startswith("down") and p2["gateway"] == "ejected"
    v1, v2 = rows[("vllm", fleet.v1.port)], rows[("vllm", fleet.v2.port)]
    assert v1["ok"] and v1["gateway"] == "1/2 paddlex healthy"
    assert not v2["ok"] and v2["container_state"] == "exited (137)"
    assert rows[("gateway", fleet.gw.port)]["ok"]
    # one `docker inspect` per host, each with that host's engine
    inspects = [c for c in fake_docker.calls() if c["argv"][0] == "inspect"]
    by_host = {c["docker_host"]: c["argv"] for c in inspects}
    assert len(inspects) == 2
    assert by_host["tcp://gpu2:2375"] == [
        "inspect",
        "--type",
        "container",
        fleet.c("vllm-paddleocr", fleet.v2.port, "gpu-1"),
        fleet.c("paddle", fleet.p3.port, "gpu-1"),
    ]
    assert "paddleocr-fleet-gateway" in by_host["unix:///run/env-docker.sock"]


def test_status_selection_table_and_missing_container(
    fleet: Fleet, outputs: Path, fake_docker: FakeDocker, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", "--port", str(fleet.p1.port)]) == 0
    out = capsys.readouterr().out
    assert "fleet status" in out and "1/1 healthy" in out
    code, data = run_json(capsys, "status", "--card", "1")
    # status checks /health only (the wrong served model is verify's business)
    assert {r["host"] for r in data["instances"]} == {"gpu2"} and code == 0
    fake_docker.set_states({})
    code, data = run_json(capsys, "status", "--name", "paddle-*-gpu-1")
    assert [r["container_state"] for r in data["instances"]] == ["missing"] and code == 1


def test_status_and_verify_name_missing_or_stopped_containers_and_their_repair(
    fleet: Fleet,
    outputs: Path,
    fake_docker: FakeDocker,
    capsys: pytest.CaptureFixture[str],
) -> None:
    states = {n: "running" for n in fleet.containers()}
    stopped = fleet.c("vllm-paddleocr", fleet.v2.port, "gpu-1")
    missing = fleet.c("paddle", fleet.p1.port, "npu-0")
    states[stopped] = "exited"
    del states[missing]
    fake_docker.set_states(states)
    code, data = run_json(capsys, "status")
    assert code == 1
    assert data["repair"] == {
        "containers": [
            {"container": missing, "host": "local", "state": "missing"},
            {"container": stopped, "host": "gpu2", "state": "exited (137)"},
        ],
        "command": "pulumi up --refresh",  # no stack named anywhere
    }
    # The stack from the topology (the stack's own output), or the one asked for.
    named = {**fleet.outputs()}
    named["topology"] = {**named["topology"], "stack": "prod"}
    outputs.write_text(json.dumps(named))
    assert main(["status"]) == 1
    out = capsys.readouterr().out
    assert f"{missing} (missing), {stopped} (exited (137))" in out
    assert "repair: pulumi up --refresh --stack prod" in out
    code, data = run_json(capsys, "status", "--stack", "staging")
    assert data["repair"]["command"] == "pulumi up --refresh --stack staging"
    code, data = run_json(capsys, "verify", "--timeout", "10")
    assert code == 1 and data["repair"]["command"] == "pulumi up --refresh --stack prod"
    assert [c["container"] for c in data["repair"]["containers"]] == [missing, stopped]
    assert main(["verify", "--timeout", "10"]) == 1
    assert "repair: pulumi up --refresh --stack prod" in capsys.readouterr().out
    # Nothing missing or stopped: no repair.
    fake_docker.set_states({n: "running" for n in fleet.containers()})
    code, data = run_json(capsys, "status")
    assert "repair" not in data


def test_unknown_port_and_no_topology(
    outputs: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["status", "--port", "1"]) == 2
    err = capsys.readouterr().err
    assert "unknown port 1; known ports: vllm" in err and "paddlex" in err
    assert main(["restart", "vllm", "2"]) == 2
    assert "unknown port 2" in capsys.readouterr().err
    monkeypatch.delenv("FLEETCTL_OUTPUTS")
    monkeypatch.setenv("PATH", str(tmp_path / "fakebin"))
    assert main(["status"]) == 2
    err = capsys.readouterr().err
    assert "--outputs FILE" in err and "FLEETCTL_OUTPUTS" in err and "Pulumi CLI" in err
    assert main(["status", "--outputs", str(tmp_path / "nope.json")]) == 2
    assert compact_ranges([9025, 9026, 9027, 9035, 9101]) == "9025-9027, 9035, 9101"


def test_verify(fleet: Fleet, outputs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, data = run_json(capsys, "verify", "--timeout", "10")
    assert code == 1
    res = {(r["kind"], r["port"]): r for r in data["checks"]}
    assert res[("vllm", fleet.v1.port)]["ok"]
    bad = res[("vllm", fleet.v2.port)]
    assert not bad["ok"] and "PaddleOCR-VL-1.5-0.9B not served" in bad["detail"]
    assert res[("paddlex", fleet.p1.port)]["ok"]
    assert not res[("paddlex", fleet.p2_port)]["ok"]
    gw = res[("gateway", fleet.gw.port)]
    assert gw["ok"] and gw["check"] == "POST /ocr" and "via http://fake:1" in gw["detail"]
    (body,) = fleet.p1.app.state.bodies  # through that instance alone, once
    assert body["fileType"] == 1 and body["visualize"] is False
    img = Image.open(io.BytesIO(base64.b64decode(body["file"])))
    img.load()
    assert img.format == "PNG" and img.size[0] > 0
    assert main(["verify", "--port", f"{fleet.v1.port},{fleet.p1.port}"]) == 0


def test_restart_paddlex_reruns_start_command(
    fleet: Fleet, outputs: Path, fake_docker: FakeDocker, capsys: pytest.CaptureFixture[str]
) -> None:
    name = fleet.c("paddle", fleet.p3.port, "gpu-1")
    assert main(["restart", "paddlex", str(fleet.p3.port), "--wait", "5"]) == 0
    calls = fake_docker.calls()
    assert [c["argv"] for c in calls] == [
        ["restart", name],
        ["exec", "-d", name, "bash", "-c", f"paddlex --serve --port {fleet.p3.port}"],
    ]
    assert {c["docker_host"] for c in calls} == {"tcp://gpu2:2375"}
    out = capsys.readouterr().out
    assert "docker restart" in out and ": ok" in out


def test_restart_vllm_and_wait_failure(
    fleet: Fleet, outputs: Path, fake_docker: FakeDocker, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["restart", "vllm", str(fleet.v1.port), "--no-wait"]) == 0
    assert fake_docker.calls() == [
        {
            "argv": ["restart", fleet.c("vllm-ascend-paddleocr", fleet.v1.port, "npu-0")],
            "docker_host": "unix:///run/env-docker.sock",
        }
    ]
    # a PaddleX that never comes up: non-zero exit after the wait
    assert main(["restart", "paddlex", str(fleet.p2_port), "--wait", "0.5"]) == 1


def test_logs(
    fleet: Fleet, outputs: Path, fake_docker: FakeDocker, capfd: pytest.CaptureFixture[str]
) -> None:
    v = fleet.c("vllm-ascend-paddleocr", fleet.v1.port, "npu-0")
    assert main(["logs", "vllm", str(fleet.v1.port), "-n", "50"]) == 0
    out, err = capfd.readouterr()
    assert f"fake log line of {v}" in out and f"/data/logs/vllm-{fleet.v1.port}.log" in err
    assert main(["logs", "paddlex", str(fleet.p3.port), "-f"]) == 0
    assert main(["logs", "paddlex", str(fleet.p1.port), "--file", "-n", "5", "-f"]) == 0
    p1 = fleet.c("paddle", fleet.p1.port, "npu-0")
    calls = fake_docker.calls()
    assert calls[0]["argv"] == ["logs", "--tail", "50", v]
    assert calls[1] == {
        "argv": ["logs", "--tail", "100", "-f", fleet.c("paddle", fleet.p3.port, "gpu-1")],
        "docker_host": "tcp://gpu2:2375",
    }
    assert calls[2]["argv"] == [
        "exec",
        p1,
        "tail",
        "-n",
        "5",
        "-F",
        f"/data/logs/paddle-{fleet.p1.port}.log",
    ]


def test_npu(
    fleet: Fleet, outputs: Path, fake_docker: FakeDocker, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["npu", "--host", "local"]) == 0  # npu-smi not here: via the vLLM container
    out = capsys.readouterr().out
    assert "npu-smi 24.1.0" in out and "via docker exec" in out
    assert main(["npu"]) == 1  # gpu2's container has no nvidia-smi: said so, exit 1
    out = capsys.readouterr().out
    assert "nvidia-smi is not available on gpu2" in out
    execs = [c for c in fake_docker.calls() if c["argv"][0] == "exec"]
    assert execs[-1] == {
        "argv": ["exec", fleet.c("vllm-paddleocr", fleet.v2.port, "gpu-1"), "nvidia-smi"],
        "docker_host": "tcp://gpu2:2375",
    }


def test_start_all(
    fleet: Fleet, outputs: Path, fake_docker: FakeDocker, capsys: pytest.CaptureFixture[str]
) -> None:
    states = {n: "running" for n in fleet.containers()}
    v1 = fleet.c("vllm-ascend-paddleocr", fleet.v1.port, "npu-0")
    p2 = fleet.c("paddle", fleet.p2_port, "npu-0")
    states[v1] = states[p2] = "exited"
    fake_docker.set_states(states)
    # p2 never answers /health, so the final wait fails -> exit 1
    assert main(["start-all", "--wait", "0.5"]) == 1
    acts = [c["argv"] for c in fake_docker.calls() if c["argv"][0] != "inspect"]
    assert acts == [
        ["start", v1],
        ["start", p2],
        ["exec", "-d", p2, "bash", "-c", f"paddlex --serve --port {fleet.p2_port}"],
    ]
    # healthy PaddleX (p1, p3) were left alone
    assert main(["start-all", "--card", "1", "--no-wait"]) == 0
    assert "nothing to start" in capsys.readouterr().out


def test_load_fleet_shapes(fleet: Fleet, outputs: Path, tmp_path: Path) -> None:
    f = load_fleet(outputs)
    assert [i.kind for i in f.instances].count("paddlex") == 3
    p3 = f.find("paddlex", fleet.p3.port)
    assert p3.docker_host == "tcp://gpu2:2375" and p3.vllm_port == fleet.v2.port
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(fleet.outputs()["topology"]))
    assert len(load_fleet(bare).instances) == 6


def test_status_per_host_reads_each_hosts_gateway(
    fleet: Fleet,
    tmp_path: Path,
    fake_docker: FakeDocker,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """In the per-host layout each host's rows come from that host's gateway, not from the
    balancer (which would answer with one gateway's view)."""
    ejected_there = [
        {**u, "state": "ejected"} for u in fleet.gw.app.state.upstreams if u["host"] == "gpu2"
    ]
    gw2 = ServerThread(fake_gateway(upstreams=ejected_there)).start()
    try:
        out = fleet.outputs()
        local = out["topology"].pop("gateway")
        remote = {**local, "host": "gpu2", "port": gw2.port, "url": gw2.url}
        out["topology"]["gateways"] = [local, remote]
        out["gateway_url"] = f"http://127.0.0.1:{free_port()}"  # the balancer: nobody listens
        path = tmp_path / "per-host.json"
        path.write_text(json.dumps(out))
        fake_docker.set_states({n: "running" for n in fleet.containers()})
        monkeypatch.setenv("FLEETCTL_OUTPUTS", str(path))
        _, data = run_json(capsys, "status")
    finally:
        gw2.stop()
    rows = {(r["kind"], r["port"]): r for r in data["instances"]}
    assert rows[("paddlex", fleet.p1.port)]["gateway"] == "healthy, 2 in flight"  # local's view
    assert rows[("paddlex", fleet.p3.port)]["gateway"] == "ejected"  # gpu2's own gateway's view
    assert rows[("vllm", fleet.v2.port)]["gateway"] == "0/1 paddlex healthy"
    assert rows[("gateway", fleet.gw.port)]["ok"] and rows[("gateway", gw2.port)]["ok"]
    assert [r["host"] for r in data["instances"] if r["kind"] == "gateway"] == ["local", "gpu2"]
