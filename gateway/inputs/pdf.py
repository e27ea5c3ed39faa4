"""PDFs read as PaddleX reads them: with PDFium (``pypdfium2``), in a killable worker process.

PaddleX opens a PDF with PDFium, which repairs what is commonly broken in real scans and
downloads (no cross-reference table, a wrong ``startxref``, a truncated trailer, bytes before
the header, a stream's wrong ``/Length``); a stricter reader in front of it would refuse
documents that the engine behind it reads. So the gateway's page count, page limits, bomb
guards and the fan-out's page slices all come from the same engine: a PDF is refused as
unreadable only when PDFium cannot open it or cannot find one of the pages it counts (PaddleX
then fails on that page too). PDFium trusts a page tree's ``/Count`` and memoizes the count of
shared ``/Pages`` nodes, so a tree that lists a node many times costs little to count and
counts as PaddleX would render it.

PDFium is a C library and not thread-safe: these functions run in the worker processes of
:class:`gateway.inputs.workers.ProcessWorkers` (one document at a time per process; a crash or a
run past ``input.pdf_timeout_s`` kills only that process). :func:`work` is their entry. Used
in-process (tests, tools, several threads), every call holds :data:`PDFIUM_LOCK`.

Usage::

    inspect_pdf(data, max_pages=1000, max_pixels=178956970)  # {"pages": n} or a refusal
    cut_slices(data, [[0, 1, 2], [3, 4]])                      # two valid PDFs
    workers = ProcessWorkers("gateway.inputs.pdf:work")
    await workers.run(data, ("inspect", 1000, 178956970), timeout=10)
    await workers.run(data, ("cut", [[0, 1, 2]]), timeout=10)  # Blobs
"""

from __future__ import annotations

import io
import math
import threading
from typing import Any

from gateway.inputs.workers import Blobs

PDF_MIN_RENDER_SCALE = 0.1
"""PaddleX renders a PDF page at scale 2 (144 dpi), or at the largest scale down to this one
(`PADDLE_PDX_PDF_MIN_RENDER_SCALE`) that keeps it within its pixel limit; only a page over the
limit even at this scale is refused (paddlex/inference/utils/pdf_rendering.py)."""
PDFIUM_HEADER_SPAN = 1024 + 4  # PDFium looks for "%PDF" at offsets 0 to 1024
PDFIUM_LOCK = threading.RLock()  # one PDFium call at a time in this process


def is_pdf(data: bytes) -> bool:
    """Whether PDFium would take ``data`` for a PDF: ``%PDF`` within its first 1 KB."""
    return data.find(b"%PDF", 0, PDFIUM_HEADER_SPAN) != -1


def _refuse(status: int, code: str, message: str) -> dict[str, Any]:
    return {"status": status, "code": code, "message": message}


def _pages_message(pages: int, limit: int) -> str:
    return f"the PDF has {pages} pages, the limit is {limit} (input.max_pages)"


def _why(exc: Exception) -> str:
    """PDFium's reason in a PdfiumError's message ('Failed to load page.' ...)."""
    return str(exc).rstrip(".")[:200] or type(exc).__name__


def inspect_pdf(data: bytes, max_pages: int, max_pixels: int) -> dict[str, Any]:
    """Page count and page sizes as PDFium sees them. ``{"pages": n}``, or a refusal
    ``{"status", "code", "message"}``: 422 when PDFium cannot open the file or one of its
    pages (the page named), 413 over ``max_pages`` or for a page that renders (at PaddleX's
    144 dpi) to more than ``max_pixels``."""
    with PDFIUM_LOCK:
        return _inspect(data, max_pages, max_pixels)


def _inspect(data: bytes, max_pages: int, max_pixels: int) -> dict[str, Any]:
    import pypdfium2 as pdfium

    try:
        doc = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        if getattr(exc, "err_code", None) == pdfium.raw.FPDF_ERR_PASSWORD:
            return _refuse(422, "unreadable_pdf", "the PDF is encrypted with a password")
        return _refuse(422, "unreadable_pdf", f"the PDF cannot be read: {_why(exc)}")
    try:
        count = len(doc)
        if count == 0:
            return _refuse(422, "unreadable_pdf", "the PDF has no pages")
        if count > max_pages:
            return _refuse(413, "too_many_pages", _pages_message(count, max_pages))
        for index in range(count):
            try:
                width, height = doc.get_page_size(index)
            except pdfium.PdfiumError as exc:
                return _refuse(
                    422,
                    "unreadable_pdf",
                    f"page {index + 1} of the PDF cannot be read ({_why(exc)}): its page "
                    "tree is broken or loops",
                )
            width = math.ceil(abs(width) * PDF_MIN_RENDER_SCALE)
            height = math.ceil(abs(height) * PDF_MIN_RENDER_SCALE)
            if width * height > max_pixels:
                return _refuse(
                    413,
                    "image_too_large",
                    f"PDF page {index + 1} renders to {width} x {height} pixels even at "
                    f"PaddleX's smallest scale ({PDF_MIN_RENDER_SCALE:g}, 7.2 dpi), the limit is "
                    f"{max_pixels} pixels (input.max_image_pixels)",
                )
        return {"pages": count}
    finally:
        doc.close()


def cut_slices(data: bytes, slices: list[list[int]]) -> list[bytes]:
    """One PDF per list of ``slices`` (0-based pages, in that order) of the PDF ``data``,
    which is opened once (opening a long PDF costs more than writing a few of its pages). The
    pages are copied by PDFium into new documents, so a slice of a repaired PDF is a whole,
    valid PDF (cross-reference table and all)."""
    with PDFIUM_LOCK:
        return _cut(data, slices)


def _cut(data: bytes, slices: list[list[int]]) -> list[bytes]:
    import pypdfium2 as pdfium

    out: list[bytes] = []
    source = pdfium.PdfDocument(data)
    try:
        for pages in slices:
            part = pdfium.PdfDocument.new()
            try:
                part.import_pages(source, list(pages))
                buf = io.BytesIO()
                part.save(buf)
                out.append(buf.getvalue())
            finally:
                part.close()
    finally:
        source.close()
    return out


def work(payload: bytes, op: str, *args: Any) -> Any:
    """The worker processes' entry: ``("inspect", max_pages, max_pixels)`` or
    ``("cut", slices)`` on the PDF ``payload``."""
    if op == "inspect":
        return inspect_pdf(payload, *args)
    if op == "cut":
        return Blobs(cut_slices(payload, *args))
    raise ValueError(f"unknown PDF operation {op!r}")
