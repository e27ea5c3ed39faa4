"""Bearer tokens for the gateway: where fleetctl finds them and how it explains a refusal.

Document routes take a user or an admin token; ``/upstreams`` and ``/metrics`` an admin token.
A token is never printed: messages that could echo one go through `redact`.

Usage::

    tokens = resolve(args.token, args.admin_token)   # flags, else the environment
    http.get(url + "/upstreams", headers=bearer(tokens.admin))
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

TOKEN_ENV = "PADDLEOCR_FLEET_TOKEN"
ADMIN_TOKEN_ENV = "PADDLEOCR_FLEET_ADMIN_TOKEN"
REFUSED = frozenset({401, 403})
_MASK = "***"


class TokenError(ValueError):
    """A token that cannot go in an ``Authorization`` header (the message never shows it)."""


def check_token(token: str, source: str) -> str:
    """`token` when it can be sent as a bearer token: printable ASCII, no spaces.

    Anything else would make httpx fail with an error message that quotes the header."""
    if not token.isascii() or not token.isprintable() or any(c.isspace() for c in token):
        raise TokenError(
            f"the token from {source} is not a valid bearer token (printable ASCII without spaces)"
        )
    return token


def env_token(name: str) -> str | None:
    """The token in environment variable `name` (unset or blank: None)."""
    return os.environ.get(name, "").strip() or None


@dataclass(frozen=True)
class Tokens:
    """The user token (document routes) and the admin token (``/upstreams``, ``/metrics``).

    Each falls back to the other when only one is known; the gateway accepts an admin token on
    the document routes, and a user token where an admin one is needed earns a clear 403.
    """

    user: str | None = field(default=None, repr=False)
    admin: str | None = field(default=None, repr=False)
    user_from: str = "none"  # where `user` came from: a flag, a variable, or "none"
    admin_from: str = "none"


def resolve(token: str | None = None, admin_token: str | None = None) -> Tokens:
    """Tokens from the flags, else ``PADDLEOCR_FLEET_TOKEN`` / ``PADDLEOCR_FLEET_ADMIN_TOKEN``;
    `TokenError` for one that cannot be sent."""
    user, user_from = _pick((token, "--token"), (env_token(TOKEN_ENV), TOKEN_ENV))
    admin, admin_from = _pick(
        (admin_token, "--admin-token"), (env_token(ADMIN_TOKEN_ENV), ADMIN_TOKEN_ENV)
    )
    return Tokens(
        user=user or admin,
        admin=admin or user,
        user_from=user_from if user else admin_from,
        admin_from=admin_from if admin else user_from,
    )


def _pick(*candidates: tuple[str | None, str]) -> tuple[str | None, str]:
    for value, source in candidates:
        if value and value.strip():
            return check_token(value.strip(), source), source
    return None, "none"


def bearer(token: str | None) -> dict[str, str]:
    """The ``Authorization`` header for `token` (none for None)."""
    return {"Authorization": f"Bearer {token}"} if token else {}


def redact(text: str, secrets: tuple[str, ...]) -> str:
    """`text` with every occurrence of a secret masked (a server may echo what it was sent)."""
    for s in secrets:
        if s:
            text = text.replace(s, _MASK)
    return text


def refusal(status: int, detail: str, *, sent: bool, admin: bool = False) -> str:
    """What to tell the operator when the gateway answered 401/403 to a request."""
    fix = f"set --admin-token or {ADMIN_TOKEN_ENV}" if admin else f"set --token or {TOKEN_ENV}"
    kind = "an admin token" if admin else "a token"
    if not sent:
        head = f"the gateway requires {kind}"
    elif status == 403 and admin:
        head = "the gateway refused the token: it is not an admin token"
    else:
        head = f"the gateway refused the {'admin ' if admin else ''}token"
    return f"{head}: {fix}" + (f" ({detail})" if detail else "")
