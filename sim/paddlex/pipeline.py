"""The stand-in PaddleOCR-VL pipeline that the genuine PaddleX serving app drives.

The app calls `predict(images, **options)` (a generator of results) and
`restructure_pages(results, merge_tables=, relevel_titles=, concatenate_pages=)`. Here
`predict` skips layout detection: each page becomes one block whose content is the vLLM's
answer for the whole page, wrapped in the genuine `PaddleOCRVLResult`, so the app's own
`.json` / `_to_markdown` produce the real wire format. `restructure_pages` is PaddleX's own
implementation (it uses nothing of the pipeline object but its arguments).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from paddlex.inference.pipelines.paddleocr_vl.pipeline import _PaddleOCRVLPipeline
from paddlex.inference.pipelines.paddleocr_vl.result import PaddleOCRVLBlock, PaddleOCRVLResult

from .settings import PipelineSettings
from .vlm import PROMPTS, VLMClient

_SETTING_KEYS = (
    "use_layout_detection",
    "use_chart_recognition",
    "use_seal_recognition",
    "use_ocr_for_image_block",
    "format_block_content",
    "merge_layout_blocks",
    "markdown_ignore_labels",
)
_VLM_OPTION_KEYS = (
    "repetition_penalty",
    "temperature",
    "top_p",
    "min_pixels",
    "max_pixels",
    "max_new_tokens",
    "vlm_extra_args",
)
_LAYOUT_TEXT_CLS_ID = 22


class SimPaddleOCRVLPipeline:
    """Duck-typed PaddleOCR-VL pipeline: one VLM call per page, genuine result objects."""

    def __init__(self, settings: PipelineSettings) -> None:
        self.settings = settings
        self.vlm = VLMClient(settings.server_url, settings.model_name, settings.timeout_s)

    def model_settings(self, options: dict[str, Any]) -> dict[str, Any]:
        """Request overrides on top of the config defaults, keyed as PaddleX keys them."""
        orientation = options.get("use_doc_orientation_classify")
        unwarping = options.get("use_doc_unwarping")
        if orientation is None and unwarping is None:
            use_doc_preprocessor = self.settings.use_doc_preprocessor
        else:
            use_doc_preprocessor = bool(orientation or unwarping)
        result: dict[str, Any] = {"use_doc_preprocessor": use_doc_preprocessor}
        for key in _SETTING_KEYS:
            value = options.get(key)
            result[key] = getattr(self.settings, key) if value is None else value
        result["return_layout_polygon_points"] = options.get("layout_shape_mode") != "rect"
        return result

    def _page(
        self, image: np.ndarray, text: str, label: str, settings: dict[str, Any]
    ) -> PaddleOCRVLResult:
        height, width = int(image.shape[0]), int(image.shape[1])
        bbox = [0, 0, width, height]
        page: dict[str, Any] = {
            "input_path": None,
            "page_index": None,
            "page_count": None,
            "width": width,
            "height": height,
            "doc_preprocessor_res": {
                "input_path": None,
                "page_index": None,
                "model_settings": {
                    "use_doc_orientation_classify": False,
                    "use_doc_unwarping": False,
                },
                "angle": -1,
            },
            "layout_det_res": {
                "input_path": None,
                "page_index": None,
                "boxes": [
                    {
                        "cls_id": _LAYOUT_TEXT_CLS_ID,
                        "label": label,
                        "score": 1.0,
                        "coordinate": [float(v) for v in bbox],
                    }
                ],
            },
            "table_res_list": [],
            "parsing_res_list": [PaddleOCRVLBlock(label=label, bbox=bbox, content=text)],
            "spotting_res": {},
            "imgs_in_doc": [],
            "model_settings": settings,
        }
        return PaddleOCRVLResult(page)

    def predict(self, input: Iterable[np.ndarray], **options: Any) -> Iterator[Any]:
        """Yield one genuine `PaddleOCRVLResult` per input image, in order."""
        images = list(input)
        settings = self.model_settings(options)
        prompt_label = "ocr"
        if not settings["use_layout_detection"]:
            prompt_label = (options.get("prompt_label") or "ocr").lower()
            if prompt_label not in PROMPTS:
                yield {"error": f"prompt_label must be one of {sorted(PROMPTS)}"}
                return
        label = "text" if prompt_label == "ocr" else prompt_label
        vlm_options = {k: options.get(k) for k in _VLM_OPTION_KEYS}
        if not images:
            return
        workers = max(1, min(len(images), self.settings.max_concurrency, 16))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sim-vlm") as pool:
            texts = pool.map(
                lambda img: self.vlm.recognize(img, PROMPTS[prompt_label], vlm_options), images
            )
            for image, text in zip(images, texts, strict=True):
                yield self._page(image, text, label, settings)

    def restructure_pages(
        self,
        res_list: list[Any],
        merge_tables: bool = True,
        relevel_titles: bool = True,
        concatenate_pages: bool = False,
    ) -> Iterator[Any]:
        """PaddleX's own `restructure_pages` (merge tables, relevel titles, concatenate)."""
        return _PaddleOCRVLPipeline.restructure_pages(
            self,  # type: ignore[arg-type]  # the method reads only its arguments
            res_list,
            merge_tables=merge_tables,
            relevel_titles=relevel_titles,
            concatenate_pages=concatenate_pages,
        )

    def close(self) -> None:
        """Nothing to release (the real pipeline closes its VLM client here)."""
