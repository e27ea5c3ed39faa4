"""Hot reload: file edits swap upstreams/settings under load without failing requests; an
invalid file is refused with a log line and the old config stays."""

from __future__ import annotations

import json
import logging
import threading
import time

from gateway.config.reload import ConfigWatcher
from gateway.config.settings import Settings
from tests.doubles.paddlex_double import DoubleFleet
from tests.gateway.conftest import gateway_config
from tests.gateway.samples import b64, png_bytes
from tests.waiting import wait_for

PNG = b64(png_bytes())


def write(path, config):
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(config))
    tmp.replace(path)


def test_reload_during_load_fails_nothing(start_gateway, tmp_path, caplog):
    with DoubleFleet(4, service_time_s=0.02) as fleet:
        config = gateway_config(fleet.urls[:2])
        gw = start_gateway(config, file=True)
        path = tmp_path / "gateway.json"
        stop = threading.Event()
        results: list[tuple[int, str]] = []

        def load():
            while not stop.is_set():
                r = gw.client.post("/ocr", json={"base64": PNG})
                results.append((r.status_code, r.json().get("upstream", r.text)))

        workers = [threading.Thread(target=load) for _ in range(4)]
        for w in workers:
            w.start()
        try:
            time.sleep(0.2)
            write(path, gateway_config(fleet.urls, load_balance={"mode": "least_inflight"}))
            assert wait_for(lambda: len(gw.runtime.pool.upstreams) == 4)
            time.sleep(0.3)
            write(
                path,
                gateway_config(
                    fleet.urls[2:],
                    load_balance={"mode": "queue"},
                    http={"pool_max_connections": 50},
                ),
            )
            assert wait_for(lambda: gw.runtime.pool.mode == "queue")
            time.sleep(0.3)
            with caplog.at_level(logging.ERROR, logger="gateway.reload"):
                # a plain (non-atomic) write: a half-written file is refused too, then the
                # complete one
                path.write_text('{"load_balance": {"mode": "foo"}}')
                assert wait_for(lambda: "unknown mode 'foo'" in caplog.text)
            assert "config reload refused" in caplog.text
            assert "load_balance.mode: unknown mode 'foo'" in caplog.text
            time.sleep(0.2)
        finally:
            stop.set()
            for w in workers:
                w.join()
        assert results and all(code == 200 for code, _ in results), [
            r for r in results if r[0] != 200
        ][:3]
        doc = gw.client.get("/upstreams").json()
        assert doc["mode"] == "queue"  # the invalid file did not replace the config
        assert [u["url"] for u in doc["upstreams"]] == fleet.urls[2:]
        served = {upstream for _, upstream in results}
        assert served == set(fleet.urls)  # the added upstreams took traffic
        reloads = gw.client.get("/metrics").text
        assert 'gateway_config_reloads_total{result="success"} 2.0' in reloads
        assert 'gateway_config_reloads_total{result="failure"}' in reloads


def test_watcher_unit(tmp_path, caplog):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"upstreams": ["http://a:1"]}))
    applied: list[Settings] = []
    watcher = ConfigWatcher(path, applied.append, interval=lambda: 0.01)
    assert watcher.check() is False  # unchanged
    path.write_text(json.dumps({"upstreams": ["http://a:1", "http://b:1"]}) + "\n")
    assert watcher.check() is True and applied[-1].upstream_urls == ["http://a:1", "http://b:1"]
    with caplog.at_level(logging.ERROR, logger="gateway.reload"):
        path.write_text('{"http": {"timeout_s": "x"}}')
        assert watcher.check() is False
        assert "http.timeout_s" in caplog.text and "keeping the previous config" in caplog.text
        caplog.clear()
        assert watcher.check() is False and caplog.text == ""  # reported once
    assert len(applied) == 1
    path.write_text(json.dumps({"upstreams": ["http://c:1"]}))
    assert watcher.reload_now("SIGHUP") is True
    assert applied[-1].upstream_urls == ["http://c:1"]
