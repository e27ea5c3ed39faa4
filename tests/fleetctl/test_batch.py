"""`fleetctl ocr` against the fake gateway on loopback: tree mapping, failures, resume, Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleetctl import batch
from fleetctl.cli import main
from tests.doubles.servers import ServerThread
from tests.fleetctl.conftest import JPEG, PDF, PNG, doc
from tests.fleetctl.fakes import expected_text, fake_gateway

REPO = Path(__file__).resolve().parents[2]


def make_tree(root: Path) -> dict[str, bytes]:
    files = {
        "a.png": doc(PNG, "a"),
        "sub/b.jpg": doc(JPEG, "b"),
        "sub/deeper/c.pdf": doc(PDF, "c"),
        "sub/d.png": doc(PNG, "d"),
        "sub/d.pdf": doc(PDF, "d"),  # same stem as d.png: both keep their extension
        "notes.txt": b"not a document",  # ignored (extension)
        "fake.png": b"this is text, not a PNG",  # right extension, wrong bytes: invalid
        ".hidden.png": doc(PNG, "h"),  # ignored (hidden)
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return files


def run_cli(*args: str) -> int:
    return main(["ocr", *args, "--no-progress"])


def test_tree_mapping_report_and_resume(
    gateway: ServerThread, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, out = tmp_path / "in", tmp_path / "out"
    files = make_tree(src)
    single = tmp_path / "loose" / "single.jpeg"
    single.parent.mkdir()
    single.write_bytes(doc(JPEG, "FAIL400"))
    code = run_cli(str(src), str(single), "--out", str(out), "--gateway", gateway.url)
    assert code == 1  # the 400 and the invalid file failed
    got = sorted(str(p.relative_to(out)) for p in out.rglob("*.md"))
    assert got == ["a.md", "sub/b.md", "sub/d.pdf.md", "sub/d.png.md", "sub/deeper/c.md"]
    c_pdf = files["sub/deeper/c.pdf"]
    assert (out / "sub/deeper/c.md").read_text() == expected_text("c.pdf", c_pdf)
    assert (out / "sub/d.png.md").read_text() == expected_text("d.png", files["sub/d.png"])
    report = [json.loads(x) for x in (out / batch.REPORT_NAME).read_text().splitlines()]
    by_file = {Path(r["file"]).name: r for r in report}
    assert set(by_file) == {"fake.png", "single.jpeg"}
    assert by_file["single.jpeg"]["status"] == 400
    assert by_file["single.jpeg"]["message"] == "cannot decode the document"
    assert by_file["fake.png"]["status"] == "invalid"
    err = capsys.readouterr().err
    assert "5 done (7 pages), 2 failed, 0 skipped" in err and "failures report" in err
    assert len(gateway.app.state.requests) == 6

    # second run: everything fresh is skipped; only the failed one is asked again
    gateway.app.state.requests.clear()
    single.write_bytes(doc(JPEG, "fixed"))
    past = time.time_ns() - 60 * 10**9
    os.utime(out / "a.md", ns=(past, past))  # a.png is now newer than its markdown
    assert run_cli(str(src), str(single), "--out", str(out), "--gateway", gateway.url) == 1
    names = sorted(n for _, n, _ in gateway.app.state.requests)
    assert names == ["a.png", "single.jpeg"]
    assert (out / "single.md").exists()
    assert "2 done" in capsys.readouterr().err

    # nothing left but the invalid file; --force redoes everything
    src.joinpath("fake.png").unlink()
    gateway.app.state.requests.clear()
    assert run_cli(str(src), str(single), "--out", str(out), "--gateway", gateway.url) == 0
    assert gateway.app.state.requests == []
    assert not (out / batch.REPORT_NAME).exists()  # stale report removed
    assert run_cli(str(src), "--out", str(out), "--gateway", gateway.url, "--force") == 0
    assert len(gateway.app.state.requests) == 5
    assert not list(out.rglob("*.tmp"))


def test_503_retry_inside_a_batch(gateway: ServerThread, tmp_path: Path) -> None:
    src = tmp_path / "in"
    src.mkdir()
    for i in range(4):
        (src / f"{i}.png").write_bytes(doc(PNG, "BUSY1" if i == 2 else str(i)))
    assert run_cli(str(src), "--out", str(tmp_path / "o"), "--gateway", gateway.url, "-c", "2") == 0
    assert len(list((tmp_path / "o").glob("*.md"))) == 4
    assert len(gateway.app.state.requests) == 5


def test_unknown_inputs_and_missing_gateway(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("FLEETCTL_GATEWAY", raising=False)
    monkeypatch.delenv("FLEETCTL_OUTPUTS", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no pulumi
    assert run_cli(str(tmp_path), "--out", str(tmp_path / "o")) == 2
    assert "no gateway URL" in capsys.readouterr().err
    with ServerThread(fake_gateway()) as gw:
        assert (
            run_cli(str(tmp_path / "nope"), "--out", str(tmp_path / "o"), "--gateway", gw.url) == 1
        )
    rep = (tmp_path / "o" / batch.REPORT_NAME).read_text()
    assert '"status": "missing"' in rep


def test_atomic_write_leaves_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "x" / "a.md"

    def boom(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(KeyboardInterrupt):
        batch.write_atomic(target, "hello")
    assert list(target.parent.iterdir()) == []


def test_resume_after_sigint(tmp_path: Path) -> None:
    src, out = tmp_path / "in", tmp_path / "out"
    n = 24
    files = {}
    for i in range(n):
        p = src / f"d{i // 6}" / f"{i:02}.png"
        p.parent.mkdir(parents=True, exist_ok=True)
        files[p] = doc(PNG, str(i))
        p.write_bytes(files[p])
    cmd = [
        sys.executable,
        "-m",
        "fleetctl",
        "ocr",
        str(src),
        "--out",
        str(out),
        "-c",
        "2",
        "--no-progress",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with ServerThread(fake_gateway(delay=0.05)) as gw:
        gw.app.state.hold_after = 4  # the first run can finish exactly 4 documents
        proc = subprocess.Popen(
            [*cmd, "--gateway", gw.url],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            # Python keeps SIGINT ignored when started so (a backgrounded test run): undo that
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        # Interrupt at a known point: 4 documents written and both workers (-c 2) waiting on
        # a held request (the 5th and 6th), so no request is on its way to the gateway.
        deadline = time.monotonic() + 60
        while len(list(out.rglob("*.md"))) < 4 or len(gw.app.state.requests) < 6:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.02)
        assert len(gw.app.state.requests) == 6
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 130, err
        assert "interrupted" in err
        first = list(out.rglob("*.md"))
        assert len(first) == 4
        assert not [p for p in out.rglob("*") if p.is_file() and p.suffix != ".md"]
        for md in first:  # every .md is complete and belongs to its input
            rel = md.relative_to(out).with_suffix(".png")
            assert md.read_text() == expected_text(rel.name, files[src / rel])
        gw.app.state.release.set()  # let the abandoned held requests end
    # The second run talks to a fresh gateway: whatever the first one still records is not
    # counted as asked by the second run.
    with ServerThread(fake_gateway()) as gw2:
        second = subprocess.run(
            [*cmd, "--gateway", gw2.url],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert second.returncode == 0, second.stderr
        asked = [name for _, name, _ in gw2.app.state.requests]
    assert len(asked) == n - len(first)
    assert not {p.with_suffix(".png").name for p in first} & set(asked)
    assert len(list(out.rglob("*.md"))) == n
    assert f"{n - len(first)} done" in second.stderr and f"{len(first)} skipped" in second.stderr
