"""Closed-loop HTTP load with wrk: one POST body, ``connections`` requests in flight.

wrk is a small C load generator (one epoll thread here), so it drives nginx at tens of
thousands of requests per second while our Python clients would top out far below. Its CPU is
its own process's: a benchmark that meters the proxies' process trees does not count it.

Usage::

    script = write_script(workdir / "post.lua", body_path, "/ocr")
    res = run_wrk("http://127.0.0.1:9101", script, connections=32, seconds=2)
    res.requests, res.rps, res.p99_ms, res.errors       # errors: {"status": non-2xx, ...}

    run = WrkRun(url, script, 32, 5).start()            # the same, measuring meanwhile
    ...
    res = run.result()

The Lua script reads the body once per thread and, when the run ends, prints one line
``WRK_JSON {...}`` with the counts and the latency percentiles (microseconds), which
``parse_output`` reads.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

MARKER = "WRK_JSON "

_SCRIPT = """\
-- written by bench/wrk.py: POST one body from a file, report JSON when done
local fh = assert(io.open(%(body)s, "rb"))
wrk.method = "POST"
wrk.path = %(path)s
wrk.body = fh:read("*a")
fh:close()
wrk.headers["Content-Type"] = %(content_type)s

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '%(marker)s{"requests":%%.0f,"duration_us":%%.0f,"bytes":%%.0f,' ..
    '"connect":%%.0f,"read":%%.0f,"write":%%.0f,"status":%%.0f,"timeout":%%.0f,' ..
    '"p50_us":%%.1f,"p90_us":%%.1f,"p99_us":%%.1f,"max_us":%%.1f,"mean_us":%%.1f}\\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.max, latency.mean))
end
"""


def _lua_string(s: str) -> str:
    return json.dumps(s)  # a JSON string literal is a valid Lua string literal for ASCII text


def write_script(
    script_path: Path, body_path: Path, path: str, content_type: str = "application/json"
) -> Path:
    """Write the Lua script that POSTs ``body_path``'s bytes to ``path``; return its path."""
    script_path.write_text(
        _SCRIPT
        % {
            "body": _lua_string(str(body_path)),
            "path": _lua_string(path),
            "content_type": _lua_string(content_type),
            "marker": MARKER,
        }
    )
    return script_path


@dataclass(frozen=True)
class WrkResult:
    requests: int  # responses completed within the run
    duration_s: float
    rps: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    mean_ms: float
    errors: dict[str, int]  # connect, read, write, status (non-2xx/3xx), timeout; zeros left out

    def to_dict(self) -> dict:
        return asdict(self)


def parse_output(stdout: str) -> WrkResult:
    """The ``WRK_JSON`` line of a wrk run's output; ValueError if there is none."""
    for line in stdout.splitlines():
        if line.startswith(MARKER):
            d = json.loads(line[len(MARKER) :])
            dur = d["duration_us"] / 1e6
            errors = {
                k: int(d[k]) for k in ("connect", "read", "write", "status", "timeout") if d[k]
            }
            return WrkResult(
                requests=int(d["requests"]),
                duration_s=round(dur, 3),
                rps=round(d["requests"] / dur, 1) if dur > 0 else 0.0,
                p50_ms=round(d["p50_us"] / 1000, 3),
                p90_ms=round(d["p90_us"] / 1000, 3),
                p99_ms=round(d["p99_us"] / 1000, 3),
                max_ms=round(d["max_us"] / 1000, 3),
                mean_ms=round(d["mean_us"] / 1000, 3),
                errors=errors,
            )
    raise ValueError(f"no {MARKER.strip()} line in wrk's output: {stdout[-500:]!r}")


class WrkRun:
    """A wrk run in the background: ``start`` it, do something meanwhile, then ``result()``."""

    def __init__(self, url: str, script: Path, connections: int, seconds: int) -> None:
        """One thread, ``connections`` connections, ``seconds`` whole seconds (at least 1)."""
        exe = shutil.which("wrk")
        if exe is None:
            raise RuntimeError("wrk is not installed (apt-get install wrk)")
        if seconds < 1:
            raise ValueError("wrk runs for whole seconds, at least 1")
        self.seconds = seconds
        self.cmd = [exe, "-t1", f"-c{connections}", f"-d{int(seconds)}s", "--timeout=60s"]
        self.cmd += ["-s", str(script), url]
        self.proc: subprocess.Popen | None = None

    def start(self) -> WrkRun:
        self.proc = subprocess.Popen(
            self.cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        return self

    def result(self, grace_s: float = 90.0) -> WrkResult:
        """Wait for wrk to end; its numbers (RuntimeError if it failed)."""
        if self.proc is None:
            raise RuntimeError("wrk was not started")
        try:
            out, err = self.proc.communicate(timeout=self.seconds + grace_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            raise RuntimeError(f"wrk did not end within {self.seconds + grace_s} s") from None
        if self.proc.returncode != 0:
            raise RuntimeError(f"wrk exited {self.proc.returncode}: {(err or out)[-500:]}")
        return parse_output(out)


def run_wrk(url: str, script: Path, connections: int, seconds: int) -> WrkResult:
    """Run wrk for ``seconds`` and return its numbers."""
    return WrkRun(url, script, connections, seconds).start().result()
