"""The gateway's logging: one format for every process, and an access log written in batches.

The access log (``gateway.access``, one line per request, :mod:`gateway.server.middleware`) goes to
standard error through a :class:`BatchedStreamHandler`: the lines of the last
:data:`FLUSH_S` are written together in one ``write``, not one system call (and one pipe
wake-up of the container runtime) per request. A normal exit and the app's shutdown flush them;
a process killed with ``SIGKILL`` loses at most the last :data:`FLUSH_S` of access lines. The
other loggers write each record at once.

Usage::

    configure_logging("info", access_log=True)            # python -m gateway
    name_worker_in_logs(1)                                # in worker 1 of a supervisor
    flush_access_log()                                    # at shutdown
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from typing import TextIO

FLUSH_S = 0.25
BATCH_BYTES = 64 << 10  # written at once past this, without waiting for the timer
ACCESS_LOGGER = "gateway.access"


class BatchedStreamHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler that writes its records in batches: every ``flush_s`` seconds (a
    timer on the running event loop) or once ``batch_bytes`` wait, and at once where no
    event loop runs (a record from a thread: it is written after the ones before it)."""

    def __init__(
        self,
        stream: TextIO | None = None,
        flush_s: float = FLUSH_S,
        batch_bytes: int = BATCH_BYTES,
    ) -> None:
        super().__init__(stream)
        self.flush_s = flush_s
        self.batch_bytes = batch_bytes
        self._lines: list[str] = []
        self._size = 0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_loop: asyncio.AbstractEventLoop | None = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record) + self.terminator
        except Exception:
            self.handleError(record)
            return
        self.emit_line(line)

    def emit_line(self, line: str) -> None:
        """Queue a line already formatted (ending in the terminator)."""
        self._lines.append(line)
        self._size += len(line)
        if self._size >= self.batch_bytes:
            self.flush()
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        if self._timer is None or self._timer_loop is not loop:  # none yet, or a closed loop's
            self._timer, self._timer_loop = loop.call_later(self.flush_s, self.flush), loop

    def flush(self) -> None:
        with self.lock:  # type: ignore[union-attr]
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            lines, self._lines, self._size = self._lines, [], 0
            if lines and self.stream is not None:
                try:
                    self.stream.write("".join(lines))
                except (OSError, ValueError):  # a closed stream at exit
                    return
            super().flush()


class _AccessLines:
    """The access log's own formatting, the same line as :func:`log_format` gives, without
    a log record: the timestamp's seconds are formatted once per second."""

    def __init__(self) -> None:
        self.worker = ""
        self.formatter: logging.Formatter | None = None  # the format these lines stand for
        self._second = -1
        self._stamp = ""

    def line(self, text: str) -> str:
        now = time.time()
        second = int(now)
        if second != self._second:
            self._second = second
            self._stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(second))
        millis = int((now - second) * 1000)
        return f"{self._stamp},{millis:03d} INFO{self.worker} {ACCESS_LOGGER}: {text}\n"


_ACCESS_LINES = _AccessLines()


def log_format(worker: int | None = None) -> str:
    """The line format; a supervisor's workers name themselves (``w1``)."""
    who = f" w{worker}" if worker is not None else ""
    return f"%(asctime)s %(levelname)s{who} %(name)s: %(message)s"


def configure_logging(level: str, access_log: bool = True) -> None:
    """Log at ``level`` to standard error (the access log batched, or off)."""
    formatter = logging.Formatter(log_format())
    root = logging.getLogger()
    if not root.handlers:  # as logging.basicConfig: a host's own handlers stay as they are
        stream = logging.StreamHandler(sys.stderr)
        stream.setFormatter(formatter)
        root.addHandler(stream)
    root.setLevel(level.upper())
    for noisy in ("httpx", "httpcore"):  # httpx logs every upstream call at INFO
        logging.getLogger(noisy).setLevel(logging.WARNING)
    access = logging.getLogger(ACCESS_LOGGER)
    access.disabled = not access_log  # the lines name the caller's token (never the token)
    for handler in access.handlers[:]:
        access.removeHandler(handler)
        handler.close()
    batched = BatchedStreamHandler(sys.stderr)
    batched.setFormatter(formatter)
    _ACCESS_LINES.formatter, _ACCESS_LINES.worker = formatter, ""
    access.addHandler(batched)
    access.propagate = False


def access_line(logger: logging.Logger, msg: str, *args: object) -> None:
    """``logger.info(msg, *args)``; straight to the batched handler when it is the access
    log's only way out (as :func:`configure_logging` sets it), else as a log record without
    the caller lookup (``Logger.info`` walks the stack for a file and line never shown)."""
    handlers = logger.handlers
    if len(handlers) == 1 and not logger.propagate:
        handler = handlers[0]
        ours = handler.formatter is _ACCESS_LINES.formatter
        if ours and isinstance(handler, BatchedStreamHandler) and handler.level <= logging.INFO:
            handler.emit_line(_ACCESS_LINES.line(msg % args))
            return
    logger.handle(logger.makeRecord(logger.name, logging.INFO, __file__, 0, msg, args, None))


def name_worker_in_logs(worker: int) -> None:
    """Give every line of this (forked) process its worker's name."""
    formatter = logging.Formatter(log_format(worker))
    for handler in logging.getLogger().handlers + logging.getLogger(ACCESS_LOGGER).handlers:
        handler.setFormatter(formatter)
    _ACCESS_LINES.formatter, _ACCESS_LINES.worker = formatter, f" w{worker}"


def flush_access_log() -> None:
    """Write the access lines still waiting (the app's shutdown calls it)."""
    for handler in logging.getLogger(ACCESS_LOGGER).handlers:
        handler.flush()
