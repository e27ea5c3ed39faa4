"""Command line of the vLLM simulator: `vllm serve MODEL_PATH [flags]`, exit code 2 on
arguments the real vLLM would refuse too (:mod:`sim.vllm.args`) and on an invalid
`VLLM_SIM_FAULTS` (:mod:`sim.vllm.faults`).

Usage::

    VLLM_SIM_FAULTS='{"garble": 0.25}' python -m sim.vllm serve /models/m --port 8118
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .args import ACCEPTED_FLAGS, UsageError, parse_serve
from .faults import faults_from_env


def build_parser() -> argparse.ArgumentParser:
    """Top-level parser: only the `serve` sub-command exists in the simulator."""
    parser = argparse.ArgumentParser(
        prog="vllm",
        description="vLLM simulator (paddleocr-fleet): no model, no accelerator, no real OCR.",
        allow_abbrev=False,
    )
    parser.add_argument("command", choices=["serve"], help="only `serve` is simulated")
    parser.add_argument("rest", nargs=argparse.REMAINDER, help="MODEL_PATH and flags")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `vllm` command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-h", "--help"):
        build_parser().print_help()
        print("\nflags of `vllm serve MODEL_PATH`: " + " ".join(ACCEPTED_FLAGS))
        return 0
    ns = build_parser().parse_args(argv[:1])
    try:
        args = parse_serve(argv[1:])
        faults = faults_from_env()
    except (UsageError, ValueError) as exc:
        print(f"vllm {ns.command}: error: {exc}", file=sys.stderr)
        return 2
    from .server import serve  # imported late: argument errors need no web stack

    return serve(args, faults)
