"""Run the gateway: ``python -m gateway --config PATH [--host 0.0.0.0] [--port 9101]``.

The config path may also come from the ``GATEWAY_CONFIG`` environment variable. A bad config is
a startup error (exit status 2) whose message names the key.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

import uvicorn

from gateway.app import create_app
from gateway.connections import uvicorn_options
from gateway.settings import ConfigError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway", description=__doc__)
    parser.add_argument(
        "--config",
        default=os.environ.get("GATEWAY_CONFIG"),
        help="config.json path (default: $GATEWAY_CONFIG)",
    )
    parser.add_argument("--host", default=os.environ.get("GATEWAY_HOST", "0.0.0.0"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("GATEWAY_PORT", "9101")))
    parser.add_argument("--log-level", default=os.environ.get("GATEWAY_LOG_LEVEL", "info"))
    parser.add_argument("--no-access-log", action="store_true", help="disable the access log")
    args = parser.parse_args(argv)
    if not args.config:
        parser.error("--config PATH (or GATEWAY_CONFIG) is required")
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for noisy in ("httpx", "httpcore"):  # httpx logs every upstream call at INFO
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # the gateway's own access log (gateway.middleware) names the caller's token
    logging.getLogger("gateway.access").disabled = args.no_access_log
    try:
        app = create_app(args.config)
    except ConfigError as exc:
        print(f"gateway: invalid config: {exc}", file=sys.stderr)
        return 2
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level.lower(),
        access_log=False,
        **uvicorn_options(app.state.runtime),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
