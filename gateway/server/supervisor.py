"""``python -m gateway --workers N`` with N > 1: a pre-fork supervisor and N worker processes.

The supervisor binds the listening sockets (one per worker, ``SO_REUSEPORT`` on the one port,
so the kernel spreads new connections evenly over the workers), or takes over those of the
gateway it replaces (``handover``: :mod:`gateway.server.listeners`; each is then served, by one
worker or shared by several when there are fewer than workers), creates the shared
:class:`~gateway.shared.occupancy.Board` and forks the workers. Each worker builds its own app
(:func:`gateway.server.app.create_app` with its :class:`~gateway.shared.occupancy.Seat`) and runs
uvicorn on its socket. The supervisor keeps every socket open, so a worker that is being restarted
loses no connection that has not been accepted yet.

- A worker that dies is reaped, its rows of the board are zeroed (its attempts and token
  requests no longer count) and it is started again: at once if it ran for
  :data:`QUICK_EXIT_S` or more, else after a back-off that doubles up to :data:`MAX_BACKOFF_S`.
  A worker that fails before any worker ever became ready stops the gateway with its status.
- Once a worker is ready, the sockets are offered to the next gateway at ``handover``.
- SIGTERM or SIGINT: the offer ends, the sockets close, every worker gets SIGTERM and finishes
  its requests (:class:`~gateway.server.serving.GatewayServer`'s graceful shutdown, at most
  ``grace_s - 5`` s, then its lifespan shutdown, which gives back job leases); whoever still
  runs after ``grace_s`` gets SIGKILL. Exit status 0.
- SIGHUP is passed on to every worker: each re-reads the config (:mod:`gateway.config.reload`);
  each also polls the file on its own.
- Workers get SIGKILL when the supervisor dies (``PR_SET_PDEATHSIG``), so ``kill -9`` of the
  gateway stops all of it, as it stops a single process. As PID 1 of a container the
  supervisor also reaps orphans.

Usage::

    options = SupervisorOptions(config_path="gateway.json", host="0.0.0.0", port=9101,
                                workers=4, log_level="info")
    sys.exit(Supervisor(options).run())
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from gateway.observability.logs import name_worker_in_logs
from gateway.server.listeners import Offer, ServingFile, obtain, start_offer
from gateway.shared.occupancy import Board, Seat

log = logging.getLogger("gateway.supervisor")

STARTUP_FAILURE = 3  # exit status when the gateway cannot start (uvicorn's too)
QUICK_EXIT_S = 10.0  # a worker that dies sooner than this after its start is restarted later
MAX_BACKOFF_S = 30.0
_SIGNALS = {signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class SupervisorOptions:
    """How to run the workers (the command line of ``python -m gateway``)."""

    config_path: str
    host: str
    port: int
    workers: int
    log_level: str = "info"
    grace_s: float = 25.0  # SIGTERM to SIGKILL (Docker's stop waits 30 s)
    handover: str | None = None
    """The unix socket path of the listening sockets' handover (:mod:`gateway.server.listeners`)."""
    serving_file: str | None = None
    """Written once a worker serves, removed at shutdown (``listeners.ServingFile``)."""


def assign(sockets: list[socket.socket], workers: int) -> list[list[socket.socket]]:
    """Which sockets each worker serves: every socket is served (an inherited one may hold
    connections waiting to be accepted), by one worker when there are enough sockets, else
    shared by several."""
    if len(sockets) >= workers:
        return [sockets[i::workers] for i in range(workers)]
    return [[sockets[i % len(sockets)]] for i in range(workers)]


def _die_with_parent(parent: int) -> None:
    """SIGKILL this process when the supervisor dies (Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
    if os.getppid() != parent:  # it died before prctl took effect
        os._exit(1)


def run_worker(
    index: int, sockets: list[socket.socket], seat: Seat, options: SupervisorOptions
) -> int:
    """The body of worker ``index`` (in the forked child); returns its exit status."""
    import uvicorn

    from gateway.errors import ConfigError
    from gateway.server.app import create_app
    from gateway.server.connections import uvicorn_options
    from gateway.server.serving import GatewayServer

    name_worker_in_logs(index)
    try:
        app = create_app(options.config_path, seat=seat)
    except ConfigError as exc:
        print(f"gateway worker {index}: invalid config: {exc}", file=sys.stderr)
        return 2
    config = uvicorn.Config(
        app,
        log_level=options.log_level.lower(),
        access_log=False,
        timeout_graceful_shutdown=max(1, int(options.grace_s) - 5),
        **uvicorn_options(app),
    )
    server = GatewayServer(config)

    async def serve() -> None:
        task = asyncio.ensure_future(server.serve(sockets=sockets))
        while not server.started and not task.done():
            await asyncio.sleep(0.01)
        if server.started:
            seat.mark_ready()
        await task

    # uvicorn handles SIGTERM/SIGINT while it serves (graceful shutdown), then re-raises the
    # signal, which ends the worker (the supervisor expects that while it stops)
    with asyncio.Runner(loop_factory=config.get_loop_factory()) as runner:
        runner.run(serve())
    return 0


@dataclass
class _Worker:
    pid: int = 0
    started: float = 0.0
    failures: int = 0  # quick exits in a row
    due: float = 0.0  # when to start it again (while pid == 0)


class Supervisor:
    """See module doc."""

    def __init__(self, options: SupervisorOptions) -> None:
        if options.workers < 2:
            raise ValueError("the supervisor runs two or more workers")
        self.options = options
        self._workers = [_Worker() for _ in range(options.workers)]
        self._sockets: list[socket.socket] = []
        self._inherited = False
        self._serving = ServingFile(options.serving_file)
        self._assigned: list[list[socket.socket]] = []
        self._offer: Offer | None = None
        self._board: Board | None = None
        self._stopping = False
        self._ever_ready = False
        self._status = 0

    def run(self) -> int:
        """Serve until SIGTERM/SIGINT (0) or a worker fails at start-up (its status)."""
        opts = self.options
        run_dir = Path(tempfile.mkdtemp(prefix="gateway-workers-"))
        signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
        try:
            try:
                self._sockets, self._inherited = obtain(
                    opts.host, opts.port, opts.workers, opts.handover, self._serving.waiting
                )
            except OSError as exc:
                log.error("cannot listen on %s:%d: %s", opts.host, opts.port, exc)
                return STARTUP_FAILURE
            self._assigned = assign(self._sockets, opts.workers)
            self._board = Board(opts.workers, run_dir)
            host, port = self._sockets[0].getsockname()[:2]
            shown = f"[{host}]" if ":" in host else host
            log.info(
                "Uvicorn running on http://%s:%d with %d workers (supervisor pid %d)",
                shown,
                port,
                opts.workers,
                os.getpid(),
            )
            for index in range(opts.workers):
                self._spawn(index)
            self._loop()
        finally:
            self._shutdown()
            if self._board is not None:
                self._board.close()
            shutil.rmtree(run_dir, ignore_errors=True)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)
        return self._status

    # ------------------------------------------------------------------ the loop
    def _loop(self) -> None:
        while not self._stopping:
            now = time.monotonic()
            due = [w.due for w in self._workers if not w.pid]
            timeout = max(0.0, min(due) - now) if due else 1.0
            info = signal.sigtimedwait(_SIGNALS, min(timeout, 1.0))
            if info is None:
                pass
            elif info.si_signo == signal.SIGCHLD:
                self._reap()
            elif info.si_signo in (signal.SIGTERM, signal.SIGINT):
                name = signal.Signals(info.si_signo).name
                log.info("stopping %d workers (%s)", len(self._live()), name)
                self._stopping = True
                break
            elif info.si_signo == signal.SIGHUP:
                self._signal_all(signal.SIGHUP)
            self._mark_ready()
            now = time.monotonic()
            for index, worker in enumerate(self._workers):
                if not worker.pid and worker.due <= now and not self._stopping:
                    self._spawn(index)

    def _live(self) -> list[int]:
        return [w.pid for w in self._workers if w.pid]

    def _signal_all(self, sig: int) -> None:
        for pid in self._live():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def _mark_ready(self) -> None:
        if not self._ever_ready and self._board is not None:
            self._ever_ready = any(self._board.ready(i) for i in range(len(self._workers)))
            if self._ever_ready and not self._stopping:
                if self.options.handover:
                    offer = Offer(self.options.handover, self._sockets)
                    if start_offer(offer):
                        self._offer = offer
                self._serving.serving(self._inherited)

    # ------------------------------------------------------------------ workers
    def _spawn(self, index: int) -> None:
        board = self._board
        assert board is not None
        board.clear(index)
        sys.stdout.flush()
        sys.stderr.flush()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the worker; never returns into the supervisor's code
            status = 1
            try:
                signal.pthread_sigmask(signal.SIG_SETMASK, set())
                for sig in _SIGNALS:
                    signal.signal(sig, signal.SIG_DFL)
                _die_with_parent(parent)
                if self._offer is not None:
                    self._offer.forget()
                mine = self._assigned[index]
                for sock in self._sockets:
                    if all(sock is not own for own in mine):
                        sock.close()
                status = run_worker(index, mine, board.seat(index), self.options)
            except SystemExit as exc:
                status = exc.code if isinstance(exc.code, int) else 1
            except BaseException:
                traceback.print_exc()
            finally:
                with contextlib.suppress(Exception):
                    sys.stdout.flush()
                    sys.stderr.flush()
                os._exit(status)
        worker = self._workers[index]
        worker.pid, worker.started = pid, time.monotonic()
        board.set_pid(index, pid)
        log.info("worker %d started (pid %d)", index, pid)

    def _reap(self) -> None:
        """Collect every exited child (workers, and orphans when PID 1)."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            for index, worker in enumerate(self._workers):
                if worker.pid == pid:
                    self._exited(index, worker, status)

    def _exited(self, index: int, worker: _Worker, status: int) -> None:
        assert self._board is not None
        pid, worker.pid = worker.pid, 0
        was_ready = self._board.ready(index)
        self._mark_ready()
        self._board.clear(index)
        with contextlib.suppress(OSError):
            (self._board.run_dir / f"metrics-{index}.prom").unlink()
        code = os.waitstatus_to_exitcode(status)
        if self._stopping:
            return
        ran = time.monotonic() - worker.started
        how = f"exit status {code}" if code >= 0 else f"signal {signal.Signals(-code).name}"
        if not self._ever_ready and not was_ready:
            log.error("worker %d failed to start (%s); stopping the gateway", index, how)
            self._status = code if code > 0 else 1
            self._stopping = True
            return
        worker.failures = worker.failures + 1 if ran < QUICK_EXIT_S else 0
        delay = 0.0 if not worker.failures else min(MAX_BACKOFF_S, 0.5 * 2 ** (worker.failures - 1))
        worker.due = time.monotonic() + delay
        log.error(
            "worker %d (pid %d) died after %.1fs (%s); its upstream and token counts are freed, "
            "restarting it%s",
            index,
            pid,
            ran,
            how,
            f" in {delay:.1f}s" if delay else "",
        )

    def _shutdown(self) -> None:
        """Stop the workers: SIGTERM, then SIGKILL after ``grace_s``."""
        self._serving.remove()
        if self._offer is not None:
            self._offer.close()
            self._offer = None
        for sock in self._sockets:
            sock.close()
        self._signal_all(signal.SIGTERM)
        deadline = time.monotonic() + self.options.grace_s
        while self._live() and time.monotonic() < deadline:
            signal.sigtimedwait({signal.SIGCHLD}, max(0.01, min(0.5, deadline - time.monotonic())))
            self._reap()
        if self._live():
            log.error(
                "workers (pids %s) still run after %.0fs; killing them",
                self._live(),
                self.options.grace_s,
            )
            self._signal_all(signal.SIGKILL)
            while self._live():
                self._reap()
                time.sleep(0.01)
        log.info("all workers stopped")
