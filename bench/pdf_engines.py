"""CPU and memory of the gateway's PDF work with pikepdf (qpdf) and pypdfium2 (PDFium).

    python -m bench.pdf_engines                     # 100- and 500-page scans, both engines
    python -m bench.pdf_engines --pages 100 --repeat 3

The gateway opens every PDF it is sent to count its pages and check each page's size (the
inspection), and cuts long ones into slices of consecutive pages (the fan-out). Both run in a
worker process, so what one costs is what a fresh process spends: each measurement is one
child interpreter (``python -m bench.pdf_engines --child``) that imports the engine, reads the
file, then does the work; the table shows that work's CPU (user + system), its wall time and
how far the child's peak RSS rose above its RSS before the work (the file already read; the
peak is reset through ``/proc/self/clear_refs``). The documents are scan-like: one JPEG image
per page (PIL's PDF writer), about 140 KB a page; each also without its cross-reference table
(``no xref``), which both engines must rebuild by scanning the whole file.
"""

from __future__ import annotations

import argparse
import io
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.report import Table

SLICE_PAGES = 10  # pages per slice of the fan-out measurement


def scan_pdf(pages: int) -> bytes:
    """A PDF of ``pages`` A4 pages at 150 dpi, each a JPEG of ruled 'text' lines."""
    from PIL import Image, ImageDraw

    frames = []
    for index in range(pages):
        page = Image.new("L", (1240, 1754), 255)
        draw = ImageDraw.Draw(page)
        for line in range(60):
            y = 100 + line * 26
            draw.rectangle((120, y, 120 + (index * 37 + line * 53) % 900 + 100, y + 12), fill=40)
        frames.append(page)
    buf = io.BytesIO()
    frames[0].save(buf, format="PDF", save_all=True, append_images=frames[1:], resolution=150)
    return buf.getvalue()


def without_xref(data: bytes) -> bytes:
    """``data`` without its cross-reference table and ``startxref`` (the trailer kept)."""
    start, trailer = data.rindex(b"\nxref\n") + 1, data.rindex(b"trailer")
    return data[:start] + data[trailer : data.rindex(b"startxref")]


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _inspect_pikepdf(data: bytes) -> int:
    import pikepdf

    with pikepdf.open(io.BytesIO(data)) as pdf:
        for page in pdf.pages:
            _ = page.mediabox
        return len(pdf.pages)


def _inspect_pdfium(data: bytes) -> int:
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument(data)
    try:
        for index in range(len(doc)):
            doc.get_page_size(index)
        return len(doc)
    finally:
        doc.close()


def _slice_pikepdf(data: bytes) -> int:
    import pikepdf

    total = 0
    with pikepdf.open(io.BytesIO(data)) as source:
        for first in range(0, len(source.pages), SLICE_PAGES):
            with pikepdf.new() as part:
                for page in source.pages[first : first + SLICE_PAGES]:
                    part.pages.append(page)
                buf = io.BytesIO()
                part.save(buf)
                total += len(buf.getvalue())
    return total


def _slice_pdfium(data: bytes) -> int:
    import pypdfium2 as pdfium

    total = 0
    source = pdfium.PdfDocument(data)
    try:
        for first in range(0, len(source), SLICE_PAGES):
            part = pdfium.PdfDocument.new()
            count = min(SLICE_PAGES, len(source) - first)
            part.import_pages(source, list(range(first, first + count)))
            buf = io.BytesIO()
            part.save(buf)
            part.close()
            total += len(buf.getvalue())
    finally:
        source.close()
    return total


WORK = {
    ("pikepdf", "inspect"): _inspect_pikepdf,
    ("pypdfium2", "inspect"): _inspect_pdfium,
    ("pikepdf", "slice"): _slice_pikepdf,
    ("pypdfium2", "slice"): _slice_pdfium,
}


def _child(engine: str, op: str, path: str) -> None:
    """Run one measurement in this process and print it as JSON."""
    __import__("pikepdf" if engine == "pikepdf" else "pypdfium2")
    data = Path(path).read_bytes()
    Path("/proc/self/clear_refs").write_text("5")  # the peak RSS starts again from here
    base_rss = _status_kb("VmRSS")
    before, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    result = WORK[(engine, op)](data)
    after, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - wall
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(
        json.dumps(
            {
                "cpu_ms": cpu * 1000,
                "wall_ms": wall * 1000,
                "rss_mb": (_status_kb("VmHWM") - base_rss) / 1024,
                "result": result,
            }
        )
    )


def measure(engine: str, op: str, path: Path) -> dict[str, Any]:
    """One child's measurement of ``op`` with ``engine`` on the file at ``path``."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.pdf_engines", "--child", engine, op, str(path)],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, nargs="+", default=[100, 500])
    parser.add_argument("--repeat", type=int, default=3, help="runs per cell; the best is shown")
    parser.add_argument(
        "--child", nargs=3, metavar=("ENGINE", "OP", "PATH"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.child:
        _child(*args.child)
        return
    columns = ("pages", "file", "MB", "operation", "engine", "CPU ms", "wall ms")
    columns += ("peak RSS rise MB",)
    table = Table("PDF engines", columns, ("right", "left", "right", *["left"] * 2, *["right"] * 3))
    with tempfile.TemporaryDirectory() as tmp:
        for pages in args.pages:
            intact = scan_pdf(pages)
            for variant, data in (("intact", intact), ("no xref", without_xref(intact))):
                path = Path(tmp) / f"scan-{pages}-{variant.replace(' ', '-')}.pdf"
                path.write_bytes(data)
                size = len(data) / 1e6
                for op in ("inspect", "slice"):
                    for engine in ("pikepdf", "pypdfium2"):
                        runs = [measure(engine, op, path) for _ in range(args.repeat)]
                        best = min(runs, key=lambda r: r["cpu_ms"])
                        table.add(
                            str(pages), variant, f"{size:.1f}", op, engine,
                            f"{best['cpu_ms']:.0f}", f"{best['wall_ms']:.0f}",
                            f"{max(r['rss_mb'] for r in runs):.1f}",
                        )  # fmt: skip
                        print(f"{pages} pages, {variant}, {op}, {engine}: done", file=sys.stderr)
    print(table.markdown())


if __name__ == "__main__":
    main()
