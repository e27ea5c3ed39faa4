"""The gateway's listening sockets, handed from a running gateway to the one that replaces it.

Two gateways on one port one after the other leave a gap: between the old one's stop and the new
one's start the port refuses connections. Two at once with ``SO_REUSEPORT`` alone lose the
connections waiting in the old one's accept queue when it closes its socket (the kernel resets
them unless ``net.ipv4.tcp_migrate_req`` is set, which a host-network container cannot do).
So, as HAProxy's seamless reload and Envoy's hot restart do, the sockets themselves change
hands:

- A gateway started with a handover path (``--handover PATH``) first asks whoever listens on
  that unix socket for its listening sockets (:func:`obtain`). The answer carries them as file
  descriptors (``SCM_RIGHTS``); each must be a listening TCP socket on the wanted address and
  port, else all are dropped. Only when no one answers (or the answer is unusable) does it bind
  its own.
- Once it serves, it offers them in turn (:class:`Offer`): it binds a unix socket beside the
  path and renames it over the path, so the next gateway asks the newest one. The old gateway
  still serves its socket under the old, now nameless, inode until it stops.
- An answer that breaks off (a predecessor too busy to answer within :data:`ASK_TIMEOUT_S`, a
  path being handed to a newer gateway) is asked again for :data:`ASK_AGAIN_S` before new
  sockets are bound: sockets of its own beside the predecessor's would lose the connections
  waiting in the predecessor's queue when it stops.
- The deployment learns that the new process itself serves from its serving file
  (:class:`ServingFile`, ``--serving-file``), not from the port: during a handover the port is
  answered by the old gateway as well, so a probe of it proves nothing about the new one.
- Both processes then accept from the very same kernel sockets. The old one, on SIGTERM,
  stops accepting and finishes what it holds; what waits in the accept queue is taken by the
  new one, as the socket stays open in it.

Wire format (``SOCK_SEQPACKET``): the asker sends ``LISTENERS``; the answer is one or more
packets, each a JSON line ``{"total": N}`` with up to :data:`FDS_PER_PACKET` descriptors, until
N descriptors have come.

Usage::

    serving = ServingFile("/run/gateway.serving")
    sockets, inherited = obtain("0.0.0.0", 9101, count=4, handover="/run/gw/handover-9101.sock",
                                on_wait=serving.waiting)
    ...  # serve them; once serving:
    offer = Offer("/run/gw/handover-9101.sock", sockets)
    offer.start()
    serving.serving(inherited)
    ...  # on SIGTERM, before the graceful shutdown:
    offer.close()
    serving.remove()
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# One entry of socket.getaddrinfo: family, type, proto, canonical name, socket address.
_AddrInfo = tuple[socket.AddressFamily, socket.SocketKind, int, str, Any]

log = logging.getLogger("gateway.server.listeners")

REQUEST = b"LISTENERS"
FDS_PER_PACKET = 200  # the kernel takes at most 253 descriptors in one message
ASK_TIMEOUT_S = 5.0
ASK_AGAIN_S = 30.0
"""How long a handover whose answer broke off is asked again before new sockets are bound."""
BACKLOG = 2048
BIND_WAIT_S = 600.0
"""With a handover path and no one answering there, how long a busy port is waited for: a
gateway of a release without the handover still holds it, until the deployment stops it after
this one started (the first update to a release with the handover)."""


def bind_sockets(host: str, port: int, count: int) -> list[socket.socket]:
    """``count`` listening TCP sockets on one port (``port`` 0: a free one), SO_REUSEPORT."""
    family, _, _, _, address = _address(host, port)
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            # proto IPPROTO_TCP: asyncio then sets TCP_NODELAY on accepted connections
            sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.bind(address)
            address = sock.getsockname()  # the first one's port for the others
            sock.listen(BACKLOG)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def obtain(
    host: str,
    port: int,
    count: int,
    handover: str | None,
    on_wait: Callable[[], None] | None = None,
) -> tuple[list[socket.socket], bool]:
    """The sockets to serve: those of the gateway answering at ``handover`` (True), else
    ``count`` new ones (False). Inherited sockets are all served, whatever ``count`` is: each
    may hold connections waiting to be accepted.

    An answer that broke off is asked again for up to :data:`ASK_AGAIN_S`. While the port is in
    use and no answer came, it asks again and tries to bind for up to :data:`BIND_WAIT_S`
    (``on_wait`` is called once, when that wait begins): a gateway of a release without the
    handover holds the port until the deployment stops it."""
    if not handover:
        return bind_sockets(host, port, count), False
    started = time.monotonic()
    said = False
    while True:
        try:
            inherited = inherit(handover, host, port, strict=True)
        except HandoverBroken as exc:
            if time.monotonic() - started < ASK_AGAIN_S:
                log.warning("the handover at %s broke off (%s): asking again", handover, exc)
                time.sleep(0.5)
                continue
            log.warning("no socket taken over from %s (%s): binding new ones", handover, exc)
            inherited = []
        if inherited:
            log.info(
                "took over %d listening socket(s) on %s:%d from the gateway at %s",
                len(inherited),
                host,
                port,
                handover,
            )
            return inherited, True
        try:
            return bind_sockets(host, port, count), False
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE or time.monotonic() - started >= BIND_WAIT_S:
                raise
            if not said:
                log.warning(
                    "%s:%d is in use and no gateway hands its sockets over: asking again and "
                    "waiting up to %.0fs for the one that holds it to stop",
                    host,
                    port,
                    BIND_WAIT_S,
                )
                said = True
                if on_wait is not None:
                    on_wait()
            time.sleep(0.2)


class HandoverBroken(OSError):
    """The gateway at the handover path answered, but its answer broke off (asked again)."""


def inherit(
    path: str, host: str, port: int, timeout: float = ASK_TIMEOUT_S, strict: bool = False
) -> list[socket.socket]:
    """The listening sockets the gateway at unix socket ``path`` hands over; empty when none
    answers there, or when one of them is not a listening TCP socket on ``host:port``.
    ``strict``: an answer that broke off raises :class:`HandoverBroken` instead."""
    asker = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    asker.settimeout(timeout)
    received: list[socket.socket] = []
    try:
        try:
            asker.connect(path)
        except (FileNotFoundError, ConnectionRefusedError):
            return []  # no gateway before this one (or it is gone): nothing to take over
        try:
            asker.send(REQUEST)
            total = None
            while total is None or len(received) < total:
                data, fds, flags, _ = socket.recv_fds(asker, 4096, FDS_PER_PACKET)
                received += [socket.socket(fileno=fd) for fd in fds]
                if not data:
                    raise OSError(f"the answer ended after {len(received)} of {total} sockets")
                if flags & socket.MSG_CTRUNC:
                    raise OSError("the answer's descriptors were cut off")
                total = int(json.loads(data)["total"])
        except (OSError, ValueError, KeyError) as exc:
            if strict:
                raise HandoverBroken(str(exc) or type(exc).__name__) from exc
            raise
        problem = next((p for p in (_unfit(s, host, port) for s in received) if p), None)
        if problem:
            raise OSError(problem)
        received, taken = [], received
        return taken
    except HandoverBroken:
        raise
    except (OSError, ValueError, KeyError) as exc:
        log.warning("no socket taken over from %s (%s): binding new ones", path, exc)
        return []
    finally:
        for sock in received:
            sock.close()
        asker.close()


def _unfit(sock: socket.socket, host: str, port: int) -> str | None:
    """Why ``sock`` cannot serve ``host:port`` (None: it can)."""
    if sock.family not in (socket.AF_INET, socket.AF_INET6) or sock.type != socket.SOCK_STREAM:
        return f"a socket of family {sock.family!r} and type {sock.type!r}, not TCP"
    if not sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
        return "a TCP socket that is not listening"
    bound = sock.getsockname()[:2]
    wanted = _address(host, port)[4][:2]
    if bound[0] != wanted[0] or (port and bound[1] != port):
        return f"a socket listening on {bound[0]}:{bound[1]}, not on {wanted[0]}:{port}"
    return None


def _address(host: str, port: int) -> _AddrInfo:
    return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]


def start_offer(offer: Offer) -> bool:
    """:meth:`Offer.start`, a failure logged: the gateway serves on without a successor's
    handover (the next one binds its own sockets)."""
    try:
        offer.start()
    except OSError as exc:
        log.error("cannot offer the listening sockets at %s: %s", offer.path, exc)
        return False
    return True


class Offer:
    """Hands ``sockets`` to any gateway that asks at ``path`` (a daemon thread); see module doc.

    It keeps its own duplicates of the sockets, so the server closing its listeners at shutdown
    does not take them from an asker in the middle of an answer.
    """

    def __init__(self, path: str, sockets: list[socket.socket]) -> None:
        self.path = path
        self._fds = [os.dup(s.fileno()) for s in sockets]
        self._listener: socket.socket | None = None
        self._inode: tuple[int, int] | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Listen at ``path``, taking it over from the gateway that listened there before."""
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        staging = f"{self.path}.{os.getpid()}"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staging)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            listener.bind(staging)
            os.chmod(staging, 0o600)
            listener.listen(8)
            stat = os.stat(staging)
            os.replace(staging, self.path)
        except BaseException:
            listener.close()
            with contextlib.suppress(OSError):
                os.unlink(staging)
            raise
        self._listener, self._inode = listener, (stat.st_dev, stat.st_ino)
        self._thread = threading.Thread(target=self._serve, name="listener-offer", daemon=True)
        self._thread.start()
        log.info("offering %d listening socket(s) at %s", len(self._fds), self.path)

    def _serve(self) -> None:
        listener = self._listener
        assert listener is not None
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return  # closed
            with conn:
                try:
                    conn.settimeout(ASK_TIMEOUT_S)
                    if conn.recv(64) != REQUEST:
                        continue
                    header = json.dumps({"total": len(self._fds)}).encode() + b"\n"
                    for start in range(0, max(1, len(self._fds)), FDS_PER_PACKET):
                        socket.send_fds(conn, [header], self._fds[start : start + FDS_PER_PACKET])
                    log.info("handed %d listening socket(s) to the next gateway", len(self._fds))
                except OSError as exc:
                    log.warning("handing the listening sockets over failed: %s", exc)

    def close(self) -> None:
        """Stop offering (the path is removed if it is still ours) and drop the duplicates."""
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                stat = os.stat(self.path)
                if (stat.st_dev, stat.st_ino) == self._inode:
                    os.unlink(self.path)
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)  # wakes the thread's accept
            listener.close()
        if self._thread is not None:
            self._thread.join(timeout=ASK_TIMEOUT_S)
            self._thread = None
        for fd in self._fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds = []

    def forget(self) -> None:
        """In a forked child: close this process's copies without touching the path."""
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        for fd in self._fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds = []


class ServingFile:
    """A file that says whether this process serves: ``{"state": "serving", "pid": ...,
    "inherited": true}`` once it serves its sockets, ``{"state": "waiting", ...}`` while it
    waits for a port held by a gateway that hands nothing over. It is removed when the process
    stops serving.

    The deployment's readiness check reads it inside the new container (components/render.py):
    the port alone cannot tell the new process from the old one during a handover. ``path``
    None: nothing is written.
    """

    def __init__(self, path: str | None) -> None:
        self.path = path

    def serving(self, inherited: bool) -> None:
        self._write({"state": "serving", "pid": os.getpid(), "inherited": inherited})

    def waiting(self) -> None:
        self._write({"state": "waiting", "pid": os.getpid()})

    def remove(self) -> None:
        if self.path:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)

    def _write(self, content: dict[str, object]) -> None:
        if not self.path:
            return
        path = Path(self.path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            staging = path.with_name(f"{path.name}.{os.getpid()}")
            staging.write_text(json.dumps(content) + "\n")
            os.replace(staging, path)
        except OSError as exc:
            log.error("cannot write the serving file %s: %s", self.path, exc)
