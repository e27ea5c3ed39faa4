"""Who may use the gateway: tokens from Pulumi secrets, only their SHA-256 in the gateway config.

A deployment is never open by accident: with no token configured, `check_access` refuses the
stack unless the operator opted in to open access. Plaintext tokens stay in the settings
(`SecretStr`) and go nowhere else; `gateway_auth` gives the gateway's `auth` section.

    >>> from components.settings import load_settings
    >>> settings = load_settings(
    ...     {"tokens": '{"team-a": "0123456789abcdef0123"}'}, secret_keys={"tokens"}
    ... )
    >>> gateway_auth(settings)["tokens"][0]["name"]
    'team-a'
"""

from __future__ import annotations

import hashlib
from typing import Any

from components.settings import ConfigError, FleetSettings

HOW_TO_ADD = (
    "add one with `pulumi config set --secret --path 'tokens.team-a' \"$(openssl rand -hex 32)\"`"
    " (and an admin token for /upstreams and /metrics: --path 'adminTokens.ops'), or opt in to"
    " a gateway anyone who reaches it can use: `pulumi config set allowOpenAccess true`"
)


def sha256_hex(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def gateway_auth(settings: FleetSettings) -> dict[str, Any] | None:
    """The gateway config's `auth` section for the stack's tokens (None: none configured)."""
    if not settings.tokens and not settings.admin_tokens:
        return None
    tokens = []
    for name, entry in sorted(settings.tokens.items()):
        spec: dict[str, Any] = {"name": name, "sha256": sha256_hex(entry.token.get_secret_value())}
        if entry.max_in_flight is not None:
            spec["max_in_flight"] = entry.max_in_flight
        if entry.rate_per_s is not None:
            spec["rate_per_s"] = entry.rate_per_s
        tokens.append(spec)
    admins = [
        {"name": name, "sha256": sha256_hex(token.get_secret_value())}
        for name, token in sorted(settings.admin_tokens.items())
    ]
    return {"tokens": tokens, "admin_tokens": admins}


def check_access(settings: FleetSettings) -> None:
    """Refuse a stack whose gateway would be open, unless `allowOpenAccess` says so."""
    configured = settings.tokens or settings.admin_tokens
    in_gateway = settings.gateway.get("auth", {})
    if configured or in_gateway.get("tokens") or in_gateway.get("admin_tokens"):
        return
    if not settings.allow_open_access:
        raise ConfigError(f"config key 'tokens': no gateway token is configured; {HOW_TO_ADD}")
