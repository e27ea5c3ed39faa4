"""paddleocr-fleet OCR gateway: one HTTP front door for every PaddleX instance.

Usage::

    python -m gateway --config /etc/paddleocr-fleet/gateway.json --port 9101

    from gateway import create_app, load_settings
    app = create_app(load_settings("config.json"))

The names below are imported on first use, so that a PDF worker process
(``python -m gateway.inputs.workers``) does not import the web application.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "create_app": "gateway.server.app",
    "POLICY_NAMES": "gateway.config.settings",
    "ConfigError": "gateway.errors",
    "Settings": "gateway.config.settings",
    "load_settings": "gateway.config.settings",
    "parse_settings": "gateway.config.settings",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'gateway' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
