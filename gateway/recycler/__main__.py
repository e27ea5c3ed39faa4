"""`python -m gateway.recycler --config FILE`: the recycler of one host (see the package doc)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path
from types import FrameType

from gateway.errors import ConfigError
from gateway.recycler.config import load_config
from gateway.recycler.engine import Engine
from gateway.recycler.loop import GatewayAdmin, Recycler


class Stopped(Exception):
    """SIGTERM arrived (docker stop)."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway.recycler")
    parser.add_argument("--config", type=Path, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per call, every check
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"recycler: {exc}", file=sys.stderr)
        return 2
    token = None
    if config.gateway.token_file:
        token = Path(config.gateway.token_file).read_text(encoding="utf-8").strip() or None
    recycler = Recycler(
        config, Engine(config.docker_socket), GatewayAdmin(config.gateway.url, token)
    )

    def on_term(signum: int, frame: FrameType | None) -> None:
        raise Stopped

    signal.signal(signal.SIGTERM, on_term)
    try:
        recycler.run()
    except (Stopped, KeyboardInterrupt):
        recycler.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
