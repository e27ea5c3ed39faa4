"""The rollout benchmark's figures and table from known answers and samples (no stack): what
`summarize` makes of them, the ratio against all at once, a missed target in bold, the docs
markers, and the command line refusing what it cannot run."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.rollout.__main__ import parse
from bench.rollout.load import Answer, longest_gap, summarize
from bench.rollout.report import BEGIN, END, build_report, plot_capacity, update_docs


def _answers() -> list[Answer]:
    ok = [Answer(t * 0.5, 0.1, 200) for t in range(40)]  # 0-20 s, done 0.1 s later
    return [*ok, Answer(21.0, 30.0, 200), Answer(22.0, 0.0, 0, "ConnectError: refused")]


def test_summarize_splits_before_and_during_and_finds_the_gap() -> None:
    samples = [(0.0, 4, 0, 4), (6.0, 2, 2, 4), (12.0, 4, 0, 4), (30.0, 0, 0, 4)]
    s = summarize(_answers(), samples, (5.0, 15.0))
    assert s["requests"] == 42 and s["failed"] == 1
    assert s["failures"] == {"0 ConnectError: refused": 1}
    assert s["capacity_floor"] == 2 and s["capacity_total"] == 4  # the 0 at 30 s is after
    assert s["p99_before_s"] == pytest.approx(0.1)
    assert longest_gap(_answers()) == pytest.approx(51.0 - 19.6)


def _record(cards: int, mode: str, took: float, floor: int) -> dict:
    return {
        "cards": cards, "scenario": "a", "mode": mode, "duration_s": took, "per_card": 2,
        "target_floor": (cards - 1) * 2 if mode == "rolling" else 0, "requests": 100,
        "failed": 0, "failures": {}, "capacity_total": cards * 2, "capacity_floor": floor,
        "p99_before_s": 0.05, "p99_during_s": 0.5, "longest_gap_s": 1.5,
        "capacity": [(-1.0, cards * 2), (2.0, floor), (took, cards * 2)],
    }  # fmt: skip


def _results() -> dict:
    meta = {
        "command": "python -m bench.rollout", "date": "2026-12-04", "machine": "2 cores",
        "vllm_per_card": 1, "paddlex_per_card": 2, "vllm_load_s": 60.0, "clients": 8,
        "keep_alive": 4, "warmup_s": 15.0, "wall_s": 600.0, "note": "Shared.",
    }  # fmt: skip
    records = [_record(2, "rolling", 150.0, 1), _record(2, "all-at-once", 75.0, 0)]
    return {"meta": meta, "records": records, "errors": []}


def test_the_table_gives_the_ratio_and_marks_a_missed_floor(tmp_path: Path) -> None:
    (table,) = build_report(_results()).tables
    rolling, at_once = table.rows
    assert rolling[-1] == "150 s / 75 s = 2.00"
    assert rolling[5] == "**1 of 4 (≥ 2)**"  # below the target: bold
    assert at_once[5] == "0 of 4" and at_once[-1] == ""
    docs = tmp_path / "b.md"
    docs.write_text(f"x\n{BEGIN}\nold\n{END}\ny\n")
    update_docs(docs, _results())
    assert "| 2 | vLLM flag (`maxNumBatchedTokens`) | rolling | 100 | 0 |" in docs.read_text()
    assert "old" not in docs.read_text()
    with pytest.raises(ValueError, match="markers"):
        update_docs(_plain(tmp_path), _results())
    png = plot_capacity(_results(), tmp_path / "c.png")
    assert png.read_bytes()[:4] == b"\x89PNG"


def _plain(tmp_path: Path) -> Path:
    path = tmp_path / "plain.md"
    path.write_text("# no markers\n")
    return path


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--cards", "1"], "[1]: each at least 2"), (["--scenarios", "a,x"], "['x']: each one of a"),
     (["--clients", "0"], "at least 1")],
)  # fmt: skip
def test_the_command_line_refuses_what_it_cannot_run(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse(argv)
    assert message in capsys.readouterr().err
