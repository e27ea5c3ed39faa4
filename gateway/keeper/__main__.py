"""Run a slice keeper: ``python -m gateway.keeper (--config PATH | --upstreams URL[,URL...])
[--host 0.0.0.0] [--port 9102] [--keep-s 600] [--max-mb 512] [--handover PATH]
[--serving-file PATH]``.

The PaddleX instances the keeper may call are the ``upstreams`` of ``--config`` (a JSON file
in the gateway config's format, read again when it changes: the Pulumi program installs it),
or ``--upstreams`` (or ``KEEPER_UPSTREAMS``), comma-separated; it forwards to no other address.
A bad argument or file is a usage error (exit 2) that names it.

``--handover`` and ``--serving-file`` work as the gateway's (:mod:`gateway.server.serving`): a
keeper replacing another on the same port takes over its listening socket, so the gateway's
slice calls never meet a closed port, and the old keeper finishes the calls it holds.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError

from gateway.config.settings import UpstreamSpec
from gateway.keeper.server import KeeperApp, KeeperConfig, Upstreams
from gateway.observability.logs import configure_logging
from gateway.server.serving import Handover, serve_on_port

DEFAULT_PORT = 9102


def parse_upstreams(text: str) -> tuple[str, ...]:
    """``--upstreams``: comma-separated http(s) URLs, at least one."""
    urls = [part.strip() for part in text.split(",") if part.strip()]
    if not urls:
        raise argparse.ArgumentTypeError("needs at least one instance URL")
    try:
        return tuple(UpstreamSpec(url=url).url for url in urls)
    except ValidationError as exc:
        message = exc.errors()[0]["msg"].removeprefix("Value error, ")
        raise argparse.ArgumentTypeError(message) from None


def positive(kind: Callable[[str], float]) -> Callable[[str], float]:
    """An argparse type: a number above zero, else a usage error naming it."""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            value = 0
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
        return value

    return parse


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway.keeper", description=__doc__)
    parser.add_argument(
        "--config", type=Path, default=None, help="a JSON file with the 'upstreams' list"
    )
    parser.add_argument(
        "--upstreams",
        type=parse_upstreams,
        default=os.environ.get("KEEPER_UPSTREAMS"),
        help="the PaddleX instances, comma-separated (default: $KEEPER_UPSTREAMS)",
    )
    parser.add_argument("--host", default=os.environ.get("KEEPER_HOST", "0.0.0.0"))
    parser.add_argument(
        "--port", type=int, default=int(os.environ.get("KEEPER_PORT", DEFAULT_PORT))
    )
    parser.add_argument("--keep-s", type=positive(float), default=600.0)
    parser.add_argument("--max-mb", type=positive(int), default=512)
    parser.add_argument(
        "--handover",
        default=os.environ.get("KEEPER_HANDOVER") or None,
        help="unix socket path where the listening socket passes to the next keeper",
    )
    parser.add_argument(
        "--serving-file",
        default=os.environ.get("KEEPER_SERVING_FILE") or None,
        help="a file written once this process serves (the deployment's readiness check)",
    )
    parser.add_argument("--log-level", default=os.environ.get("KEEPER_LOG_LEVEL", "info"))
    args = parser.parse_args(argv)
    if args.config is not None:
        try:
            upstreams = Upstreams(path=args.config)
        except (OSError, ValueError) as exc:
            parser.error(f"--config: {exc}")
    elif args.upstreams:
        urls = args.upstreams
        if isinstance(urls, str):
            try:
                urls = parse_upstreams(urls)
            except argparse.ArgumentTypeError as exc:
                parser.error(f"KEEPER_UPSTREAMS {exc}")
        upstreams = Upstreams(urls)
    else:
        parser.error("--config PATH or --upstreams URL[,URL...] (or KEEPER_UPSTREAMS) is required")
    configure_logging(args.log_level, access_log=False)
    config = KeeperConfig(upstreams=upstreams, keep_s=args.keep_s, max_bytes=args.max_mb * 1024**2)
    where = Handover(args.host, args.port, args.handover, args.serving_file)
    return serve_on_port(
        KeeperApp(config),
        where,
        args.log_level,
        http="httptools",
        loop="uvloop",
        log_config=None,
        access_log=False,
        timeout_keep_alive=30,
    )


if __name__ == "__main__":
    raise SystemExit(main())
