"""Session cookies of the status page and the same-origin check of its routes.

A session is ``<token name>.<expiry>.<mac>``; the MAC (HMAC-SHA256) covers the name, the expiry
and the SHA-256 of the admin token it was opened with, under a key only the gateway's container
holds (a random file created once, beside the local admin token or in the temporary folder,
shared by the worker processes). So a session ends when it expires or when its token leaves the
config, and neither the config's digests nor the stack's state are enough to forge one.

Usage::

    keys = SessionKeys(settings.auth)
    cookie = keys.issue("ops", digest)                     # after the admin token was checked
    name = keys.verify(cookie, {"ops": digest})            # None: no valid session
    same_origin(request)                                   # False: refuse
"""

from __future__ import annotations

import hashlib
import hmac
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from starlette.requests import Request

from gateway.access.local_token import local_token_digest
from gateway.config.settings import AuthSettings

COOKIE = "fleet_status"
LIFETIME_S = 8 * 3600
COOKIE_PATH = "/status"


def key_path(auth: AuthSettings) -> Path:
    """Where the session key lives: beside the local token file, else in the temp folder."""
    if auth.local_token_file:
        return Path(auth.local_token_file).with_name("status-session.key")
    return Path(tempfile.gettempdir()) / f"paddleocr-fleet-{os.getuid()}" / "status-session.key"


class SessionKeys:
    """Issues and checks session cookies (module doc)."""

    def __init__(self, auth: AuthSettings, clock: Callable[[], float] = time.time) -> None:
        self._key = local_token_digest(key_path(auth))
        self._clock = clock

    def _mac(self, name: str, expiry: int, digest: bytes) -> str:
        message = f"{name}.{expiry}.".encode() + digest
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def issue(self, name: str, digest: bytes) -> str:
        expiry = int(self._clock()) + LIFETIME_S
        return f"{name}.{expiry}.{self._mac(name, expiry, digest)}"

    def verify(self, cookie: str | None, digests: dict[str, bytes]) -> str | None:
        """The admin name of a valid, unexpired session cookie whose token is still
        configured (``digests``: admin name -> SHA-256), else None."""
        if not cookie:
            return None
        parts = cookie.rsplit(".", 2)
        if len(parts) != 3 or not parts[1].isdigit():
            return None
        name, expiry_text, mac = parts
        expiry = int(expiry_text)
        digest = digests.get(name)
        if digest is None or expiry < self._clock():
            return None
        if not hmac.compare_digest(self._mac(name, expiry, digest), mac):
            return None
        return name


def same_origin(request: Request) -> bool:
    """Whether a request comes from the gateway's own pages (or from no page at all, like a
    command-line client): a browser names a cross-site request in ``Sec-Fetch-Site`` and, for
    a POST, in ``Origin``; either refuses it."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:  # every current browser sends it, and it cannot be set by a page
        return site in ("same-origin", "none")
    origin = request.headers.get("origin")
    if origin is None:
        return True  # no browser page sent it
    host = request.headers.get("host", "")
    return origin in (f"http://{host}", f"https://{host}")
