"""bench.instructions: the report of instructions per request (the counting itself runs the
gateway under valgrind for minutes: run by hand, results in docs/benchmarks.md)."""

from __future__ import annotations

from bench.instructions import report


def test_each_variant_is_set_against_the_first():
    result = {
        "names": ["36addbe", "worktree"],
        "cells": {
            "pass tiny": {"36addbe": 775_848.0, "worktree": 800_000.4},
            "ocr 1 MB": {"36addbe": 10_000_000.0, "worktree": 9_900_000.0},
        },
    }
    lines = report(result).splitlines()
    assert lines[0] == "| route, document | `36addbe` | `worktree` | `worktree` / `36addbe` |"
    assert lines[2].split(" | ") == ["| pass tiny", "775,848", "800,000", "1.031 |"]
    assert lines[3].split(" | ") == ["| ocr 1 MB", "10,000,000", "9,900,000", "0.990 |"]
