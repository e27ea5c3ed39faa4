"""What the benchmarks share besides their processes (:mod:`bench.procs`) and tables
(:mod:`bench.report`): the command line, the head of a results file, the progress log, and the
PNG plots' matplotlib set-up.

Usage::

    ap = parser("balancing", __doc__, quick="8 s windows", smoke="seconds")
    args = ap.parse_args(argv)
    prof = PROFILES[profile_name(args, "quick", "smoke")]
    results = {"meta": run_meta(prof.name, command="python -m bench.balancing")}
    plt = pyplot(); fig, ax = plt.subplots(); ...; save_figure(fig, path)
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any


def parser(module: str, doc: str | None, **profiles: str) -> argparse.ArgumentParser:
    """``python -m bench.<module>``'s parser, ``doc`` as its help, and a ``--<name>`` flag for
    each profile besides the default one (``name=help``), at most one of them at a time."""
    ap = argparse.ArgumentParser(
        prog=f"python -m bench.{module}",
        description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if profiles:  # argparse cannot print the usage of an empty group
        group = ap.add_mutually_exclusive_group()
        for name, text in profiles.items():
            group.add_argument(f"--{name}", action="store_true", help=text)
    return ap


def comma_list(
    kind: Callable[[str], Any] = str,
    choices: Iterable[Any] | None = None,
    least: float | None = None,
) -> Callable[[str], list[Any]]:
    """An argparse ``type``: a comma-separated list of ``kind`` (blanks dropped), each one of
    ``choices`` if given and at least ``least``; an error naming the values that are not."""

    def parse(text: str) -> list[Any]:
        try:
            values = [kind(v.strip()) for v in text.split(",") if v.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: not a list of {kind.__name__}") from None
        if not values:
            raise argparse.ArgumentTypeError(f"{text!r}: no values")
        allowed = None if choices is None else list(choices)
        bad = [v for v in values if allowed is not None and v not in allowed]
        bad += [v for v in values if least is not None and v < least]
        if bad:
            want = [f"one of {', '.join(map(str, allowed))}"] if allowed is not None else []
            want += [f"at least {least}"] if least is not None else []
            raise argparse.ArgumentTypeError(f"{bad}: each {' and '.join(want)}")
        return values

    return parse


def profile_name(args: argparse.Namespace, *names: str) -> str:
    """The profile of the flag given (``names``, as :func:`parser` made them), else ``default``."""
    return next((name for name in names if getattr(args, name)), "default")


def path_or_none(value: str | None, default: Path | None) -> Path | None:
    """An output path option: ``default`` when not given, None for ``none``."""
    if value is None:
        return default
    return None if value == "none" else Path(value)


def run_meta(profile: str, **extra: Any) -> dict[str, Any]:
    """The head of a results file's ``meta``: the profile, when, and the machine."""
    return {
        "profile": profile,
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "machine": platform.platform(),
        "python": platform.python_version(),
        **extra,
    }


def write_json(path: Path, data: Any) -> None:
    """A results file: ``data`` as indented JSON in ``path``, its folder made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")


def log(msg: str) -> None:
    """A progress line on stderr, with the time (a long run's output shows where it is)."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def unavailable() -> str:
    """Why no plot can be drawn here, or "" if matplotlib imports."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "matplotlib is not installed (pip install -e '.[bench]')"
    return ""


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend: the plots are files, there is no display."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: Path, dpi: int = 110) -> Path:
    """``fig`` laid out, written to ``path`` (its folder made, no software stamp so that an
    unchanged plot is an unchanged file) and closed."""
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, metadata={"Software": None})
    pyplot().close(fig)
    return path
