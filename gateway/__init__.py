"""paddleocr-fleet OCR gateway: one HTTP front door for every PaddleX instance.

Usage::

    python -m gateway --config /etc/paddleocr-fleet/gateway.json --port 9101

    from gateway import create_app, load_settings
    app = create_app(load_settings("config.json"))
"""

from gateway.app import create_app
from gateway.settings import POLICY_NAMES, ConfigError, Settings, load_settings, parse_settings

__all__ = [
    "POLICY_NAMES",
    "ConfigError",
    "Settings",
    "create_app",
    "load_settings",
    "parse_settings",
]
