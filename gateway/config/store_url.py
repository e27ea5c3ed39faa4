"""The check of ``jobs.store_url`` (a PostgreSQL URL), shared by the gateway's settings and the
stack's ``jobsStoreUrl``: with no import beyond the standard library, so that both can use it.

Usage::

    check_postgres_url("postgresql://fleet:pw@db:5432/jobs")   # ValueError naming the problem
"""

from __future__ import annotations

from urllib.parse import urlsplit


def check_postgres_url(value: str) -> str:
    """``value`` if it is a usable ``postgresql://`` URL; the error never repeats the URL, which
    holds a password."""
    parts = urlsplit(value)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ValueError(
            "must be a postgresql://user:password@host:port/database URL, "
            f"not a {parts.scheme or 'scheme-less'} URL"
        )
    try:
        port = parts.port
    except ValueError:
        raise ValueError("the port of the postgresql:// URL is not a number") from None
    if not parts.hostname and "host=" not in parts.query:
        raise ValueError("the postgresql:// URL names no host")
    if port == 0:
        raise ValueError("the port of the postgresql:// URL is 0")
    if not parts.path.strip("/"):
        raise ValueError("the postgresql:// URL names no database (…/database)")
    return value


def safe_url(url: str) -> str:
    """``host:port/database`` of a store URL, for messages and logs (never its password)."""
    parts = urlsplit(url)
    return f"{parts.hostname or '?'}:{parts.port or 5432}{parts.path}"
