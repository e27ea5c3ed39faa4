"""`fleetctl ocr` with long documents: the real gateway's job API (loopback, jobs in a temporary
store) in front of PaddleX doubles; plus the answer classification as functions."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from rich.console import Console

from fleetctl import batch
from fleetctl.cli import main
from fleetctl.client import AsyncClient, OcrError, RetryPolicy
from fleetctl.jobclient import (
    JobPolicy,
    JobStatus,
    JobsUnavailable,
    _read_result,
    _read_submit,
    job_markdown,
    join_pages,
    ocr_job,
)
from gateway.config.settings import PostprocessSettings, parse_settings
from gateway.server.app import create_app
from tests.doubles.paddlex_double import DoubleFleet
from tests.doubles.servers import ServerThread
from tests.gateway.conftest import RunningGateway, gateway_config
from tests.gateway.jobs_helpers import TOKEN, jobs_config, numbered_pdf, sha

REPO = Path(__file__).resolve().parents[2]
# exercises every post-processing rule: an image in its wrapper, "回" noise, blank lines
NOISE = '<div style="text-align: center;"><img src="imgs/a.jpg" alt="" /></div>\n\n\n回回回 end  '
TextOf = Callable[[Path], str]


@pytest.fixture
def start() -> Iterator[Callable[[dict[str, Any]], RunningGateway]]:
    running: list[RunningGateway] = []

    def go(config: dict[str, Any]) -> RunningGateway:
        gw = RunningGateway(create_app(parse_settings(config)))
        running.append(gw)
        return gw

    yield go
    for gw in running:
        gw.stop()


def write_pdf(path: Path, pages: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(numbered_pdf(pages))
    return path


def ocr(*args: str) -> int:
    return main(["ocr", *args, "--no-progress", "--token", TOKEN])


def job_logs(fleet: DoubleFleet) -> list[str]:
    """The logIds of the slices the job runner sent (``job-...``)."""
    ids = [r.body.get("logId") or "" for d in fleet for r in d.layout_requests()]
    return [i for i in ids if i.startswith("job-")]


def stored_jobs(jobs_dir: Path) -> list[tuple[str, str | None]]:
    with sqlite3.connect(jobs_dir / "jobs.sqlite3") as db:
        return list(db.execute("SELECT state, error FROM jobs ORDER BY created"))


def test_job_markdown_equals_ocr_markdown(
    start: Callable[[dict[str, Any]], RunningGateway],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The same document through a job and through /ocr gives the same file. One slice each
    (the gateway's fan-out threshold above the page count): the doubles number the pages of
    each request, so different slicings would show."""
    with DoubleFleet(2, name="double", extra_markdown=NOISE) as fleet:
        gw = start(jobs_config(fleet.urls, tmp_path / "jobs", fanout={"threshold_pages": 16}))
        src = tmp_path / "in"
        write_pdf(src / "long.pdf", 9)
        write_pdf(src / "short.pdf", 3)
        assert ocr(str(src), "--out", str(tmp_path / "a"), "--gateway", gw.url) == 0
        assert "2 done (12 pages, 1 via jobs)" in capsys.readouterr().err
        assert len(set(job_logs(fleet))) == 1  # long.pdf only
        assert (
            ocr(str(src), "--out", str(tmp_path / "b"), "--gateway", gw.url, "--jobs", "never") == 0
        )
        assert len(set(job_logs(fleet))) == 1
    via_job, via_ocr = (tmp_path / d / "long.md" for d in "ab")
    assert via_job.read_bytes() == via_ocr.read_bytes()
    text = via_job.read_text()
    assert "double page 1/9\n\n end\n\ndouble page 2/9" in text and "double page 9/9" in text
    assert "<img" not in text and "回" not in text and "\n\n\n" not in text
    assert (tmp_path / "a" / "short.md").read_bytes() == (tmp_path / "b" / "short.md").read_bytes()


def test_gateway_config_gives_the_gateways_own_postprocess_rules(
    start: Callable[[dict[str, Any]], RunningGateway],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A gateway that keeps image tags: --gateway-config FILE makes the job file match again."""
    rules = {"postprocess": {"strip_images": False}}
    with DoubleFleet(1, name="double", extra_markdown=NOISE) as fleet:
        config = jobs_config(fleet.urls, tmp_path / "jobs", fanout={"threshold_pages": 16}, **rules)
        gw = start(config)
        pdf = write_pdf(tmp_path / "in" / "long.pdf", 9)
        conf = tmp_path / "gateway.json"
        conf.write_text(json.dumps(config))
        base = [str(pdf), "--gateway", gw.url]
        assert ocr(*base, "--out", str(tmp_path / "ocr"), "--jobs", "never") == 0
        assert ocr(*base, "--out", str(tmp_path / "default")) == 0
        assert ocr(*base, "--out", str(tmp_path / "own"), "--gateway-config", str(conf)) == 0
        assert "via jobs" in capsys.readouterr().err
        conf.write_text('{"postprocess": {"strip_images": "sometimes"}}')
        assert ocr(*base, "--out", str(tmp_path / "x"), "--gateway-config", str(conf)) == 2
        assert "postprocess.strip_images" in capsys.readouterr().err
    via_ocr = (tmp_path / "ocr" / "long.md").read_text()
    assert "<img" in via_ocr and (tmp_path / "own" / "long.md").read_text() == via_ocr
    assert "<img" not in (tmp_path / "default" / "long.md").read_text()


def test_progress_reaches_total_pages_and_pages_stay_in_order(
    start: Callable[[dict[str, Any]], RunningGateway], tmp_path: Path
) -> None:
    """10 pages in slices of at most 4 on 2 instances: statuses go up to 10/10, the markdown
    has every slice's pages in order, and the rich display ends at ``job pages 10/10``."""
    with DoubleFleet(2, name="double", per_page_s=0.02) as fleet:
        gw = start(jobs_config(fleet.urls, tmp_path / "jobs"))
        pdf = write_pdf(tmp_path / "ten.pdf", 10)
        seen: list[JobStatus] = []
        policy = JobPolicy(poll_first_s=0.05, poll_max_s=0.1)

        async def direct() -> str:
            async with AsyncClient(gw.url, token=TOKEN, trust_env=False) as c:
                return (await ocr_job(c, pdf, policy, seen.append)).text

        text = asyncio.run(direct())
        assert seen[-1].state == "done"
        assert (seen[-1].total_pages, seen[-1].extracted_pages) == (10, 10)
        done = [s.extracted_pages for s in seen]
        assert done == sorted(done) and {s.total_pages for s in seen} == {10}
        marks = [tuple(map(int, m)) for m in re.findall(r"page (\d+)/(\d+)", text)]
        runs, i = [], 0
        while i < len(marks):  # each slice numbers its pages 1..n, in order
            n = marks[i][1]
            assert marks[i : i + n] == [(k, n) for k in range(1, n + 1)], marks
            runs.append(n)
            i += n
        assert sum(runs) == 10 and len(runs) > 1 and len(set(job_logs(fleet))) == len(runs)

        out = io.StringIO()
        console = Console(file=out, width=120, force_terminal=False)
        job = batch.Job(pdf, tmp_path / "out" / "ten.md")

        async def through_batch() -> batch.Summary:
            async with AsyncClient(gw.url, token=TOKEN, trust_env=False) as c:
                return await batch.run([job], c, 1, console=console, job_policy=policy)

        summary = asyncio.run(through_batch())
    assert summary.done == 1 and summary.via_jobs == 1 and summary.pages == 10
    assert re.search(r"job pages .*10/10", out.getvalue()), out.getvalue()
    assert job.out.read_text() == text + "\n"


def test_failed_page_is_named_in_the_report(
    start: Callable[[dict[str, Any]], RunningGateway],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # page 7 of numbered_pdf is 106 points wide: the doubles render it 212 wide and fail on it
    with DoubleFleet(2, poison_width=212) as fleet:
        gw = start(jobs_config(fleet.urls, tmp_path / "jobs", jobs={"slice_attempts": 1}))
        pdf = write_pdf(tmp_path / "in" / "bad.pdf", 9)
        out = tmp_path / "out"
        assert ocr(str(pdf), "--out", str(out), "--gateway", gw.url) == 1
    (rep,) = [json.loads(x) for x in (out / batch.REPORT_NAME).read_text().splitlines()]
    assert rep["status"] == "job_failed" and rep["job_id"].startswith("job-")
    assert rep["message"].startswith("page 7 failed on every upstream"), rep
    assert "page 7 failed on every upstream" in capsys.readouterr().err
    assert not (out / "bad.md").exists()
    assert stored_jobs(tmp_path / "jobs")[0][0] == "failed"


def test_jobs_off_falls_back_to_ocr_with_one_notice(
    start: Callable[[dict[str, Any]], RunningGateway],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with DoubleFleet(2, name="double") as fleet:
        gw = start(gateway_config(fleet.urls))  # jobs.dir null: the job routes answer 503
        src = tmp_path / "in"
        for name in ("a", "b", "c"):
            write_pdf(src / f"{name}.pdf", 9)
        assert main(["ocr", str(src), "--out", str(tmp_path / "out"), "--gateway", gw.url]) == 0
        assert job_logs(fleet) == []
    err = capsys.readouterr().err
    assert err.count("the gateway runs no jobs") == 1, err
    assert "jobs are not enabled on this gateway" in err and "3 done (27 pages)" in err
    assert len(re.findall(r"double page \d+/\d+", (tmp_path / "out" / "c.md").read_text())) == 9
    assert not (tmp_path / "out" / batch.REPORT_NAME).exists()


def test_submit_retries_429_with_retry_after(
    start: Callable[[dict[str, Any]], RunningGateway], tmp_path: Path
) -> None:
    """A token limited to 1 request/s: the second job's submit gets 429 + Retry-After."""
    auth = {"tokens": [{"name": "team-a", "sha256": sha(TOKEN), "rate_per_s": 1}]}
    with DoubleFleet(2, name="double") as fleet:
        gw = start(jobs_config(fleet.urls, tmp_path / "jobs", auth=auth))
        todo = [
            batch.Job(write_pdf(tmp_path / f"{i}.pdf", 9), tmp_path / "out" / f"{i}.md")
            for i in range(2)
        ]
        summary = batch.Summary()
        reasons: list[str] = []

        def on_retry(attempt: int, delay: float, reason: str) -> None:
            reasons.append(reason)
            summary.on_retry(attempt, delay, reason)

        async def go() -> None:
            async with AsyncClient(gw.url, token=TOKEN, on_retry=on_retry, trust_env=False) as c:
                await batch.run(todo, c, 2, summary, progress=False)

        asyncio.run(go())
    assert summary.failures == [] and summary.done == 2 and summary.via_jobs == 2
    assert any(r.startswith("HTTP 429") for r in reasons), reasons


def test_timeout_cancels_the_job(
    start: Callable[[dict[str, Any]], RunningGateway],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with DoubleFleet(1, per_page_s=2) as fleet:  # a slice of 4 pages takes 8 s
        gw = start(jobs_config(fleet.urls, tmp_path / "jobs"))
        pdf = write_pdf(tmp_path / "slow.pdf", 9)
        out = tmp_path / "out"
        code = ocr(str(pdf), "--out", str(out), "--gateway", gw.url, "--job-timeout", "0.3")
        assert code == 1
        assert stored_jobs(tmp_path / "jobs") == [("failed", "cancelled by the caller")]
    (rep,) = [json.loads(x) for x in (out / batch.REPORT_NAME).read_text().splitlines()]
    assert rep["status"] == "job_timeout" and rep["job_id"].startswith("job-")
    assert "did not finish within 0.3s" in capsys.readouterr().err


def test_ctrl_c_cancels_the_running_job(
    start: Callable[[dict[str, Any]], RunningGateway], tmp_path: Path
) -> None:
    with DoubleFleet(2, per_page_s=1) as fleet:  # 3 slices of 4 pages on 2: at least 8 s
        gw = start(jobs_config(fleet.urls, tmp_path / "jobs"))
        pdf = write_pdf(tmp_path / "long.pdf", 12)
        cmd = [sys.executable, "-m", "fleetctl", "ocr", str(pdf), "--out", str(tmp_path / "out")]
        proc = subprocess.Popen(
            [*cmd, "--gateway", gw.url, "--no-progress"],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO), "PADDLEOCR_FLEET_TOKEN": TOKEN},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            # Python keeps SIGINT ignored when started so (a backgrounded test run): undo that
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        deadline = time.monotonic() + 60
        while not job_logs(fleet):  # a slice is running on an instance
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 130, err
        assert stored_jobs(tmp_path / "jobs") == [("failed", "cancelled by the caller")]
    assert "interrupted" in err and not (tmp_path / "out" / "long.md").exists()


def _answer(status: int, body: Any, **headers: str) -> httpx.Response:
    return httpx.Response(status, json=body, headers=headers)


def test_submit_answers_are_told_apart() -> None:
    envelope = {"code": 503, "msg": "jobs are not enabled on this gateway", "data": None}
    with pytest.raises(JobsUnavailable, match="not enabled"):
        _read_submit(_answer(503, envelope), 1, str)
    with pytest.raises(JobsUnavailable, match="no job routes"):
        _read_submit(_answer(404, {"detail": "Not Found"}), 1, str)
    full = _answer(503, {**envelope, "msg": "the job store is full"}, **{"Retry-After": "60"})
    assert isinstance(_read_submit(full, 1, str), OcrError)  # retried, not a fallback
    proxy = httpx.Response(503, text="<html>Service Unavailable</html>")
    assert isinstance(_read_submit(proxy, 1, str), OcrError)
    wrong = _answer(400, {"code": 400, "msg": "offered models: PaddleOCR-VL-1.5", "data": None})
    assert _read_submit(wrong, 1, str).message == "offered models: PaddleOCR-VL-1.5"
    assert _read_submit(_answer(200, {"code": 0, "msg": "", "data": {"jobId": "j1"}}), 1, str)
    with pytest.raises(OcrError, match="result URL was refused"):
        _read_result(_answer(403, {"code": 403, "msg": "expired", "data": None}), 1, str)


def test_joining_pages_matches_one_concatenated_document() -> None:
    assert join_pages(["# A", "", "b\n\nc", "d"]) == "# A\n\nb\n\nc\n\nd"
    rules = PostprocessSettings()
    assert job_markdown(["x ![i](imgs/i.jpg)", "回回 y  \n\n\n"], rules) == "x\n\n y"
    assert JobPolicy().takes("pdf", 9) and not JobPolicy().takes("pdf", 8)
    assert not JobPolicy().takes("png", 1) and JobPolicy(mode="always").takes("png", 1)
    assert not JobPolicy(mode="never").takes("pdf", 900) and not JobPolicy().takes("pdf", None)
    assert RetryPolicy().delay_for(429, "1", 1) is not None


def test_the_result_url_gets_no_token(gateway: ServerThread) -> None:
    """jsonUrl is a signed URL, perhaps on another host: the bearer token must not go there."""
    gateway.app.state.tokens = {"u-" + "7" * 30}

    def parse(r: httpx.Response, attempt: int, scrub: Callable[[str], str]) -> int:
        return r.status_code

    async def go() -> tuple[int, int]:
        async with AsyncClient(gateway.url, token="u-" + "7" * 30, trust_env=False) as c:
            with_token = await c.call("GET", "/health", parse)
            without = await c.call("GET", gateway.url + "/health?sig=x", parse, auth=False)
            return with_token, without

    assert asyncio.run(go()) == (200, 200)
    assert [a for p, a in gateway.app.state.auth_seen if p == "/health"] == [
        "Bearer u-" + "7" * 30,
        None,
    ]
