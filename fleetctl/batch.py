"""Batch OCR: many files and folders through the gateway, one markdown file per input.

* Inputs are files and folders (walked recursively). A file is taken when its extension is an
  image or PDF one; its first bytes must then be an image or PDF too, or it fails as invalid.
* ``x/y/scan.pdf`` under the input root ``x`` becomes ``OUT/y/scan.md``. Two inputs that would
  share a name (``a.png`` and ``a.pdf``) keep their extension: ``a.png.md``, ``a.pdf.md``.
* Resumable: an input is skipped when its markdown exists and is not older than it.
* Atomic: markdown is written to a temporary file in the same folder and renamed into place.
* A refused token (401/403) stops the batch: no further document is sent, none of those refused
  counts as failed, and `Summary.refused` says why; a re-run with a valid token continues.

Usage::

    jobs = plan(["scans/"], Path("out"))
    summary = asyncio.run(run(jobs.todo, AsyncClient(url), concurrency=8))
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from fleetctl.client import AsyncClient, AuthError, OcrError, sniff

IMAGE_EXTS = frozenset({".png", ".jpg", ".jpeg", ".jpe", ".bmp", ".tif", ".tiff", ".webp"})
PDF_EXTS = frozenset({".pdf"})
SUPPORTED = IMAGE_EXTS | PDF_EXTS
REPORT_NAME = "fleetctl-failures.jsonl"


class BatchError(Exception):
    """The batch cannot start (e.g. two inputs would write the same markdown file)."""


@dataclass(frozen=True)
class Job:
    src: Path
    out: Path


@dataclass(frozen=True)
class Failure:
    file: str
    status: int | str  # HTTP status, "transport", "invalid", "missing", "write"
    message: str
    code: str | None = None
    request_id: str | None = None
    attempts: int | None = None

    def as_dict(self) -> dict[str, object]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass
class Plan:
    todo: list[Job] = field(default_factory=list)
    uptodate: list[Job] = field(default_factory=list)
    invalid: list[Failure] = field(default_factory=list)


@dataclass
class Summary:
    done: int = 0
    pages: int = 0
    retries: int = 0
    failures: list[Failure] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    interrupted: bool = False
    refused: AuthError | None = None  # the gateway refused the token; the batch stopped
    left: int = 0  # documents not done because of `refused` (a re-run does them)

    def on_retry(self, attempt: int, delay: float, reason: str) -> None:
        """Pass as ``AsyncClient(on_retry=summary.on_retry)`` to count retries."""
        self.retries += 1

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started


def _check(path: Path, explicit: bool) -> Failure | None:
    if path.suffix.lower() not in SUPPORTED:
        return Failure(str(path), "invalid", "unsupported extension") if explicit else None
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError as e:
        return Failure(str(path), "invalid", f"cannot read: {e}")
    kind = sniff(head)
    if kind is None:
        return Failure(str(path), "invalid", "content is not an image or PDF (magic bytes)")
    return None


def discover(
    inputs: Iterable[str | os.PathLike[str]],
) -> tuple[list[tuple[Path, Path]], list[Failure]]:
    """``[(file, path relative to its input root)]`` and the inputs that cannot be OCRed."""
    found: list[tuple[Path, Path]] = []
    bad: list[Failure] = []
    for raw in inputs:
        p = Path(raw)
        if p.is_dir():
            for dirpath, dirnames, filenames in os.walk(p):
                dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
                for name in sorted(filenames):
                    if name.startswith("."):
                        continue
                    f = Path(dirpath) / name
                    if f.suffix.lower() not in SUPPORTED:
                        continue
                    err = _check(f, explicit=False)
                    if err:
                        bad.append(err)
                    else:
                        found.append((f, f.relative_to(p)))
        elif p.is_file():
            err = _check(p, explicit=True)
            if err:
                bad.append(err)
            else:
                found.append((p, Path(p.name)))
        else:
            bad.append(Failure(str(p), "missing", "no such file or folder"))
    return found, bad


def plan(inputs: Iterable[str | os.PathLike[str]], out_root: Path, force: bool = False) -> Plan:
    """Map inputs to output files and split them into to-do and up-to-date."""
    found, bad = discover(inputs)
    by_target: dict[Path, list[tuple[Path, Path]]] = defaultdict(list)
    for src, rel in found:
        by_target[out_root / rel.with_suffix(".md")].append((src, rel))
    jobs: dict[Path, Path] = {}
    for target, members in by_target.items():
        for src, rel in members:
            out = target if len(members) == 1 else out_root / rel.parent / (rel.name + ".md")
            if out in jobs and jobs[out].resolve() != src.resolve():
                raise BatchError(
                    f"{jobs[out]} and {src} would both write {out}; "
                    "give them separate runs or output folders"
                )
            jobs[out] = src
    result = Plan(invalid=bad)
    for out, src in jobs.items():
        job = Job(src, out)
        try:
            fresh = not force and out.stat().st_mtime_ns >= src.stat().st_mtime_ns
        except FileNotFoundError:
            fresh = False
        (result.uptodate if fresh else result.todo).append(job)
    return result


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` via a temporary file and ``os.replace`` (never half-written)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text if text.endswith("\n") else text + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class RateColumn(ProgressColumn):
    """Documents per second."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("-- doc/s" if speed is None else f"{speed:.2f} doc/s", style="cyan")


async def run(
    jobs: list[Job],
    client: AsyncClient,
    concurrency: int = 8,
    summary: Summary | None = None,
    console: Console | None = None,
    progress: bool = True,
) -> Summary:
    """OCR `jobs` with at most `concurrency` requests in flight; fills and returns `summary`.

    Pass your own `summary` to keep the partial counts when the run is cancelled (Ctrl-C).
    """
    summary = summary or Summary()
    queue: asyncio.Queue[Job] = asyncio.Queue()
    for j in jobs:
        queue.put_nowait(j)
    bar = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        RateColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
        disable=not progress,
        transient=False,
    )
    task = bar.add_task("OCR", total=len(jobs))

    def describe() -> str:
        failed = len(summary.failures)
        return "OCR" + (f" [red]{failed} failed[/]" if failed else "")

    async def worker() -> None:
        while True:
            try:
                job = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            if summary.refused is not None:
                summary.left += 1
                continue
            try:
                res = await client.ocr(job.src)
            except AuthError as e:
                summary.refused = summary.refused or e
                summary.left += 1
            except OcrError as e:
                summary.failures.append(
                    Failure(
                        str(job.src),
                        e.status or e.code or "transport",
                        e.message,
                        e.code,
                        e.request_id,
                        e.attempts,
                    )
                )
            except OSError as e:
                summary.failures.append(Failure(str(job.src), "invalid", f"cannot read: {e}"))
            else:
                try:
                    write_atomic(job.out, res.text)
                except OSError as e:
                    summary.failures.append(Failure(str(job.src), "write", str(e)))
                else:
                    summary.done += 1
                    summary.pages += res.pages or 0
            bar.update(task, advance=1, description=describe())

    with bar:
        workers = [asyncio.create_task(worker()) for _ in range(max(1, concurrency))]
        try:
            await asyncio.gather(*workers)
        except asyncio.CancelledError:
            summary.interrupted = True
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            raise
    return summary


def write_report(path: Path, failures: list[Failure]) -> Path | None:
    """Write the failures as JSON lines (file, status, message, ...); remove a stale report
    when there are none. Returns the path written, or None."""
    if not failures:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return None
    lines = "".join(json.dumps(f.as_dict(), ensure_ascii=False) + "\n" for f in failures)
    write_atomic(path, lines)
    return path
