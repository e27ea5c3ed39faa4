from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleetctl.auth import ADMIN_TOKEN_ENV, TOKEN_ENV
from tests.doubles.servers import ServerThread
from tests.fleetctl.fakes import fake_gateway

PNG = b"\x89PNG\r\n\x1a\n"
JPEG = b"\xff\xd8\xff\xe0"
PDF = b"%PDF-1.4\n"


def one_card_topology(
    vllm: list[dict[str, Any]], gateway: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A `topology` stack output: one local sim host whose card 0 holds these vLLM entries."""
    host = {"name": "local", "address": "127.0.0.1", "accelerator": "sim"}
    topology: dict[str, Any] = {"hosts": [{**host, "cards": [{"card": 0, "vllm": vllm}]}]}
    if gateway is not None:
        topology["gateway"] = gateway
    return topology


def doc(magic: bytes, body: str = "") -> bytes:
    """A file that passes the magic-byte check (the fake gateway never decodes it).

    The random tail makes each file distinct; the newline keeps it from extending a ``BUSY<n>``
    count in ``body`` with random digits.
    """
    return magic + body.encode() + b"\n" + os.urandom(8)


@pytest.fixture(autouse=True)
def no_tokens_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The client and the CLI read tokens from the environment: start every test without."""
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    monkeypatch.delenv(ADMIN_TOKEN_ENV, raising=False)


@pytest.fixture
def gateway() -> Iterator[ServerThread]:
    with ServerThread(fake_gateway()) as s:
        yield s


class FakeDocker:
    """A `docker` executable on PATH that records argv + DOCKER_HOST and fakes answers."""

    def __init__(self, tmp: Path) -> None:
        self.bin = tmp / "fakebin"
        self.bin.mkdir(exist_ok=True)
        self.log = tmp / "docker-calls.jsonl"
        self.state = tmp / "docker-state.json"
        self.state.write_text("{}")
        script = self.bin / "docker"
        script.write_text(
            FAKE_DOCKER.format(python=sys.executable, log=str(self.log), state=str(self.state))
        )
        script.chmod(script.stat().st_mode | stat.S_IEXEC)

    def set_states(self, states: dict[str, str]) -> None:
        self.state.write_text(json.dumps(states))

    def calls(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def argvs(self) -> list[list[str]]:
        return [c["argv"] for c in self.calls()]


FAKE_DOCKER = """#!{python}
import json, os, sys
args = sys.argv[1:]
with open({log!r}, "a") as f:
    f.write(json.dumps({{"argv": args, "docker_host": os.environ.get("DOCKER_HOST")}}) + "\\n")
states = json.load(open({state!r}))
cmd = args[0] if args else ""
if cmd == "inspect":
    names, skip = [], False
    for a in args[1:]:
        if skip:
            skip = False
        elif a == "--type":
            skip = True
        else:
            names.append(a)
    out = [{{"Name": "/" + n, "State": {{"Status": states[n], "Running": states[n] == "running",
            "ExitCode": 0 if states[n] == "running" else 137}}}} for n in names if n in states]
    print(json.dumps(out))
    missing = [n for n in names if n not in states]
    for n in missing:
        print("Error: No such object: " + n, file=sys.stderr)
    sys.exit(1 if missing else 0)
if cmd in ("start", "restart"):
    states[args[1]] = "running"
    json.dump(states, open({state!r}, "w"))
    print(args[1])
elif cmd == "logs":
    print("INFO fake log line of " + args[-1])
elif cmd == "exec":
    if "nvidia-smi" in args:
        print("OCI runtime exec failed: exec: \\"nvidia-smi\\": executable file not found",
              file=sys.stderr)
        sys.exit(126)
    if "npu-smi" in args:
        print("| npu-smi 24.1.0   Version: 24.1.0 |")
    else:
        print("exec ok")
"""


@pytest.fixture
def fake_docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeDocker:
    fd = FakeDocker(tmp_path)
    monkeypatch.setenv("PATH", f"{fd.bin}{os.pathsep}{os.environ.get('PATH', '')}")
    return fd
