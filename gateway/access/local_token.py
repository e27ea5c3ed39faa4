"""The gateway's local admin token: a credential that only those who can enter its container have.

The stack drains and undrains a card's instances (components/rollout.py) by calling the admin
routes through `docker exec` into the gateway container. Rather than copy an operator's admin
token into the stack's commands (and so into its state and process lists), the gateway keeps a
random token of its own in a root-only file (``auth.local_token_file``; the stack puts it in the
jobs folder that every gateway container of the host mounts, so a gateway and the one it hands
its port to accept the same token). Whoever can read that file can already do anything to the
gateway.

    digest = local_token_digest(Path("/var/lib/paddleocr-fleet/jobs/admin.token"))
"""

from __future__ import annotations

import hashlib
import os
import secrets
import time
from pathlib import Path

LOCAL_PRINCIPAL = "local"
"""The name a call with the local token is logged and counted under."""


def local_token_digest(path: Path) -> bytes:
    """SHA-256 of the token kept at `path`, created (mode 0600) if it is missing or empty.

    Several worker processes may start at once: the first to create the file writes it, the
    others read what it wrote; a process started again later keeps the token already there.
    """
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    token = secrets.token_hex(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        existing = _read(path)
        if existing:
            return hashlib.sha256(existing.encode()).digest()
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC, 0o600)  # an empty leftover
    with os.fdopen(fd, "w") as file:
        file.write(token)
    return hashlib.sha256(token.encode()).digest()


def _read(path: Path) -> str:
    """The token in the file, waiting briefly for a writer that has created it but not written."""
    for _ in range(50):
        text = path.read_text().strip()
        if text:
            return text
        time.sleep(0.01)
    return path.read_text().strip()
