"""Killable worker processes for CPU-bound parsing that may not terminate (hostile PDFs).

A thread cannot be stopped, so a PDF whose parsing loops would burn a core (and hold the GIL
against the event loop) for good. :class:`ProcessWorkers` runs ``module:function`` in up to
``size`` child interpreters (``python -m gateway.inputs.workers module:function``, started on demand
and kept between jobs); a job past its timeout, or one whose caller goes away, kills its
process, and the next job starts a fresh one. The children are plain subprocesses on asyncio
pipes: the event loop never blocks on them, and unlike ``multiprocessing`` nothing re-imports
the parent's main module.

Wire format on the child's stdin: 12 bytes (payload length, args length), the payload bytes,
the JSON list of extra arguments; the answer is one JSON line, ``{"ok": result}`` or
``{"error": text}``. A function that returns :class:`Blobs` (byte strings, e.g. PDF slices)
answers ``{"blobs": [length, ...]}`` followed by those bytes, which no JSON line could carry.

Usage::

    workers = ProcessWorkers("gateway.inputs.pdf:work", size=2)
    result = await workers.run(pdf_bytes, ("inspect", 1000, 178956970), timeout=10.0)
    #  WorkerTimeout past 10 s, WorkerCrashed if the process died or the function raised
    await workers.close()
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import struct
import sys
from dataclasses import dataclass
from typing import Any

_HEAD = struct.Struct(">QI")
_ANSWER_LIMIT = 1 << 20  # bytes of one answer line


class Blobs(list[bytes]):
    """A worker function's result of raw byte strings, sent after the answer line."""


class WorkerTimeout(Exception):
    """The job ran past its timeout; its process was killed."""


class WorkerCrashed(Exception):
    """The worker process died during the job, or the function raised."""


@dataclass(eq=False)
class _Worker:
    process: asyncio.subprocess.Process

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()


class ProcessWorkers:
    """At most ``size`` jobs at once, each in its own process; more callers wait their turn,
    an ``urgent`` one (a client waits for it) before the others."""

    def __init__(self, target: str, size: int = 2) -> None:
        self.target = target
        self.size = size
        self._idle: list[_Worker] = []
        self._busy = 0
        self._turn: asyncio.Condition | None = None
        self._urgent_waiting = 0
        self.started = 0  # processes started so far
        self.killed = 0

    async def _spawn(self) -> _Worker:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "gateway.inputs.workers",
            self.target,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=env,
            limit=_ANSWER_LIMIT,
        )
        self.started += 1
        return _Worker(process)

    async def run(
        self, payload: bytes, args: tuple[Any, ...], timeout: float, urgent: bool = False
    ) -> Any:
        """``function(payload, *args)`` in a worker (``args`` JSON-serializable), the next
        free one going to an ``urgent`` caller first; WorkerTimeout after ``timeout`` seconds
        of work (waiting for a free worker does not count)."""
        if self._turn is None:
            self._turn = asyncio.Condition()
        turn = self._turn
        async with turn:
            if urgent:
                self._urgent_waiting += 1
                try:
                    await turn.wait_for(lambda: self._busy < self.size)
                finally:
                    self._urgent_waiting -= 1
                    turn.notify_all()  # the others wait no more for it (if it went away)
            else:
                await turn.wait_for(lambda: self._busy < self.size and not self._urgent_waiting)
            self._busy += 1
        worker: _Worker | None = None
        try:
            worker = self._idle.pop() if self._idle else await self._spawn()
            process = worker.process
            assert process.stdin is not None and process.stdout is not None
            extra = json.dumps(list(args)).encode()
            try:
                async with asyncio.timeout(timeout):
                    process.stdin.write(_HEAD.pack(len(payload), len(extra)) + payload + extra)
                    await process.stdin.drain()
                    line = await process.stdout.readline()
                    answer = json.loads(line) if line else None
                    if answer is not None and "blobs" in answer:
                        answer["ok"] = Blobs(
                            [await process.stdout.readexactly(n) for n in answer["blobs"]]
                        )
            except TimeoutError:
                raise WorkerTimeout(f"no answer within {timeout:g}s") from None
            except (ConnectionError, ValueError, asyncio.IncompleteReadError) as exc:
                raise WorkerCrashed(f"the worker process failed: {exc}") from None
            if answer is None:
                raise WorkerCrashed(f"the worker process exited ({process.returncode})")
            if "ok" not in answer:
                raise WorkerCrashed(str(answer.get("error")))
            self._idle.append(worker)
            worker = None
            return answer["ok"]
        finally:
            if worker is not None:  # timed out, died, raised or cancelled mid-job
                self.killed += 1
                worker.kill()
            async with turn:
                self._busy -= 1
                turn.notify_all()  # the waiter whose turn it is may not be the first in line

    async def close(self) -> None:
        """Stop the idle workers (a job still running kills its own when it ends)."""
        idle, self._idle = self._idle, []
        for worker in idle:
            worker.kill()
        for worker in idle:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(worker.process.wait(), 10)


def _serve(target: str) -> None:
    """The child's loop (see module doc); stdout carries answers only."""
    module, _, name = target.partition(":")
    function = getattr(importlib.import_module(module), name)
    # this file runs as __main__: the function's Blobs is the one of the imported module
    blobs_type = importlib.import_module("gateway.inputs.workers").Blobs
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything the function prints goes to stderr, not into the answers
    requests = sys.stdin.buffer
    while True:
        head = requests.read(_HEAD.size)
        if len(head) < _HEAD.size:
            return
        size, extra = _HEAD.unpack(head)
        payload = requests.read(size)
        args = json.loads(requests.read(extra))
        blobs: list[bytes] = []
        try:
            result = function(payload, *args)
            if isinstance(result, blobs_type):
                blobs = result
                answer: dict[str, Any] = {"blobs": [len(blob) for blob in blobs]}
            else:
                answer = {"ok": result}
        except Exception as exc:
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        answers.write(json.dumps(answer).encode() + b"\n")
        for blob in blobs:
            answers.write(blob)
        answers.flush()


if __name__ == "__main__":
    _serve(sys.argv[1])
