"""A real PostgreSQL for the tests and the benchmarks: Debian's binaries, a temporary cluster on
a loopback port. Here, not in tests/, so that ``bench.jobs_shared_store`` starts the same server
without importing the tests.

``initdb`` refuses to run as root, so as root the cluster belongs to the ``postgres`` user the
Debian package creates and every server command runs through ``runuser``. Authentication is
``trust`` on 127.0.0.1 only (a throw-away cluster on loopback). Each test gets a database of
its own (:meth:`PostgresServer.new_database`); :meth:`stop` and :meth:`start` restart the
server on the same data and port, for the outage tests.

Usage::

    server = PostgresServer.create()            # None when the binaries are absent
    url = server.new_database()                 # postgresql://fleet@127.0.0.1:PORT/db_1
    server.stop(); server.start()
    server.destroy()
"""

from __future__ import annotations

import contextlib
import glob
import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

PORT_RANGE = (27000, 27999)
USER = "fleet"
BIN_VARIABLE = "PADDLEOCR_FLEET_PG_BIN"
"""A folder of PostgreSQL's server binaries to use instead of Debian's (one without ``pg_ctl``,
e.g. ``/nonexistent``, makes PostgreSQL absent: how the tests' CI=true failure is shown)."""


def pg_bin_dir() -> Path | None:
    """The folder of ``$PADDLEOCR_FLEET_PG_BIN`` when set (None when it holds no ``pg_ctl``),
    else Debian's server binaries (``/usr/lib/postgresql/<version>/bin``), the newest."""
    chosen = os.environ.get(BIN_VARIABLE)
    if chosen:
        return Path(chosen) if (Path(chosen) / "pg_ctl").is_file() else None
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
        key=lambda p: int(Path(p).parent.parent.name),
    )
    return Path(found[-1]).parent if found else None


def pg_absent_reason() -> str:
    """Why :func:`pg_bin_dir` found no binaries."""
    chosen = os.environ.get(BIN_VARIABLE)
    if chosen:
        return f"no pg_ctl in {chosen} (${BIN_VARIABLE})"
    return (
        "its server binaries are absent (/usr/lib/postgresql/*/bin; Debian package postgresql,"
        " which scripts/test.sh installs)"
    )


def _free_port_in_range() -> int:
    """A free port in 27000-27999 (below the kernel's ephemeral range, apart from the tests'
    other servers), drawn at random so parallel runs rarely collide."""
    for _ in range(200):
        port = random.randint(*PORT_RANGE)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:  # in use: draw again
                continue
        return port
    raise RuntimeError("no free port in 27000-27999")


class PostgresServer:
    """See module doc."""

    def __init__(self, bindir: Path, root: Path, port: int) -> None:
        self.bindir = bindir
        self.root = root
        self.data = root / "data"
        self.port = port
        self._databases = 0

    @classmethod
    def create(cls) -> PostgresServer | None:
        """A new cluster, started; None when the binaries are absent. It lives in a temporary
        folder of its own under /tmp: the ``postgres`` user cannot enter pytest's (mode
        0700, root's)."""
        bindir = pg_bin_dir()
        if bindir is None:
            return None
        root = Path(tempfile.mkdtemp(prefix="paddleocr-fleet-pg-"))
        server = cls(bindir, root, _free_port_in_range())
        if os.geteuid() == 0:
            shutil.chown(root, "postgres", "postgres")
        try:
            server._run(
                "initdb", "-D", str(server.data), "-U", USER, "--auth=trust", "-E", "UTF8",
                "--no-sync",
            )  # fmt: skip
            server.start()
        except BaseException:
            server.destroy()  # no half-made cluster left in /tmp
            raise
        return server

    def _run(self, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
        command = [str(self.bindir / tool), *args]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stderr or done.stdout}")
        return done

    def start(self) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root}"
            " -c fsync=off -c max_connections=200"
        )
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"), "-o", options,
            "-w", "-t", "60", "start",
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while True:
            try:
                psycopg.connect(self.url("postgres"), connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``fast``: every session is cut, as a database restart does)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def url(self, database: str) -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """A new empty database; its URL."""
        self._databases += 1
        name = f"jobs_{os.getpid()}_{self._databases}"
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def destroy(self) -> None:
        with contextlib.suppress(RuntimeError):  # already stopped
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)
