"""A small OpenAI-compatible chat client, shaped like PaddleX's VLM client requests.

PaddleX sends each crop as a JPEG data URL plus a task prompt ("OCR:" for text), with
`temperature` 0 and `max_completion_tokens`, to `{server_url}/chat/completions` with
`model = VLRecognition.model_name`. Failures raise `VLMError` (the app turns any exception
into HTTP 500 "Internal server error", as the real server does).
"""

from __future__ import annotations

import base64
import io
import json
import urllib.error
import urllib.request
from typing import Any

import numpy as np
from PIL import Image

PROMPTS = {
    "ocr": "OCR:",
    "table": "Table Recognition:",
    "formula": "Formula Recognition:",
    "chart": "Chart Recognition:",
    "seal": "Seal Recognition:",
    "spotting": "Spotting:",
}
MAX_NEW_TOKENS = 4096


class VLMError(RuntimeError):
    """The VLM server could not be reached or refused the request."""


def jpeg_data_url(image_bgr: np.ndarray) -> str:
    """BGR array -> `data:image/jpeg;base64,...` (as PaddleX encodes crops)."""
    rgb = np.ascontiguousarray(image_bgr[:, :, ::-1])
    with io.BytesIO() as buf:
        Image.fromarray(rgb).save(buf, format="JPEG")
        return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


class VLMClient:
    """Blocking client for one OpenAI-compatible server (thread-safe, no shared state)."""

    def __init__(self, server_url: str, model_name: str, timeout_s: float = 600.0) -> None:
        self.server_url = server_url.rstrip("/")
        self.model_name = model_name
        self.timeout_s = timeout_s

    def build_request(
        self, image_bgr: np.ndarray, prompt: str, options: dict[str, Any]
    ) -> dict[str, Any]:
        """The JSON body PaddleX would send for one image."""
        body: dict[str, Any] = {
            "model": self.model_name,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": jpeg_data_url(image_bgr)}},
                        {"type": "text", "text": prompt},
                    ],
                }
            ],
            "temperature": options.get("temperature") or 0,
            "max_completion_tokens": options.get("max_new_tokens") or MAX_NEW_TOKENS,
        }
        if options.get("top_p") is not None:
            body["top_p"] = options["top_p"]
        if options.get("repetition_penalty") is not None:
            body["repetition_penalty"] = options["repetition_penalty"]
        pixels = {k: options[k] for k in ("min_pixels", "max_pixels") if options.get(k)}
        if pixels:
            body["mm_processor_kwargs"] = pixels
        body.update(options.get("vlm_extra_args") or {})
        return body

    def complete(self, body: dict[str, Any]) -> str:
        """POST one chat completion and return the assistant's text."""
        request = urllib.request.Request(
            f"{self.server_url}/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "Authorization": "Bearer null"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                payload = json.load(response)
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:500]
            raise VLMError(f"VLM server {self.server_url} answered {exc.code}: {detail}") from exc
        except (urllib.error.URLError, OSError) as exc:
            raise VLMError(f"Exception from the 'vlm' worker: Connection error. ({exc})") from exc
        try:
            return str(payload["choices"][0]["message"]["content"])
        except (KeyError, IndexError, TypeError) as exc:
            text = f"malformed completion from {self.server_url}: {payload!r:.300}"
            raise VLMError(text) from exc

    def recognize(self, image_bgr: np.ndarray, prompt: str, options: dict[str, Any]) -> str:
        """Send one image with its task prompt; return the model's text."""
        return self.complete(self.build_request(image_bgr, prompt, options))
