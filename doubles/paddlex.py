"""What a PaddleX double answers: the ``paddlex --serve`` PaddleOCR-VL wire protocol, once.

Both PaddleX doubles build their answers here, so they speak the same protocol
(``docs/paddlex-protocol.md``; the genuine serving app runs in ``sim/paddlex``): the envelopes, a
``/layout-parsing`` result (``layoutParsingResults`` with ``prunedResult`` and ``markdown``, and
``dataInfo``), a ``/restructure-pages`` result, and the page sizes PaddleX renders (PDFium at
scale 2, images decoded as ``cv2.imdecode`` decodes them). The two doubles differ only in the
server around it: ``tests/doubles/paddlex_double.py`` (one instance under uvicorn in the test
process, knobs for every failure a test injects) and ``bench/fleet.py`` (48 instances in one
process with a cost model and crash/wedge faults, on a small server whose CPU stays out of the
way of the gateway it measures: about 80 us per request, the FastAPI double 230 us, measured on
one keep-alive connection; and a crash needs its listener closed and its connections reset).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

# PDFium is not thread-safe: one call at a time in a process, the gateway's lock (a test
# process runs the gateway and the doubles side by side)
from gateway.inputs.pdf import PDFIUM_LOCK

Page = tuple[int, int]  # rendered (width, height)
VISUAL = "aGVsbG8="  # what the doubles send for a visualisation image (base64 of "hello")


def success(result: dict[str, Any], log_id: str | None) -> dict[str, Any]:
    """The success envelope around ``result``; the request's logId, else a fresh one."""
    return {
        "logId": log_id or str(uuid.uuid4()),
        "result": result,
        "errorCode": 0,
        "errorMsg": "Success",
    }


def error(status: int, message: str) -> dict[str, Any]:
    """The error envelope: ``errorCode`` is the HTTP status, the logId a fresh uuid4."""
    return {"logId": str(uuid.uuid4()), "errorCode": status, "errorMsg": message}


def healthy(log_id: str | None = None) -> dict[str, Any]:
    """The ``/health`` answer."""
    return {"logId": log_id or str(uuid.uuid4()), "errorCode": 0, "errorMsg": "Healthy"}


def page_text(pruned: dict[str, Any]) -> str:
    """A page's markdown: its blocks' contents joined by a blank line."""
    blocks = pruned.get("parsing_res_list") or []
    return "\n\n".join(str(b.get("block_content", "")) for b in blocks)


def page_result(
    texts: Sequence[str],
    size: Page,
    pdf_page: tuple[int, int] | None = None,
    images: dict[str, str] | None = None,
    visualize: bool = False,
) -> dict[str, Any]:
    """One ``layoutParsingResults`` item: a page holding one text block per text.

    ``pdf_page``: (index, count) for a page of a PDF (an image has neither). ``visualize``:
    with ``outputImages`` and ``inputImage``, as the server sends them unless told not to."""
    width, height = size
    blocks = [
        {
            "block_label": "text",
            "block_content": text,
            "block_bbox": [10, 10 + 60 * i, max(11, width - 10), 60 + 60 * i],
            "block_id": i,
            "block_order": i + 1,
            "group_id": i,
        }
        for i, text in enumerate(texts)
    ]
    pruned: dict[str, Any] = {} if pdf_page is None else {"page_index": pdf_page[0]}
    pruned.update(width=width, height=height)
    pruned["model_settings"] = {"use_doc_preprocessor": False, "use_layout_detection": True}
    pruned["parsing_res_list"] = blocks
    if pdf_page is not None:
        pruned["page_count"] = pdf_page[1]
    page: dict[str, Any] = {
        "prunedResult": pruned,
        "markdown": {"text": page_text(pruned), "images": dict(images or {})},
    }
    if visualize:
        page["outputImages"] = {"layout_det_res": VISUAL, "layout_order_res": VISUAL}
        page["inputImage"] = VISUAL
    return page


def data_info(sizes: Sequence[Page], pdf: bool) -> dict[str, Any]:
    """``dataInfo``: a PDF's rendered pages (their count after any truncation), or the image."""
    if pdf:
        pages = [{"width": w, "height": h} for w, h in sizes]
        return {"numPages": len(sizes), "pages": pages, "type": "pdf"}
    width, height = sizes[0]
    return {"width": width, "height": height, "type": "image"}


def layout_result(pages: list[dict[str, Any]], sizes: Sequence[Page], pdf: bool) -> dict:
    """A ``/layout-parsing`` result from its pages (:func:`page_result`)."""
    return {"layoutParsingResults": pages, "dataInfo": data_info(sizes, pdf)}


def restructure_result(pages: Sequence[dict[str, Any]], concatenate: bool) -> dict[str, Any]:
    """A ``/restructure-pages`` result. ``pages``: ``{"prunedResult", "markdownImages"}`` each.

    ``concatenate``: ONE result, the whole document's markdown and every page's images (a null
    ``markdownImages`` raises TypeError there, the real server's ``dict.update(None)``: a 500);
    else one result per page, in order."""
    if not concatenate:
        return {
            "layoutParsingResults": [
                {
                    "prunedResult": p["prunedResult"],
                    "markdown": {
                        "text": page_text(p["prunedResult"]),
                        "images": p.get("markdownImages"),
                    },
                }
                for p in pages
            ]
        }
    images: dict[str, str] = {}
    blocks: list[Any] = []
    for p in pages:
        images.update(p.get("markdownImages"))  # type: ignore[arg-type]
        blocks.extend(p["prunedResult"].get("parsing_res_list") or [])
    first = {**pages[0]["prunedResult"], "parsing_res_list": blocks} if pages else {}
    text = "\n\n".join(page_text(p["prunedResult"]) for p in pages)
    return {
        "layoutParsingResults": [
            {"prunedResult": first, "markdown": {"text": text, "images": images}}
        ]
    }


def pdf_page_sizes(data: bytes) -> list[Page]:
    """The pixel size of each page PaddleX would render (scale 2), read by PDFium; raises
    where PaddleX's ``read_pdf`` does (a file PDFium cannot open, a page it cannot load)."""
    import pypdfium2 as pdfium

    with PDFIUM_LOCK:
        doc = pdfium.PdfDocument(data)
        try:
            sizes = []
            for index in range(len(doc)):
                width, height = doc.get_page_size(index)
                sizes.append((int(width * 2), int(height * 2)))
            return sizes
        finally:
            doc.close()


def image_size(data: bytes) -> Page:
    """(width, height) of an image decoded as PaddleX decodes it (``cv2.imdecode``)."""
    import cv2
    import numpy as np

    array = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if array is None:
        raise ValueError("Failed to decode image bytes")
    return array.shape[1], array.shape[0]
