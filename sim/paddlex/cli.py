"""Command line of the PaddleX simulator: `paddlex --serve --device D --port P --pipeline YAML`.

Mirrors `paddlex --serve`: parse the options (unknown ones are an error, exit 2), load the
config, build the pipeline (a failure logs "Failed to create the pipeline" and exits 1),
pretend to load models for `PADDLEX_SIM_LOAD_SECONDS` (default 2; the port stays closed),
then serve the genuine PaddleX app with PaddleX's own `run_server`.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import sys
import time
from collections.abc import Sequence

_DEVICE = re.compile(r"^(cpu|gpu|npu|xpu|mlu|dcu|gcu|iluvatar_gpu|metax_gpu)(:\d+(,\d+)*)?$")
log = logging.getLogger("sim.paddlex")


def _device(text: str) -> str:
    if not _DEVICE.match(text):
        raise argparse.ArgumentTypeError(f"invalid device {text!r} (e.g. cpu, gpu:0, npu)")
    return text


def _port(text: str) -> int:
    value = int(text)
    if not 0 < value < 65536:
        raise argparse.ArgumentTypeError(f"not a TCP port: {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The subset of the real `paddlex` options the fleet uses; nothing else is accepted."""
    parser = argparse.ArgumentParser(
        prog="paddlex",
        description="PaddleX simulator (paddleocr-fleet): genuine serving app, simulated "
        "pipeline that asks the configured vLLM; no real OCR.",
        allow_abbrev=False,
    )
    parser.add_argument(
        "--serve",
        action="store_true",
        required=True,
        help="serve the pipeline over HTTP (the only mode simulated)",
    )
    parser.add_argument("--pipeline", required=True, help="pipeline config YAML")
    parser.add_argument("--device", type=_device, default=None, help="cpu | gpu[:N] | npu[:N]")
    parser.add_argument("--host", default="0.0.0.0", help="bind address (default 0.0.0.0)")
    parser.add_argument("--port", type=_port, default=8080, help="port (default 8080)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `paddlex` command."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        from paddlex.inference.serving.basic_serving import create_pipeline_app, run_server

        from .app import build_pipeline, load_config
    except ImportError:
        log.error("Failed to load the serving module", exc_info=True)
        return 1
    try:
        config = load_config(args.pipeline)
        pipeline = build_pipeline(config)
    except Exception:
        log.error("Failed to create the pipeline", exc_info=True)
        return 1
    load_seconds = float(os.environ.get("PADDLEX_SIM_LOAD_SECONDS", "2"))
    log.info(
        "device %s: simulating model load for %gs; VLM %s (model %s)",
        args.device,
        load_seconds,
        pipeline.settings.server_url,
        pipeline.settings.model_name,
    )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # uvicorn installs its own later
    time.sleep(max(0.0, load_seconds))
    run_server(create_pipeline_app(pipeline, config), host=args.host, port=args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
