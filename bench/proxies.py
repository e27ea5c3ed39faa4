"""The two proxies of ``bench.proxy_cpu``, each a real process tree over the same upstreams,
and the canned fleet of ``bench.cpu_ab``.

- **nginx**: a reverse proxy over every upstream (round robin, upstream keep-alive, request
  bodies buffered in memory up to 16 MiB, the access log on as by default), with its config,
  logs and temporary folders in a work folder. ``daemon off`` keeps the master our child.
- **the gateway**: ``python -m gateway --config PATH --host 127.0.0.1 --port P [extra args]``,
  e.g. ``--workers 2``, from a snapshot of ``gateway/`` (``bench.procs.snapshot_gateway``).
- **the canned fleet**: one nginx worker listening on ``n`` upstream ports and answering each
  path with a fixed JSON answer (``canned_config``), a fleet that costs next to nothing.

Usage::

    ng = start_nginx(upstream_ports, workdir / "nginx", workers="1")
    fleet = start_canned_fleet(48, workdir / "fleet", {"/layout-parsing": {...}})  # fleet.ports
    gw = start_gateway(config_dict, workdir, src, extra_args=["--workers", "2"])
    ...                         # load on ng.port and gw.port; CPU of ng.pid's and gw.pid's trees
    ng.stop(); gw.stop()

``ensure_tools()`` installs nginx and wrk with apt-get where they are missing and this process
may (root, apt-get present), without letting the package start a system nginx.
``snapshot_rev(workdir, "HEAD")`` is ``gateway/`` of a git revision, to measure a committed
gateway while the working tree changes; ``gateway_revision`` says which one a run measured.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import json
import os
import shutil
import subprocess
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.procs import free_port, launch_gateway, log_tail, snapshot_gateway, spawn, stop_group

REPO = Path(__file__).resolve().parent.parent

APT_PACKAGES = {"nginx": "nginx-light", "wrk": "wrk"}
SBIN = "/usr/sbin:/usr/local/sbin"
FOREGROUND = ("-g", "daemon off; master_process on;")  # the master stays our child


def nginx_binary() -> str | None:
    """nginx on PATH, else in the sbin folders a user's PATH may leave out."""
    return shutil.which("nginx", path=os.pathsep.join((os.environ.get("PATH", ""), SBIN)))


def ensure_tools(tools: tuple[str, ...] = ("nginx", "wrk")) -> dict[str, str]:
    """Install the missing ``tools`` (apt-get, as root); return {tool: why it is still missing}."""
    found = {"nginx": nginx_binary, "wrk": lambda: shutil.which("wrk")}
    missing = [t for t in tools if found[t]() is None]
    if missing and os.geteuid() == 0 and shutil.which("apt-get"):
        no_start = Path("/usr/sbin/policy-rc.d")  # keep the package from starting nginx on :80
        made = not no_start.exists()
        if made:
            no_start.write_text("#!/bin/sh\nexit 101\n")
            no_start.chmod(0o755)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        try:
            pkgs = [APT_PACKAGES[t] for t in missing]
            cmd = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *pkgs]
            if subprocess.run(cmd, env=env, capture_output=True, timeout=600).returncode != 0:
                subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True)
                subprocess.run(cmd, env=env, capture_output=True, timeout=600)
        except (OSError, subprocess.TimeoutExpired):
            pass
        finally:
            if made:
                no_start.unlink(missing_ok=True)
    why = "not installed, and apt-get could not install it (not root, or no apt-get)"
    return {t: f"{t} {why}" for t in tools if found[t]() is None}


def call_json(
    port: int, path: str, body: bytes | None = None, timeout_s: float = 60.0
) -> tuple[int, dict]:
    """POST ``body`` (GET without one) to 127.0.0.1:port``path``: (status, decoded JSON answer
    or {}); OSError if nothing answers."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        headers = {} if body is None else {"Content-Type": "application/json"}
        conn.request("GET" if body is None else "POST", path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
    finally:
        conn.close()
    try:
        return resp.status, json.loads(data)
    except ValueError:
        return resp.status, {}


@dataclass
class ProxyProc:
    """A started proxy: its process (the root of the tree to meter), port and log."""

    name: str
    proc: subprocess.Popen
    port: int
    log_path: Path
    ports: tuple[int, ...] = ()  # every port it listens on, when more than ``port``

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_tail(self, n: int = 20) -> str:
        return log_tail(self.log_path, n)

    def wait_ready(self, path: str, timeout_s: float) -> None:
        """Until ``path`` answers 200 (or, for path "", any HTTP status)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited {self.proc.returncode}:\n{self.log_tail()}")
            with contextlib.suppress(OSError, http.client.HTTPException):
                status, _ = call_json(self.port, path or "/", timeout_s=10)
                if status == 200 or not path:
                    return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{self.name} not ready after {timeout_s} s:\n{self.log_tail()}")

    def stop(self) -> None:
        stop_group(self.proc, 5.0)


# ------------------------------------------------------------------------------ nginx


def _nginx_head(folder: Path, workers: str) -> str:
    """The top of every nginx.conf written here: its process, its files, its events."""
    temp = "\n".join(
        f"  {kind}_temp_path {folder / kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return f"""\
# written by bench/proxies.py
worker_processes {workers};
pid {folder / "nginx.pid"};
error_log {folder / "error.log"} warn;
events {{ worker_connections 4096; }}
http {{
{temp}
  keepalive_requests 1000000;
"""


def nginx_config(upstream_ports: list[int], port: int, folder: Path, workers: str = "1") -> str:
    """An nginx.conf proxying 127.0.0.1:``port`` to every upstream, round robin."""
    servers = "\n".join(f"    server 127.0.0.1:{p};" for p in upstream_ports)
    return (
        _nginx_head(folder, workers)
        + f"""\
  access_log {folder / "access.log"};
  client_max_body_size 100m;
  client_body_buffer_size 16m;
  upstream paddlex {{
{servers}
    keepalive 128;
    keepalive_requests 1000000;
  }}
  server {{
    listen 127.0.0.1:{port} backlog=1024;
    location / {{
      proxy_pass http://paddlex;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_read_timeout 300s;
    }}
  }}
}}
"""
    )


def canned_config(ports: list[int], folder: Path, answers: dict[str, dict]) -> str:
    """An nginx.conf answering every ``ports`` at once: ``answers[path]`` as JSON, any method.

    The request body is read and dropped, so an upstream costs next to nothing per request;
    any other path is a 404.
    """
    listens = "\n".join(f"    listen 127.0.0.1:{p} backlog=1024;" for p in ports)
    locations = []
    for path, answer in answers.items():
        text = json.dumps(answer, separators=(",", ":"))
        if "'" in text or "\\" in text or "$" in text:
            raise ValueError(f"answer for {path} needs nginx escaping: {text[:80]}")
        locations.append(
            f"    location = {path} {{ default_type application/json; return 200 '{text}'; }}"
        )
    return (
        _nginx_head(folder, "1")
        + f"""\
  access_log off;
  client_max_body_size 100m;
  server {{
{listens}
{chr(10).join(locations)}
    location / {{ return 404; }}
  }}
}}
"""
    )


def nginx_version() -> str:
    exe = nginx_binary()
    if exe is None:
        return ""
    r = subprocess.run([exe, "-v"], capture_output=True, text=True)
    return (r.stderr or r.stdout).strip().removeprefix("nginx version: ").removeprefix("nginx/")


def run_nginx(folder: Path, config: str, port: int, name: str) -> ProxyProc:
    """Start nginx on ``config`` in ``folder``, in the foreground; wait until ``port`` answers."""
    exe = nginx_binary()
    if exe is None:
        raise RuntimeError("nginx is not installed (apt-get install nginx-light)")
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)  # the workers run as an unprivileged user when we are root
    conf = folder / "nginx.conf"
    conf.write_text(config)
    log_path = folder / "stderr.log"
    cmd = [exe, "-p", str(folder), "-e", str(folder / "error.log"), "-c", str(conf), *FOREGROUND]
    ng = ProxyProc(name, spawn(cmd, log_path), port, log_path)
    ng.wait_ready("", 15.0)
    return ng


def start_nginx(upstream_ports: list[int], folder: Path, workers: str = "1") -> ProxyProc:
    """Start nginx (``workers``: a count or ``auto``) in front of ``upstream_ports``."""
    port = free_port()
    conf = nginx_config(upstream_ports, port, folder, workers)
    return run_nginx(folder, conf, port, f"nginx ({workers} workers)")


def start_canned_fleet(n: int, folder: Path, answers: dict[str, dict]) -> ProxyProc:
    """``n`` instant upstreams in one nginx worker (``canned_config``); ``.ports`` lists them."""
    ports: list[int] = []
    while len(ports) < n:
        if (port := free_port()) not in ports:
            ports.append(port)
    ng = run_nginx(folder, canned_config(ports, folder, answers), ports[0], "canned fleet")
    ng.ports = tuple(ports)
    return ng


# ------------------------------------------------------------------------------ the gateway


def start_gateway(
    cfg: dict,
    workdir: Path,
    src: Path | None = None,
    extra_args: list[str] | None = None,
    timeout_s: float = 60.0,
) -> ProxyProc:
    """``python -m gateway`` with ``cfg`` (from ``src``, a snapshot of gateway/, if given)."""
    proc, port, log_path = launch_gateway(cfg, workdir, "", src, tuple(extra_args or ()))
    gw = ProxyProc("gateway", proc, port, log_path)
    gw.wait_ready("/health", timeout_s)
    return gw


# ------------------------------------------------------------------------------ what is measured


def snapshot_rev(workdir: Path, rev: str) -> Path:
    """``gateway/`` as of the git revision ``rev``, in ``workdir/src`` (as snapshot_gateway);
    the working tree's for ``rev`` ""."""
    if not rev:
        return snapshot_gateway(workdir)
    r = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev, "gateway"], capture_output=True, timeout=60
    )
    if r.returncode != 0:
        raise SystemExit(f"--gateway-rev {rev}: {r.stderr.decode(errors='replace').strip()}")
    src = workdir / "src"
    with tarfile.open(fileobj=io.BytesIO(r.stdout)) as tar:
        tar.extractall(src, filter="data")
    return src


def gateway_revision(rev: str) -> dict:
    """The commit measured, and whether gateway/ differed from it (the working tree)."""

    def git(*args: str) -> str:
        r = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else ""

    commit = git("rev-parse", "--short=12", f"{rev or 'HEAD'}^{{commit}}")
    dirty = not rev and bool(git("status", "--porcelain", "--", "gateway"))
    return {"commit": commit, "source": f"git {rev}" if rev else "working tree", "dirty": dirty}
