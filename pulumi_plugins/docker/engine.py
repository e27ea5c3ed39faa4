"""One Docker endpoint, reached only through the `docker` CLI.

Engine API calls go over `docker system dial-stdio` (the CLI's own transport, so unix://,
tcp:// and ssh:// endpoints behave exactly as `docker exec` does with the same DOCKER_HOST);
builds and pulls run `docker build` / `docker pull`. Every command gets DOCKER_HOST set to this
endpoint and no DOCKER_CONTEXT.

    engine = Engine("unix:///var/run/docker.sock", env)
    info = engine.inspect_container("abc123")   # None if there is no such container
    engine.run(["pull", "busybox"])
"""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import threading
import urllib.parse
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

DEFAULT_API_TIMEOUT = 120.0
MAX_IDLE = 4
"""Kept-alive connections per endpoint (over ssh://, each new one is an ssh login)."""
IDEMPOTENT = {"GET", "HEAD", "PUT", "DELETE"}


class EngineError(Exception):
    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status

    @property
    def not_found(self) -> bool:
        return self.status == 404


@dataclass
class Response:
    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


class _DialStdio(http.client.HTTPConnection):
    """An HTTP connection whose socket is the stdio of `docker system dial-stdio`."""

    def __init__(self, engine: Engine, timeout: float) -> None:
        super().__init__("docker", timeout=timeout)
        self._engine = engine
        self.proc: subprocess.Popen[bytes] | None = None

    def connect(self) -> None:
        ours, theirs = socket.socketpair()
        self.proc = self._engine.spawn(
            ["system", "dial-stdio"], stdin=theirs, stdout=theirs, stderr=subprocess.PIPE
        )
        theirs.close()
        ours.settimeout(self.timeout)
        self.sock = ours

    def set_timeout(self, timeout: float) -> None:
        self.timeout = timeout
        if self.sock is not None:
            self.sock.settimeout(timeout)

    def shutdown(self) -> None:
        """Closes the connection; dial-stdio sees the end of its input and exits."""
        self.close()
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._engine.forget(self.proc)

    def stderr(self) -> str:
        """What dial-stdio said (after `shutdown`): why it could not connect, typically."""
        if self.proc is None or self.proc.stderr is None:
            return ""
        return self.proc.stderr.read().decode(errors="replace").strip()


class Engine:
    def __init__(self, endpoint: str, env: Mapping[str, str], daemon_check: bool = True) -> None:
        self.endpoint = endpoint
        self.env = dict(env)
        self.daemon_check = daemon_check
        self._version: str | None = None
        self._procs: set[subprocess.Popen[bytes]] = set()
        self._idle: list[_DialStdio] = []
        self._lock = threading.Lock()
        self.cancelled = threading.Event()

    # -- processes -------------------------------------------------------------------------
    def spawn(
        self, args: list[str], extra_env: Mapping[str, str] | None = None, **kwargs: Any
    ) -> subprocess.Popen[bytes]:
        if self.cancelled.is_set():
            raise EngineError("cancelled")
        env = {**self.env, **(extra_env or {})}
        proc = subprocess.Popen(["docker", *args], env=env, **kwargs)
        with self._lock:
            self._procs.add(proc)
        return proc

    def forget(self, proc: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._procs.discard(proc)

    def cancel(self) -> None:
        """Ends every docker command this engine runs (the engine's Cancel)."""
        self.cancelled.set()
        with self._lock:
            procs = list(self._procs)
            self._idle.clear()
        for proc in procs:
            if proc.poll() is None:
                proc.kill()

    def run(
        self,
        args: list[str],
        *,
        stdin: bytes | None = None,
        timeout: float | None = None,
        on_line: Callable[[str], None] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> str:
        """A docker CLI command; its output (stdout and stderr) line by line to `on_line`."""
        proc = self.spawn(
            args,
            env,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        timer = threading.Timer(timeout, proc.kill) if timeout else None
        if timer:
            timer.start()
        lines: deque[str] = deque(maxlen=400)
        try:
            if stdin is not None and proc.stdin is not None:
                proc.stdin.write(stdin)
                proc.stdin.close()
            assert proc.stdout is not None
            for raw in proc.stdout:
                line = raw.decode(errors="replace").rstrip("\n")
                lines.append(line)
                if on_line is not None:
                    on_line(line)
            code = proc.wait()
        finally:
            if timer:
                timer.cancel()
            self.forget(proc)
        output = "\n".join(lines)
        if code != 0:
            tail = "\n".join(list(lines)[-30:])
            raise EngineError(f"`docker {' '.join(args[:2])}` failed (exit {code}):\n{tail}")
        return output

    # -- the Engine API --------------------------------------------------------------------
    def _checkout(self, timeout: float) -> tuple[_DialStdio, bool]:
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            return _DialStdio(self, timeout), False
        conn.set_timeout(timeout)
        return conn, True

    def _checkin(self, conn: _DialStdio) -> None:
        with self._lock:
            if len(self._idle) < MAX_IDLE and not self.cancelled.is_set():
                self._idle.append(conn)
                return
        conn.shutdown()

    def _request(
        self,
        method: str,
        path: str,
        body: bytes | None,
        headers: dict[str, str],
        timeout: float,
    ) -> Response:
        """One HTTP exchange, on a kept-alive connection where one is idle (retried once on a
        fresh one if the kept one turns out closed, as Go's transport does)."""
        while True:
            conn, reused = self._checkout(timeout)
            sent = False
            try:
                conn.request(method, path, body=body, headers=headers)
                sent = True
                resp = conn.getresponse()
                data = resp.read()
            except (OSError, http.client.HTTPException) as err:
                conn.shutdown()
                closed_idle = isinstance(err, http.client.RemoteDisconnected)
                if reused and (not sent or closed_idle or method in IDEMPOTENT):
                    continue
                detail = conn.stderr() or str(err) or type(err).__name__
                raise EngineError(f"cannot reach Docker at {self.endpoint}: {detail}") from None
            if resp.will_close:
                conn.shutdown()
            else:
                self._checkin(conn)
            return Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)

    def version(self) -> str:
        if self._version is None:
            try:
                ping = self._request("GET", "/_ping", None, {}, 60)
            except EngineError as err:
                if not self.daemon_check:
                    return "1.41"
                raise EngineError(
                    f"Error pinging Docker server, please make sure that {self.endpoint} is "
                    f"reachable and has a '_ping' endpoint. Error: {err}"
                ) from None
            self._version = ping.headers.get("api-version", "1.41")
        return self._version

    def api(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        data: bytes | None = None,
        content_type: str = "application/json",
        timeout: float = DEFAULT_API_TIMEOUT,
        ok: tuple[int, ...] = (200, 201, 204),
    ) -> Response:
        """`METHOD /vX.YZ/path?query` with a JSON `body` (or raw `data`); raises EngineError
        with the daemon's message unless the status is in `ok`."""
        url = f"/v{self.version()}{path}"
        if query:
            url += "?" + urllib.parse.urlencode(
                {k: _query_value(v) for k, v in query.items() if v is not None}
            )
        headers: dict[str, str] = {}
        payload = data
        if body is not None:
            payload = json.dumps(body).encode()
        if payload is not None:
            headers["Content-Type"] = content_type
        resp = self._request(method, url, payload, headers, timeout)
        if resp.status not in ok:
            raise EngineError(_message(resp), resp.status)
        return resp

    def _inspect(self, path: str) -> dict[str, Any] | None:
        """The engine's JSON of the object at `path`, or None when it has no such object."""
        try:
            return self.api("GET", path).json()
        except EngineError as err:
            if err.not_found:
                return None
            raise

    # -- containers ------------------------------------------------------------------------
    def inspect_container(self, ref: str) -> dict[str, Any] | None:
        return self._inspect(f"/containers/{_q(ref)}/json")

    def create_container(self, name: str, body: dict[str, Any], platform: str | None) -> str:
        query = {"name": name, "platform": platform or None}
        return self.api("POST", "/containers/create", query=query, body=body).json()["Id"]

    def put_archive(self, ref: str, path: str, tar: bytes) -> None:
        self.api(
            "PUT",
            f"/containers/{_q(ref)}/archive",
            query={"path": path},
            data=tar,
            content_type="application/x-tar",
        )

    def start(self, ref: str) -> None:
        self.api("POST", f"/containers/{_q(ref)}/start", ok=(204, 304))

    def stop(self, ref: str, seconds: int, timeout: float) -> None:
        path = f"/containers/{_q(ref)}/stop"
        self.api("POST", path, query={"t": seconds}, ok=(204, 304), timeout=timeout)

    def remove(self, ref: str, volumes: bool, timeout: float) -> None:
        query = {"v": volumes, "force": True}
        self.api("DELETE", f"/containers/{_q(ref)}", query=query, timeout=timeout)

    def wait(self, ref: str, condition: str, timeout: float) -> dict[str, Any]:
        resp = self.api(
            "POST", f"/containers/{_q(ref)}/wait", query={"condition": condition}, timeout=timeout
        )
        return resp.json() or {}

    def update(self, ref: str, body: dict[str, Any]) -> None:
        self.api("POST", f"/containers/{_q(ref)}/update", body=body)

    def logs(self, ref: str, tty: bool) -> str:
        query = {"stdout": True, "stderr": True}
        raw = self.api("GET", f"/containers/{_q(ref)}/logs", query=query).body
        return (raw if tty else _demux(raw)).decode(errors="replace")

    # -- images ----------------------------------------------------------------------------
    def inspect_image(self, ref: str) -> dict[str, Any] | None:
        return self._inspect(f"/images/{_q(ref)}/json")

    def remove_image(self, ref: str, force: bool) -> None:
        self.api("DELETE", f"/images/{_q(ref)}", query={"force": force})

    def buildkit(self) -> bool:
        """Whether `docker build` can use BuildKit (the buildx CLI plugin is installed)."""
        try:
            self.run(["buildx", "version"], timeout=30)
        except EngineError:
            return False
        return True


def _q(ref: str) -> str:
    return urllib.parse.quote(ref, safe=":@/")


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _message(resp: Response) -> str:
    try:
        return str(resp.json().get("message") or resp.body.decode())
    except (ValueError, AttributeError):
        return resp.body.decode(errors="replace") or f"HTTP {resp.status}"


def _demux(raw: bytes) -> bytes:
    """The payload of a multiplexed (non-TTY) log stream: 8-byte headers stripped."""
    out, i = bytearray(), 0
    while i + 8 <= len(raw):
        size = int.from_bytes(raw[i + 4 : i + 8], "big")
        out += raw[i + 8 : i + 8 + size]
        i += 8 + size
    return bytes(out)
