"""A gateway replaced on its port under load, real processes on loopback: gateway B starts
beside gateway A with the same handover path, takes over A's listening sockets, then A gets
SIGTERM. No client sees a refused or reset connection, every request is answered 200, a
request in flight on A at its SIGTERM completes (with ``Connection: close``), and B alone
serves afterwards. With one worker and with two (the supervisor), and from two workers to one.
"""

from __future__ import annotations

import base64
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from bench.rollout.load import ClientLoad
from gateway.server.listeners import Offer, bind_sockets, inherit, obtain
from tests.doubles.paddlex_double import DoubleFleet
from tests.gateway.conftest import gateway_config
from tests.gateway.multiworker_helpers import ROOT, GatewayProcess
from tests.gateway.samples import pdf_bytes
from tests.waiting import wait_for

SLOW_PAGES = 3  # a document of this many pages takes SLOW_S at the doubles
SLOW_S = 5.0  # long enough for the SIGTERM to be handled before it ends, even on a busy machine


def _config(tmp_path: Path, urls: list[str]) -> Path:
    path = tmp_path / "gateway.json"
    config = gateway_config(urls, load_balance={"mode": "queue", "queue_timeout_s": 60})
    path.write_text(json.dumps(config))
    return path


def _close(*sockets: socket.socket) -> None:
    for sock in sockets:
        sock.close()


def _slow_documents(fleet: DoubleFleet, quick_s: float) -> threading.Event:
    """Make a document of ``SLOW_PAGES`` pages take ``SLOW_S`` at every double of ``fleet``
    (others ``quick_s``); the event is set once a slow one has reached a double."""
    slow_started = threading.Event()

    def service_time(pages: int) -> float:
        if pages == SLOW_PAGES:
            slow_started.set()
            return SLOW_S
        return quick_s

    for double in fleet:
        double.knobs.service_time_fn = service_time
    return slow_started


def _offering(gw: GatewayProcess) -> bool:
    return "offering" in gw.log()


@pytest.mark.parametrize(("workers_a", "workers_b"), [(1, 1), (2, 2), (2, 1)])
def test_replaced_gateway_refuses_nothing(tmp_path: Path, workers_a: int, workers_b: int) -> None:
    handover = tmp_path / "run" / "handover.sock"
    with DoubleFleet(4, service_time_s=0.05) as fleet:
        slow_started = _slow_documents(fleet, quick_s=0.05)
        config = _config(tmp_path, fleet.urls)
        a = GatewayProcess(config, tmp_path / "a.log", workers=workers_a, handover=handover)
        b: GatewayProcess | None = None
        try:
            assert wait_for(lambda: _offering(a)), a.log()[-2000:]
            early = httpx.Client(base_url=a.url, timeout=60, trust_env=False)
            assert early.get("/health").status_code == 200  # a kept-alive connection to A
            with ClientLoad(a.url, clients=8) as load:
                time.sleep(1.0)
                b = GatewayProcess(
                    config, tmp_path / "b.log", workers=workers_b, port=a.port, handover=handover
                )
                assert "took over" in b.log(), b.log()[-2000:]
                assert wait_for(lambda: _offering(b)), b.log()[-2000:]
                time.sleep(1.0)
                slow: dict[str, httpx.Response] = {}
                document = {"file": ("doc.pdf", pdf_bytes(SLOW_PAGES), "application/pdf")}
                in_flight = threading.Thread(
                    target=lambda: slow.setdefault("reply", early.post("/ocr-file", files=document))
                )
                in_flight.start()
                assert slow_started.wait(30)  # at a double now, through A
                stopped = time.monotonic()
                assert a.terminate(timeout=30) in (0, -15)  # uvicorn ends by the signal it got
                in_flight.join(30)
                time.sleep(2.0)
            after = load.answers_after(stopped)
            early.close()
            b_alone = b.fresh_get("/health").status_code
        finally:
            a.stop()
            if b is not None:
                b.stop()
    assert load.errors == [], f"{len(load.errors)} errors, e.g. {load.errors[:3]}"
    assert set(load.statuses) == {200}, load.statuses
    assert slow["reply"].status_code == 200
    assert slow["reply"].headers.get("connection") == "close"
    assert after > 20, f"only {after} answers after A's SIGTERM"
    assert b_alone == 200
    print(
        f"workers {workers_a}->{workers_b}: {load.total} answers, {len(load.errors)} errors, "
        f"{load.closing} with Connection: close, longest gap {load.longest_gap_s * 1000:.0f} ms"
    )


def test_a_socket_on_another_port_is_not_taken(tmp_path: Path) -> None:
    """The answer at the handover path serves another port: nothing is taken, and the gateway
    binds its own socket."""
    path = str(tmp_path / "handover.sock")
    theirs = bind_sockets("127.0.0.1", 0, 1)
    offer = Offer(path, theirs)
    offer.start()
    try:
        port = theirs[0].getsockname()[1]
        taken = inherit(path, "127.0.0.1", port)
        assert [s.getsockname()[1] for s in taken] == [port]
        assert taken[0].getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 1
        _close(*taken)
        other = port + 1 if port < 65535 else port - 1
        assert inherit(path, "127.0.0.1", other) == []
    finally:
        offer.close()
        _close(*theirs)
    assert not Path(path).exists()  # removed: it was still ours
    assert inherit(path, "127.0.0.1", 9) == []  # no one there


def test_the_newest_gateway_keeps_the_path(tmp_path: Path) -> None:
    """A gateway that stops after its successor took the path over leaves the path alone."""
    path = str(tmp_path / "handover.sock")
    sockets = bind_sockets("127.0.0.1", 0, 2)
    first, second = Offer(path, sockets), Offer(path, sockets)
    first.start()
    second.start()
    first.close()
    try:
        port = sockets[0].getsockname()[1]
        taken = inherit(path, "127.0.0.1", port)
        assert len(taken) == 2
        _close(*taken)
    finally:
        second.close()
        _close(*sockets)


def test_connections_waiting_in_the_accept_queue_survive_the_handover(tmp_path: Path) -> None:
    """Connections queued in the handed-over socket, not yet accepted by anyone, are accepted
    by the new holder after the old one closed its copy."""
    path = str(tmp_path / "handover.sock")
    old = bind_sockets("127.0.0.1", 0, 1)
    port = old[0].getsockname()[1]
    offer = Offer(path, old)
    offer.start()
    new, inherited = obtain("127.0.0.1", port, 1, path)
    assert inherited
    clients = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(20)]
    for client in clients:
        client.sendall(b"ping")
    offer.close()
    old[0].close()  # the old gateway is gone; nobody has accepted anything yet
    try:
        new[0].settimeout(5)
        for _ in clients:
            conn, _ = new[0].accept()
            with conn:
                assert conn.recv(4) == b"ping"
    finally:
        _close(*clients, *new)


def test_separate_reuseport_sockets_lose_their_queue() -> None:
    """Why the socket itself is handed over: with two SO_REUSEPORT sockets on the port, the
    connections waiting in the one that closes are reset."""
    old = bind_sockets("127.0.0.1", 0, 1)
    port = old[0].getsockname()[1]
    new = bind_sockets("127.0.0.1", port, 1)
    clients = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(40)]
    old[0].close()
    resets = 0
    try:
        for client in clients:
            client.settimeout(0.2)
            try:
                client.sendall(b"ping")
                if client.recv(1) == b"":
                    resets += 1
            except ConnectionResetError:
                resets += 1
            except TimeoutError:
                pass  # queued in the socket that stays: waits to be accepted
    finally:
        _close(*clients, *new)
    assert resets > 0


@pytest.mark.parametrize("workers", [1, 2])
def test_an_idle_keep_alive_connection_is_answered_during_the_drain(
    tmp_path: Path, workers: int
) -> None:
    """A client that sends its next request on a kept-alive connection just after the
    gateway's SIGTERM (without first checking whether the server closed it) gets an answer,
    marked ``Connection: close``, instead of a closed connection."""
    with DoubleFleet(1) as fleet:
        config = _config(tmp_path, fleet.urls)
        with GatewayProcess(config, tmp_path / "gw.log", workers=workers) as gw:
            conn = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
            request = b"GET /health HTTP/1.1\r\nhost: gw\r\n\r\n"
            with conn:
                conn.sendall(request)
                first = _read_response(conn)
                assert first.startswith(b"HTTP/1.1 200") and b"connection: close" not in first
                gw.proc.send_signal(signal.SIGTERM)
                time.sleep(0.3)  # the workers have got it
                conn.sendall(request)
                second = _read_response(conn)
            gw.proc.wait(30)
    assert second.startswith(b"HTTP/1.1 200"), second
    assert b"connection: close" in second.lower()


def _read_response(conn: socket.socket) -> bytes:
    """One whole response (head and a Content-Length body); b"" when the server closed."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
         if line.lower().startswith(b"content-length:")),
        0,
    )  # fmt: skip
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def test_a_gateway_without_handover_is_waited_for(tmp_path: Path) -> None:
    """The first replacement of a gateway that offers nothing (an older release, one process
    holding the port without SO_REUSEPORT): the new one waits for the port instead of exiting,
    and serves as soon as the old one is gone."""
    with DoubleFleet(1) as fleet:
        config = _config(tmp_path, fleet.urls)
        with socket.socket() as holder:  # the old release's uvicorn: no SO_REUSEPORT
            holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            holder.bind(("127.0.0.1", 0))
            holder.listen()
            port = holder.getsockname()[1]
            started: dict[str, GatewayProcess] = {}
            thread = threading.Thread(
                target=lambda: started.setdefault(
                    "gw",
                    GatewayProcess(
                        config, tmp_path / "gw.log", workers=1, port=port,
                        handover=tmp_path / "handover.sock",
                    ),
                )
            )  # fmt: skip
            thread.start()
            log = tmp_path / "gw.log"
            assert wait_for(lambda: log.exists() and "is in use" in log.read_text())
        thread.join(30)
        with started["gw"] as gw:
            assert gw.port == port
            assert gw.client.get("/health").status_code == 200


def test_a_handover_whose_answer_broke_off_is_asked_again(tmp_path: Path) -> None:
    """The predecessor's first answer breaks off (as on a machine too busy to answer in time):
    the new gateway asks again and takes the sockets over, instead of binding sockets of its
    own beside them (whose neighbour's queue would be lost when it stops)."""
    path = str(tmp_path / "handover.sock")
    old = bind_sockets("127.0.0.1", 0, 1)
    port = old[0].getsockname()[1]
    broken = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    broken.bind(path)
    broken.listen()
    offer = Offer(path, old)

    def break_one_answer_then_offer() -> None:
        conn, _ = broken.accept()
        conn.close()  # the answer ends before any socket came
        broken.close()
        offer.start()  # the real answer, at the same path

    thread = threading.Thread(target=break_one_answer_then_offer)
    thread.start()
    try:
        new, inherited = obtain("127.0.0.1", port, 1, path)
        thread.join(10)
        assert inherited, "bound sockets of its own after one broken answer"
        assert new[0].getsockname()[1] == port
        _close(*new)
    finally:
        offer.close()
        _close(*old)


def _serving(path: Path) -> dict[str, object] | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None


@pytest.mark.parametrize("workers", [1, 2])
def test_the_serving_file_says_which_process_serves(tmp_path: Path, workers: int) -> None:
    """What the deployment's readiness check reads (the port cannot tell two gateways apart
    during a handover): written by each gateway once it serves, saying whether its sockets
    were taken over, and removed as soon as it stops serving."""
    handover = tmp_path / "handover.sock"
    with DoubleFleet(1) as fleet:
        config = _config(tmp_path, fleet.urls)
        first, second = tmp_path / "a" / "serving", tmp_path / "b" / "serving"
        with GatewayProcess(
            config, tmp_path / "a.log", workers=workers, handover=handover, serving_file=first
        ) as a:
            assert wait_for(lambda: _serving(first) is not None)
            assert _serving(first) == {"state": "serving", "pid": a.proc.pid, "inherited": False}
            with GatewayProcess(
                config, tmp_path / "b.log", workers=workers, port=a.port, handover=handover,
                serving_file=second,
            ) as b:  # fmt: skip
                assert wait_for(lambda: _serving(second) is not None)
                assert _serving(second) == {
                    "state": "serving", "pid": b.proc.pid, "inherited": True,
                }  # fmt: skip
                a.terminate()
                assert not first.exists()
                assert b.client.get("/health").status_code == 200
            assert not second.exists()


class KeeperProcess:
    """``python -m gateway.keeper`` on a loopback port, with a handover path."""

    def __init__(self, upstream: str, port: int, handover: Path, log: Path, serving: Path):
        self.serving = serving
        self._log = open(log, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.keeper", "--upstreams", upstream, "--host",
             "127.0.0.1", "--port", str(port), "--handover", str(handover),
             "--serving-file", str(serving)],
            cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        assert wait_for(lambda: serving.exists() or self.proc.poll() is not None, timeout=30)
        assert self.proc.poll() is None, log.read_text()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)
        self._log.close()


def test_a_replaced_keeper_refuses_no_slice(tmp_path: Path) -> None:
    """Keeper B starts on keeper A's port with the same handover path and takes its listening
    socket; A gets SIGTERM with a slow slice in flight. Slice calls sent all along are all
    answered 200, the slow one included: none meets a refused or reset connection."""
    handover = tmp_path / "keeper-handover.sock"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    with DoubleFleet(1, service_time_s=0.02) as fleet:
        slow_started = _slow_documents(fleet, quick_s=0.02)
        upstream = fleet.urls[0]
        a = KeeperProcess(upstream, port, handover, tmp_path / "a.log", tmp_path / "a.serving")
        b: KeeperProcess | None = None
        errors: list[str] = []
        statuses: list[int] = []
        stop = threading.Event()

        def post(key: str, pages: int) -> None:
            headers = {"Idempotency-Key": key, "X-Keeper-Upstream": upstream}
            body = {"file": base64.b64encode(pdf_bytes(pages)).decode(), "fileType": 0}
            try:
                reply = httpx.post(
                    url + "/layout-parsing", json=body, headers=headers, timeout=60,
                    trust_env=False,
                )  # fmt: skip
                statuses.append(reply.status_code)
            except httpx.TransportError as exc:
                errors.append(f"{key}: {exc!r}")

        def client(index: int) -> None:
            sent = 0
            while not stop.is_set():
                post(f"load-{index}-{sent}", 1)
                sent += 1

        clients = [threading.Thread(target=client, args=(i,)) for i in range(4)]
        try:
            for thread in clients:
                thread.start()
            slow = threading.Thread(target=post, args=("slow", SLOW_PAGES))
            slow.start()
            assert slow_started.wait(30)
            b = KeeperProcess(upstream, port, handover, tmp_path / "b.log", tmp_path / "b.serving")
            assert json.loads(b.serving.read_text())["inherited"] is True
            a.stop()  # returns once A has finished the slow slice and exited
            time.sleep(1.0)
            stop.set()
            slow.join(60)
            for thread in clients:
                thread.join(60)
        finally:
            stop.set()
            a.stop()
            if b is not None:
                b.stop()
    assert errors == [], errors[:3]
    assert statuses and set(statuses) == {200}, sorted(set(statuses))
    assert len(statuses) > 20
