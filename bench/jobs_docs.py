"""Documents of the jobs benchmark, and what the fleet's parse log and a job's result say.

Every page of every benchmark PDF can be told apart: page ``i`` of document ``doc`` has a
MediaBox of ``(100 + i) x (1000 + doc)`` points, and the simulated fleet (``bench/fleet.py``)
reports each page rendered at scale 2, like PaddleX: ``width = 2 (100 + i)``, ``height =
2 (1000 + doc)``. So a result page, or an entry of the fleet's parse log, names its page.

Usage::

    pdf = numbered_pdf(doc=7, pages=100)
    problem = check_result(lines, doc=7, pages=100)        # None when whole and in order
    twice = parsed_twice(fleet_log, docs={7, 8})           # {doc: pages parsed more than once}
"""

from __future__ import annotations

import io
from collections import Counter
from typing import Any

import pikepdf

ONE_PAGE_DOC = 9000  # the document id of the one-page (interactive) PDFs


def numbered_pdf(doc: int, pages: int) -> bytes:
    """A PDF of ``pages`` blank pages, page ``i`` being ``(100 + i) x (1000 + doc)`` points.

    >>> page_of(2 * 103, 2 * 1007)
    (7, 3)
    """
    pdf = pikepdf.new()
    for index in range(pages):
        pdf.add_blank_page(page_size=(100 + index, 1000 + doc))
    buf = io.BytesIO()
    pdf.save(buf)
    return buf.getvalue()


Page = tuple[int, int]
"""(document, 0-based page)."""


def page_of(width: int, height: int) -> Page:
    """(document, 0-based page) of a page the fleet rendered ``width`` x ``height``."""
    return height // 2 - 1000, width // 2 - 100


def result_pages(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pages of a job's JSON Lines result, in order."""
    return [page for line in lines for page in line["result"]["layoutParsingResults"]]


def check_result(lines: list[dict[str, Any]], doc: int, pages: int) -> str | None:
    """None when the result holds every page of ``doc`` once, in order; else what is wrong."""
    if not lines or "dataInfo" not in lines[0]["result"]:
        return "no dataInfo on the first line"
    if lines[0]["result"]["dataInfo"].get("numPages") != pages:
        return f"dataInfo.numPages {lines[0]['result']['dataInfo'].get('numPages')} != {pages}"
    got = [
        page_of(p["prunedResult"]["width"], p["prunedResult"]["height"])
        for p in result_pages(lines)
    ]
    want = [(doc, i) for i in range(pages)]
    if got != want:
        wrong = next(i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b)
        return f"{len(got)} pages; position {wrong} is {got[wrong] if wrong < len(got) else '-'}"
    indexes = [p["prunedResult"].get("page_index") for p in result_pages(lines)]
    if indexes != list(range(pages)):
        return "prunedResult.page_index is not the page's position in the document"
    return None


def runs_by_page(log: list[dict[str, Any]], docs: set[int]) -> dict[Page, list[dict[str, Any]]]:
    """Every parse (log entry) of each (document, page) of ``docs``, from the fleet's log."""
    runs: dict[Page, list[dict[str, Any]]] = {}
    for entry in log:
        for width, height in entry["pages"]:
            key = page_of(width, height)
            if key[0] in docs:
                runs.setdefault(key, []).append(entry)
    return runs


def parsed_twice(log: list[dict[str, Any]], docs: set[int]) -> dict[int, int]:
    """Per document of ``docs``: the parses beyond the first, summed over its pages."""
    extra: Counter[int] = Counter()
    for (doc, _), runs in runs_by_page(log, docs).items():
        if len(runs) > 1:
            extra[doc] += len(runs) - 1
    return dict(extra)


def slices_of(log: list[dict[str, Any]], docs: set[int]) -> dict[int, list[int]]:
    """Per document of ``docs``: the size of every parse the fleet ran for it."""
    sizes: dict[int, list[int]] = {}
    for entry in log:
        if not entry["pages"]:
            continue
        doc, _ = page_of(*entry["pages"][0])
        if doc in docs:
            sizes.setdefault(doc, []).append(len(entry["pages"]))
    return sizes


def completion_times(log: list[dict[str, Any]], docs: set[int]) -> list[float]:
    """The time each page of ``docs`` was first parsed to its end, sorted."""
    return sorted(min(e["end"] for e in runs) for runs in runs_by_page(log, docs).values())


def fluid_pages(log: list[dict[str, Any]], docs: set[int], t0: float, t1: float) -> float:
    """Pages of ``docs`` parsed within [t0, t1], each parse counted for the share of its run
    inside the window (a window edge does not catch a whole wave of slices ending at once)."""
    total = 0.0
    for entry in log:
        if not entry["pages"] or page_of(*entry["pages"][0])[0] not in docs:
            continue
        run = entry["end"] - entry["start"]
        inside = min(entry["end"], t1) - max(entry["start"], t0)
        if inside > 0 and run > 0:
            total += len(entry["pages"]) * inside / run
    return total


def busy_timeline(
    log: list[dict[str, Any]], t0: float, t1: float, instances: int, step: float = 0.5
) -> list[float]:
    """The fleet's busy share in each ``step`` from ``t0`` to ``t1`` (every parse counted)."""
    out: list[float] = []
    start = t0
    while start < t1:
        end = start + step
        busy = sum(max(0.0, min(e["end"], end) - max(e["start"], start)) for e in log)
        out.append(round(busy / (step * instances), 3))
        start = end
    return out


def twice_by_first_parse(log: list[dict[str, Any]], docs: set[int], at: float) -> dict[str, Any]:
    """The extra parses of pages of ``docs``, by where the page's first parse was at time
    ``at`` (a kill): running, ended before it (and how long before, at most), or begun after
    it."""
    out: dict[str, Any] = {
        "running": 0,
        "ended_before": 0,
        "begun_after": 0,
        "ended_within_s": None,
    }
    for parses in runs_by_page(log, docs).values():
        if len(parses) < 2:
            continue
        first = min(parses, key=lambda e: e["start"])
        extra = len(parses) - 1
        if first["start"] <= at <= first["end"]:
            out["running"] += extra
        elif first["end"] < at:
            out["ended_before"] += extra
            lead = round(at - first["end"], 3)
            out["ended_within_s"] = max(out["ended_within_s"] or 0.0, lead)
        else:
            out["begun_after"] += extra
    return out
