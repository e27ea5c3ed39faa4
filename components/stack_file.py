"""A stack's config file, `Pulumi.<stack>.yaml`, read without Pulumi: what the plan CLI
(`python -m components.plan --stack S`) and the preflight (`components.preflight`) plan from.

Usage::

    values = stack_config(Path("Pulumi.demo.yaml"))   # {"cards": "1", "accelerator": "sim"}
    plan = build_plan(load_settings(values))
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from components.settings import SECRET_KEYS

PROJECT = "paddleocr-fleet"
SECRET_PLACEHOLDER = "[secret]"


def stack_config(path: Path) -> dict[str, str]:
    """This project's values from a `Pulumi.<stack>.yaml`, keys without the project prefix.

    A secret (`{secure: ciphertext}`) only Pulumi can decrypt: the credentials (`tokens`,
    `adminTokens`), which the plan does not need, are left out, and any other secret reads as
    the text `[secret]`, so that the value keeps its shape (a secret build argument of a host).
    """
    document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    values: dict[str, str] = {}
    for key, value in (document.get("config") or {}).items():
        if not key.startswith(f"{PROJECT}:"):
            continue
        name = key.split(":", 1)[1]
        if name in SECRET_KEYS:
            continue
        value = _without_secrets(value)
        values[name] = value if isinstance(value, str) else json.dumps(value)
    return values


def _without_secrets(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"secure"} and isinstance(value["secure"], str):
            return SECRET_PLACEHOLDER
        return {k: _without_secrets(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_secrets(v) for v in value]
    return value
