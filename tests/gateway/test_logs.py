"""The access log in batches: one write per batch, nothing lost at a flush or a normal exit;
request ids unique across forked workers."""

from __future__ import annotations

import asyncio
import io
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from gateway.observability.context import fresh_request_id
from gateway.observability.logs import (
    ACCESS_LOGGER,
    BatchedStreamHandler,
    access_line,
    configure_logging,
    flush_access_log,
    log_format,
    name_worker_in_logs,
)

ROOT = Path(__file__).resolve().parents[2]


class CountingStream(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


def logger_with(handler: logging.Handler, name: str) -> logging.Logger:
    logger = logging.getLogger(name)
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    return logger


def test_lines_logged_in_the_loop_are_written_together_after_the_interval():
    stream = CountingStream()
    log = logger_with(BatchedStreamHandler(stream, flush_s=0.05), "test.batched.loop")

    async def serve() -> tuple[str, str]:
        for n in range(100):
            log.info("request %d", n)
        before = stream.getvalue()
        await asyncio.sleep(0.2)
        return before, stream.getvalue()

    before, after = asyncio.run(serve())
    assert before == ""
    assert after.splitlines() == [f"request {n}" for n in range(100)]
    assert stream.writes == 1


def test_a_full_batch_and_a_record_outside_the_loop_are_written_at_once():
    stream = CountingStream()
    log = logger_with(BatchedStreamHandler(stream, batch_bytes=100), "test.batched.full")

    async def serve() -> str:
        for n in range(20):
            log.info("line %02d", n)  # 8 bytes with its newline
        return stream.getvalue()

    written = asyncio.run(serve())
    assert written.splitlines() == [f"line {n:02d}" for n in range(13)]  # 13 x 8 >= 100
    log.info("outside any loop")
    assert stream.getvalue().splitlines()[-8:] == [f"line {n:02d}" for n in range(13, 20)] + [
        "outside any loop"
    ]


def test_the_access_lines_of_a_process_that_exits_are_all_written(tmp_path):
    script = (
        "import asyncio, logging, sys\n"
        "from gateway.observability.logs import configure_logging\n"
        "configure_logging('info')\n"
        "async def main():\n"
        "    for n in range(50):\n"
        "        logging.getLogger('gateway.access').info('hit %d', n)\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    lines = [line for line in done.stderr.splitlines() if "gateway.access" in line]
    assert [line.rsplit(" ", 1)[1] for line in lines] == [str(n) for n in range(50)]


def test_request_ids_are_unique_within_and_across_forked_processes():
    ours = {fresh_request_id() for _ in range(10_000)}
    assert len(ours) == 10_000 and all(len(i) == 32 and int(i, 16) >= 0 for i in ours)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a worker forked after the ids module was imported
        os.write(write, "\n".join(fresh_request_id() for _ in range(1000)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        theirs = set(pipe.read().split())
    os.waitpid(pid, 0)
    assert len(theirs) == 1000 and not theirs & ours


def test_an_access_line_reads_as_the_configured_format_gives_it(capsys):
    root_level = logging.getLogger().level
    configure_logging("info")
    name_worker_in_logs(3)
    access = logging.getLogger(ACCESS_LOGGER)
    try:
        access_line(access, '%s "%s" %d', "127.0.0.1:5", "POST /ocr", 200)
        expected = logging.Formatter(log_format(3)).format(
            access.makeRecord(ACCESS_LOGGER, logging.INFO, "", 0, '%s "%s" %d',
                              ("127.0.0.1:5", "POST /ocr", 200), None)
        )  # fmt: skip
        flush_access_log()
        written = capsys.readouterr().err.splitlines()[-1]
    finally:
        access.handlers.clear()
        access.propagate = True
        logging.getLogger().setLevel(root_level)
    # the same line but for the time (a clock read apart)
    assert written[23:] == expected[23:] == ' INFO w3 gateway.access: 127.0.0.1:5 "POST /ocr" 200'
    stamp = time.mktime(time.strptime(written[:19], "%Y-%m-%d %H:%M:%S"))
    assert abs(stamp - time.time()) < 5 and written[19] == "," and written[20:23].isdigit()
