"""Run the gateway: ``python -m gateway --config PATH [--host 0.0.0.0] [--port 9101]
[--workers N] [--handover PATH] [--serving-file PATH]``.

The config path may also come from the ``GATEWAY_CONFIG`` environment variable. A bad config is
a startup error (exit status 2) whose message names the key. ``--workers`` (or
``GATEWAY_WORKERS``) is the number of worker processes, by default one per core this process
may run on; with one, the gateway is a single uvicorn process, with more a supervisor forks
them and they share the per-upstream occupancy (:mod:`gateway.server.supervisor`). ``--handover``
(or ``GATEWAY_HANDOVER``) is a unix socket path where a gateway replacing this one on the same
port takes over its listening sockets, so the port never refuses a connection
(:mod:`gateway.server.listeners`); ``--serving-file`` (or ``GATEWAY_SERVING_FILE``) is written
once this process serves, for the deployment's readiness check.
"""

from __future__ import annotations

import argparse
import os
import sys

from gateway.config.settings import load_settings
from gateway.errors import ConfigError
from gateway.observability.logs import configure_logging
from gateway.server.app import create_app
from gateway.server.connections import uvicorn_options
from gateway.server.hot_path import GatewayApp
from gateway.server.memory import keep_large_buffers
from gateway.server.serving import Handover, serve_on_port
from gateway.server.supervisor import Supervisor, SupervisorOptions

MAX_WORKERS = 256


def default_workers() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def parse_workers(text: str) -> int:
    """``--workers`` / ``GATEWAY_WORKERS``: a whole number from 1 to MAX_WORKERS."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_WORKERS:
        raise argparse.ArgumentTypeError(
            f"must be a whole number from 1 to {MAX_WORKERS}, got {text!r}"
        )
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway", description=__doc__)
    parser.add_argument(
        "--config",
        default=os.environ.get("GATEWAY_CONFIG"),
        help="config.json path (default: $GATEWAY_CONFIG)",
    )
    parser.add_argument("--host", default=os.environ.get("GATEWAY_HOST", "0.0.0.0"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("GATEWAY_PORT", "9101")))
    parser.add_argument(
        "--workers",
        type=parse_workers,
        default=None,
        help="worker processes (default: $GATEWAY_WORKERS, else one per core: "
        f"{default_workers()} here)",
    )
    parser.add_argument(
        "--handover",
        default=os.environ.get("GATEWAY_HANDOVER") or None,
        help="unix socket path where the listening sockets pass from one gateway to the next "
        "(default: $GATEWAY_HANDOVER; none: no handover)",
    )
    parser.add_argument(
        "--serving-file",
        default=os.environ.get("GATEWAY_SERVING_FILE") or None,
        help="a file written once this process serves and removed when it stops (what the "
        "deployment's readiness check reads; default: $GATEWAY_SERVING_FILE; none: none)",
    )
    parser.add_argument("--log-level", default=os.environ.get("GATEWAY_LOG_LEVEL", "info"))
    parser.add_argument("--no-access-log", action="store_true", help="disable the access log")
    args = parser.parse_args(argv)
    if not args.config:
        parser.error("--config PATH (or GATEWAY_CONFIG) is required")
    workers = args.workers
    if workers is None:
        env = os.environ.get("GATEWAY_WORKERS")
        try:
            workers = parse_workers(env) if env else default_workers()
        except argparse.ArgumentTypeError as exc:
            parser.error(f"GATEWAY_WORKERS {exc}")
    configure_logging(args.log_level, access_log=not args.no_access_log)
    keep_large_buffers()
    if workers > 1:
        try:
            load_settings(args.config)  # refuse a bad config before forking anything
        except ConfigError as exc:
            print(f"gateway: invalid config: {exc}", file=sys.stderr)
            return 2
        options = SupervisorOptions(
            config_path=args.config,
            host=args.host,
            port=args.port,
            workers=workers,
            log_level=args.log_level,
            handover=args.handover,
            serving_file=args.serving_file,
        )
        return Supervisor(options).run()
    try:
        app = create_app(args.config)
    except ConfigError as exc:
        print(f"gateway: invalid config: {exc}", file=sys.stderr)
        return 2
    return serve_one(app, args)


def serve_one(app: GatewayApp, args: argparse.Namespace) -> int:
    """The gateway as one uvicorn process (:func:`gateway.serving.serve_on_port`)."""
    where = Handover(args.host, args.port, args.handover, args.serving_file)
    return serve_on_port(app, where, args.log_level, access_log=False, **uvicorn_options(app))


if __name__ == "__main__":
    sys.exit(main())
