"""Which job runners sharing a store are alive: one ``flock``-ed file per process.

A runner holds an exclusive ``flock`` on ``owners/<owner>`` for as long as it lives; the kernel
drops the lock when the process dies, ``kill -9`` included. Another runner that can take the
lock of a file knows its owner is gone and may release that owner's leases at once instead of
waiting for them to expire. This works for every process on one host sharing the directory
(containers included, whatever their PID namespaces), which is what SQLite's own locking
needs anyway; leases stay the fallback for a process that is alive but stuck.

Usage::

    registry = OwnerRegistry(root / "owners")
    registry.register("host-12-ab12cd34")     # held until close()
    for owner in registry.dead():              # their leases can be released now
        ...
        registry.forget(owner)
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
from pathlib import Path


class OwnerRegistry:
    """See module doc."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self._held: dict[str, int] = {}  # owner -> fd holding its lock

    def register(self, owner: str) -> None:
        """Create and lock ``owners/<owner>``: locked under a temporary name, then renamed,
        so that no other process ever sees the file unlocked and takes it for a dead one."""
        tmp = self.root / f".{owner}.{secrets.token_hex(4)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.replace(tmp, self.root / owner)
        self._held[owner] = fd

    def dead(self) -> list[str]:
        """Owners whose process is gone: nobody holds their file's lock."""
        gone: list[str] = []
        for path in self.root.iterdir():
            if path.name.startswith(".") or path.name in self._held:
                continue
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue  # forgotten by another process meanwhile
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # alive
            finally:
                os.close(fd)
            gone.append(path.name)
        return gone

    def forget(self, owner: str) -> None:
        """Remove a dead owner's file (once its leases are released)."""
        with contextlib.suppress(FileNotFoundError):
            (self.root / owner).unlink()

    def close(self) -> None:
        """Drop our own files and locks (a clean stop)."""
        for owner, fd in self._held.items():
            self.forget(owner)
            os.close(fd)
        self._held.clear()
