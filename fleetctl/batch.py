"""Batch OCR: many files and folders through the gateway, one markdown file per input.

* Inputs are files and folders (walked recursively). A file is taken when its extension is an
  image or PDF one; its first bytes must then be an image or PDF too, or it fails as invalid.
* ``x/y/scan.pdf`` under the input root ``x`` becomes ``OUT/y/scan.md``. Two inputs that would
  share a name (``a.png`` and ``a.pdf``) keep their extension: ``a.png.md``, ``a.pdf.md``.
* Resumable: an input is skipped when its markdown exists and is not older than it.
* Atomic: markdown is written to a temporary file in the same folder and renamed into place.
* A refused token (401/403) stops the batch: no further document is sent, none of those refused
  counts as failed, and `Summary.refused` says why; a re-run with a valid token continues.
* Long documents (`JobPolicy`: PDFs over 8 pages by default) go through the gateway's job API
  (:mod:`fleetctl.jobclient`) with a progress bar of their pages; the rest through ``/ocr``. A
  gateway without jobs gets them through ``/ocr`` too, after a one-line notice.

Usage::

    work = plan(["scans/"], Path("out"))
    summary = asyncio.run(run(work.todo, AsyncClient(url), concurrency=8))
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from fleetctl.client import AsyncClient, AuthError, OcrError, OcrResult, sniff
from fleetctl.jobclient import JobPolicy, JobResult, JobStatus, JobsUnavailable, ocr_job, wants_job

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
    # HTTP status, "transport", "invalid", "missing", "write", "job_failed", "job_timeout"
    status: int | str
    message: str
    code: str | None = None
    request_id: str | None = None
    attempts: int | None = None
    job_id: str | None = None

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
    via_jobs: int = 0  # documents done through the job API
    jobs_off: str | None = None  # why the gateway's jobs are not used (then /ocr serves all)

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
    """Documents (or, for tasks with ``unit="page"``, pages) per second."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        unit = task.fields.get("unit", "doc")
        return Text(f"-- {unit}/s" if speed is None else f"{speed:.2f} {unit}/s", style="cyan")


class JobBars:
    """The progress rows of the documents going through jobs: one per document (its pages;
    removed when it ends) and ``job pages``, all their pages together (a failed document's
    pages leave it again)."""

    def __init__(self, bar: Progress) -> None:
        self.bar = bar
        self.pages = bar.add_task("job pages", total=0, visible=False, unit="page")
        self._active: dict[TaskID, tuple[int, int]] = {}  # row: (total, extracted) pages
        self._done = (0, 0)

    def follow(self, name: str) -> tuple[TaskID, Callable[[JobStatus], None]]:
        """A row for document `name` and the ``on_status`` callback that moves it."""
        short = name if len(name) <= 40 else name[:19] + "…" + name[-20:]
        row = self.bar.add_task(f"  {escape(short)}", total=None, unit="page")
        self._active[row] = (0, 0)

        def on_status(st: JobStatus) -> None:
            self.bar.update(row, total=st.total_pages, completed=st.extracted_pages)
            self._active[row] = (st.total_pages or 0, st.extracted_pages)
            self._show()

        return row, on_status

    def end(self, row: TaskID, ok: bool) -> None:
        """Remove the document's row; its pages stay in ``job pages`` when it is `ok`."""
        total, _ = self._active.pop(row)
        if ok:
            self._done = (self._done[0] + total, self._done[1] + total)
        self.bar.remove_task(row)
        self._show()

    def _show(self) -> None:
        total = self._done[0] + sum(t for t, _ in self._active.values())
        extracted = self._done[1] + sum(e for _, e in self._active.values())
        self.bar.update(self.pages, total=total, completed=extracted, visible=total > 0)


async def run(
    jobs: list[Job],
    client: AsyncClient,
    concurrency: int = 8,
    summary: Summary | None = None,
    console: Console | None = None,
    progress: bool = True,
    job_policy: JobPolicy | None = None,
) -> Summary:
    """OCR `jobs` with at most `concurrency` documents in flight; fills and returns `summary`.

    `job_policy` (default `JobPolicy()`) picks the documents that go through the job API.
    Pass your own `summary` to keep the partial counts when the run is cancelled (Ctrl-C).
    """
    summary = summary or Summary()
    policy = job_policy or JobPolicy()
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
    job_bars = JobBars(bar)

    def describe() -> str:
        failed = len(summary.failures)
        return "OCR" + (f" [red]{failed} failed[/]" if failed else "")

    async def through_job(job: Job) -> JobResult | None:
        """The document through a job; None when the gateway has no jobs (then /ocr)."""
        row, on_status = job_bars.follow(job.src.name)
        ok = False
        try:
            res = await ocr_job(client, job.src, policy, on_status)
            ok = True
            return res
        except JobsUnavailable as e:
            if summary.jobs_off is None:
                summary.jobs_off = f"HTTP {e.status}: {e.message}"
                bar.console.print(
                    f"[yellow]the gateway runs no jobs ({escape(summary.jobs_off)}); "
                    "long documents go through /ocr[/]"
                )
            return None
        finally:
            job_bars.end(row, ok)

    async def ocr_one(job: Job) -> OcrResult | JobResult:
        if summary.jobs_off is None and await wants_job(policy, job.src):
            res = await through_job(job)
            if res is not None:
                summary.via_jobs += 1
                return res
        return await client.ocr(job.src)

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
                res = await ocr_one(job)
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
                        e.job_id,
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
            # gather has cancelled the workers; wait for them (a job's DELETE included)
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
