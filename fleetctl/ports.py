"""Pre-flight port check: is each planned port listening, free, or taken by something else?

A port that accepts connections is asked who it is over HTTP (vLLM answers ``/v1/models``,
PaddleX answers ``/health`` with ``errorCode``, the gateway answers ``/upstreams``, or refuses
it with a Bearer challenge when it has tokens: no token is sent). A port that refuses
connections is bind-tested on local addresses: a bound but not yet listening socket (vLLM binds
its port while it loads the model) is not free. The owning process comes from ``ss -ltnp`` or,
failing that, ``/proc/net/tcp*`` and ``/proc/*/fd``.

Usage::

    result = check_port(inst)
    print(result.state, result.detail)
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import socket
import subprocess
from dataclasses import dataclass

import httpx

from fleetctl.topology import Instance

LOCAL_NAMES = {"127.0.0.1", "localhost", "0.0.0.0", "::1"}

# state -> is it fine for a fleet that is up?
LISTENING = "listening"  # the expected service answers
FREE = "free"
BOUND = "bound, not listening"
TAKEN = "taken"  # something else answers
UNREACHABLE = "not listening"  # remote host, connection refused / timed out


@dataclass(frozen=True)
class PortResult:
    inst: Instance
    state: str
    detail: str = ""
    owner: str | None = None


def is_local(address: str) -> bool:
    if address in LOCAL_NAMES or address.startswith("127."):
        return True
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None)
    except OSError:
        return False
    return address in {i[4][0] for i in infos}


def can_connect(address: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True
    except OSError:
        return False


def bind_test(address: str, port: int) -> bool:
    """True when `port` can be bound on `address` (nothing holds it)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        try:
            s.bind((address if address != "localhost" else "127.0.0.1", port))
        except OSError as e:
            if e.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def identify(inst: Instance, timeout: float = 2.0) -> str | None:
    """Which fleet service answers on the instance's port (``vllm``/``paddlex``/``gateway``)."""
    base = f"http://{inst.address}:{inst.port}"
    try:
        with httpx.Client(timeout=timeout, trust_env=False) as http:
            r = http.get(f"{base}/v1/models")
            if r.status_code == 200 and isinstance(_json(r), dict) and "data" in _json(r):
                return "vllm"
            r = http.get(f"{base}/upstreams")
            if r.status_code == 200 and isinstance(_json(r), dict) and "upstreams" in _json(r):
                return "gateway"
            if _refused_by_gateway(r):
                return "gateway"
            r = http.get(f"{base}/health")
            if isinstance(_json(r), dict) and "errorCode" in _json(r):
                return "paddlex"
            if r.status_code == 200 and inst.kind == "vllm":
                return "vllm"  # vLLM /health has an empty body; /v1/models may lag
    except httpx.HTTPError:
        return None
    return None


def _refused_by_gateway(r: httpx.Response) -> bool:
    """A gateway with tokens answers ``/upstreams`` without one by 401 (Bearer challenge) and
    its error body, so the port is identified without sending any token."""
    body = _json(r)
    return (
        r.status_code == 401
        and r.headers.get("www-authenticate", "").lower().startswith("bearer")
        and isinstance(body, dict)
        and isinstance(body.get("error"), dict)
        and "request_id" in body
    )


def _json(r: httpx.Response) -> object:
    try:
        return r.json()
    except ValueError:
        return None


_SS_USERS = re.compile(r'\(\("([^"]+)",pid=(\d+)')


def owner(port: int) -> str | None:
    """``name[pid]`` of the process listening on `port` locally, if it can be seen."""
    if shutil.which("ss"):
        try:
            out = subprocess.run(
                ["ss", "-Hltnp", f"sport = :{port}"],
                capture_output=True,
                text=True,
                timeout=5,
                check=False,
            ).stdout
        except (OSError, subprocess.TimeoutExpired):
            out = ""
        m = _SS_USERS.search(out)
        if m:
            return f"{m.group(1)}[{m.group(2)}]"
    return _proc_owner(port)


def _proc_owner(port: int) -> str | None:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table, encoding="ascii") as f:
            next(f, None)
            for line in f:
                cols = line.split()
                if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(cols[9])
    if not inodes:
        return None
    targets = {f"socket:[{i}]" for i in inodes}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"{fd_dir}/{fd}") in targets:
                    with open(f"/proc/{pid}/comm", encoding="utf-8") as c:
                        return f"{c.read().strip()}[{pid}]"
            except OSError:
                continue
    return "unknown process"


def check_port(inst: Instance) -> PortResult:
    """Classify the planned port of one instance."""
    local = is_local(inst.address)
    if can_connect(inst.address, inst.port):
        who = identify(inst)
        proc = owner(inst.port) if local else None
        if who == inst.kind:
            return PortResult(inst, LISTENING, f"{who} answers", proc)
        what = f"{who} answers, expected {inst.kind}" if who else "not a fleet service"
        return PortResult(inst, TAKEN, what, proc)
    if not local:
        return PortResult(inst, UNREACHABLE, "remote; connection refused or timed out")
    try:
        free = bind_test(inst.address, inst.port)
    except OSError as e:
        return PortResult(inst, UNREACHABLE, f"bind test failed: {e}")
    if free:
        return PortResult(inst, FREE)
    return PortResult(inst, BOUND, "bound but not accepting (vLLM loading?)", owner(inst.port))
