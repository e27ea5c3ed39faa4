"""``python -m gateway``: starts from a config path or GATEWAY_CONFIG, refuses a bad config."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from gateway.observability.logs import ACCESS_LOGGER
from tests.gateway.test_settings import SEED_CONFIG

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("workers", [[], ["--workers", "2"]], ids=["one process", "2 workers"])
def test_bad_config_exits_naming_the_key(tmp_path, workers):
    """With workers, the config is refused before anything is forked."""
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"load_balance": {"mode": "weighted"}}))
    proc = subprocess.run(
        [sys.executable, "-m", "gateway", "--config", str(path), *workers],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=30,
    )
    assert proc.returncode == 2
    assert "load_balance.mode: unknown mode 'weighted'" in proc.stderr


def test_runs_with_seed_config_from_env(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(
        SEED_CONFIG.replace(
            '"max_attempts": 12', '"max_attempts": 12}, "reload": {"enabled": false'
        ),
        encoding="utf-8",
    )
    env = {**os.environ, "GATEWAY_CONFIG": str(path)}
    # port 0: the process binds a free port itself (no bind/close/bind-again race with other
    # processes) and uvicorn logs the real one in its "Uvicorn running on" line
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gateway",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--log-level",
            "info",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output: list[str] = []
    running = threading.Event()
    ports: list[int] = []

    def drain() -> None:  # read every line, so the process never blocks on a full pipe
        for line in proc.stdout:
            output.append(line)
            match = re.search(r"Uvicorn running on http://127\.0\.0\.1:(\d+)", line)
            if match and not ports:
                ports.append(int(match.group(1)))
                running.set()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 60
        while not running.wait(0.1):
            assert proc.poll() is None, "".join(output)
            assert time.monotonic() < deadline, "".join(output)
        port = ports[0]
        r = httpx.get(f"http://127.0.0.1:{port}/upstreams", trust_env=False, timeout=30)
        doc = r.json()
        assert doc["mode"] == "round_robin"
        assert doc["upstreams"][0]["url"] == "http://127.0.0.1:9120"
        health = httpx.get(f"http://127.0.0.1:{port}/health", trust_env=False, timeout=30)
        assert health.status_code == 200
        # SIGHUP reloads the file (polling is off here, so only the signal can do it)
        path.write_text(
            json.dumps({"upstreams": ["http://127.0.0.1:9"], "reload": {"enabled": False}})
        )
        proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while True:
            doc = httpx.get(
                f"http://127.0.0.1:{port}/upstreams", trust_env=False, timeout=30
            ).json()
            if [u["url"] for u in doc["upstreams"]] == ["http://127.0.0.1:9"]:
                break
            assert time.monotonic() < deadline, doc
            time.sleep(0.05)
        assert doc["mode"] == "queue"
    finally:
        proc.terminate()
        proc.wait(30)
        reader.join(10)


@pytest.fixture
def logging_restored():
    """main() configures this process's logging; put it back for the tests that follow."""
    root, access = logging.getLogger(), logging.getLogger(ACCESS_LOGGER)
    level, handlers, access_handlers = root.level, root.handlers[:], access.handlers[:]
    propagate, disabled = access.propagate, access.disabled
    yield
    root.handlers[:], access.handlers[:] = handlers, access_handlers
    access.propagate, access.disabled = propagate, disabled
    root.setLevel(level)


def test_quiets_the_httpx_loggers(tmp_path, monkeypatch, logging_restored):
    import gateway.__main__ as entry

    path = tmp_path / "gateway.json"
    path.write_text(json.dumps({"upstreams": ["http://127.0.0.1:9"]}))
    ran: list[object] = []
    monkeypatch.setattr(entry, "serve_one", lambda app, *args: ran.append(app) or 0)
    for name in ("httpx", "httpcore"):
        monkeypatch.setattr(logging.getLogger(name), "level", logging.NOTSET)
    assert entry.main(["--config", str(path), "--workers", "1"]) == 0 and ran
    assert logging.getLogger("httpx").getEffectiveLevel() == logging.WARNING
    assert logging.getLogger("httpcore").getEffectiveLevel() == logging.WARNING
