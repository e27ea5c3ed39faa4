"""The host exporter of the fleet: each container's memory and state, for Prometheus.

PaddleX has no ``/metrics`` and the gateway cannot see a container's memory, so on every host
of the fleet this small server (the Python standard library alone: it runs in the Prometheus
image, on the project's base image) asks the host's Docker engine, over its unix socket, for the
containers of one stack (label ``paddleocr-fleet.stack``) and their memory, and answers
``GET /metrics`` with::

    paddleocr_fleet_container_memory_bytes{container,role,host,card,port}  (as `docker stats`:
        usage less the inactive page cache)
    paddleocr_fleet_container_running{container,role,host,card,port}      1 running, else 0
    paddleocr_fleet_exporter_docker_up                                     1 the engine answered

The alert PaddlexMemoryGrowing (monitoring/rules/fleet.yml) reads the first: the leak
PaddleOCR users report.

    python3 exporter.py --port 9104 --stack paddleocr-fleet/prod [--socket /var/run/docker.sock]
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import sys
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import quote

LABELS = ("role", "host", "card", "port")
TIMEOUT_S = 5.0


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over the Docker engine's unix socket."""

    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=TIMEOUT_S)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(TIMEOUT_S)
        self.sock.connect(self.path)


def docker_get(socket_path: str, path: str) -> Any:
    connection = UnixHTTPConnection(socket_path)
    try:
        connection.request("GET", path)
        answer = connection.getresponse()
        body = answer.read()
        if answer.status != 200:
            raise OSError(f"docker {path}: HTTP {answer.status}: {body[:200]!r}")
        return json.loads(body)
    finally:
        connection.close()


def memory_bytes(stats: dict[str, Any]) -> float | None:
    """What `docker stats` shows: usage less the inactive file cache (cgroup v2 and v1)."""
    memory = stats.get("memory_stats") or {}
    usage = memory.get("usage")
    if usage is None:
        return None
    detail = memory.get("stats") or {}
    cache = detail.get("inactive_file", detail.get("total_inactive_file", 0))
    return float(max(0, usage - cache))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(container: dict[str, Any]) -> str:
    labels = container.get("Labels") or {}
    name = (container.get("Names") or ["?"])[0].lstrip("/")
    pairs = [("container", name)]
    pairs += [(key, labels.get(f"paddleocr-fleet.{key}", "")) for key in LABELS]
    return ",".join(f'{k}="{_escape(v)}"' for k, v in pairs)


def exposition(socket_path: str, stack: str) -> str:
    """The text exposition of one scrape (the engine asked now, containers in parallel)."""
    lines = [
        "# HELP paddleocr_fleet_exporter_docker_up 1 if the Docker engine answered",
        "# TYPE paddleocr_fleet_exporter_docker_up gauge",
    ]
    filters = quote(json.dumps({"label": [f"paddleocr-fleet.stack={stack}"]}))
    try:
        containers = docker_get(socket_path, f"/containers/json?all=1&filters={filters}")
    except (OSError, ValueError) as exc:
        print(f"exporter: {exc}", file=sys.stderr, flush=True)
        return "\n".join([*lines, "paddleocr_fleet_exporter_docker_up 0", ""])
    lines.append("paddleocr_fleet_exporter_docker_up 1")

    def stats(container: dict[str, Any]) -> float | None:
        if container.get("State") != "running":
            return None
        try:
            found = docker_get(
                socket_path, f"/containers/{container['Id']}/stats?stream=false&one-shot=true"
            )
        except (OSError, ValueError):
            return None
        return memory_bytes(found)

    with ThreadPoolExecutor(max_workers=8) as pool:
        memories = list(pool.map(stats, containers))
    lines += [
        "# HELP paddleocr_fleet_container_memory_bytes Memory of a container of the fleet "
        "(usage less inactive page cache)",
        "# TYPE paddleocr_fleet_container_memory_bytes gauge",
    ]
    for container, memory in zip(containers, memories, strict=True):
        if memory is not None:
            lines.append(f"paddleocr_fleet_container_memory_bytes{{{_labels(container)}}} {memory}")
    lines += [
        "# HELP paddleocr_fleet_container_running 1 if the container runs",
        "# TYPE paddleocr_fleet_container_running gauge",
    ]
    for container in containers:
        running = 1 if container.get("State") == "running" else 0
        lines.append(f"paddleocr_fleet_container_running{{{_labels(container)}}} {running}")
    return "\n".join(lines) + "\n"


def serve(port: int, stack: str, socket_path: str, address: str = "") -> None:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404, "only /metrics")
                return
            body = exposition(socket_path, stack).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # one line per scrape is noise

    server = ThreadingHTTPServer((address, port), Handler)
    print(f"exporter: stack {stack} on :{port}, engine {socket_path}", file=sys.stderr, flush=True)
    server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--stack", required=True, help="the paddleocr-fleet.stack label value")
    parser.add_argument("--socket", default="/var/run/docker.sock")
    parser.add_argument("--address", default="", help="listen address (default: every one)")
    a = parser.parse_args(argv)
    serve(a.port, a.stack, a.socket, a.address)
    return 0


if __name__ == "__main__":
    sys.exit(main())
