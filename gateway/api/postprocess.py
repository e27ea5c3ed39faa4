"""Post-processing of the OCR markdown, as configured in ``postprocess``.

Rules, applied in this order:

1. ``strip_images``: remove markdown images ``![alt](src)``, HTML ``<img ...>`` tags and the
   ``<div ...>`` wrappers PaddleX puts around them once they are left empty.
2. ``remove_repeated_hui``: remove every run of at least ``min_repeats`` "回" (signature-area
   noise the model emits).
3. ``collapse_blank_lines``: whitespace-only lines become empty, runs of blank lines become one,
   and the text is stripped.

Usage::

    from gateway.api.postprocess import postprocess
    text = postprocess(markdown, settings.postprocess)
"""

from __future__ import annotations

import re

from gateway.config.settings import PostprocessSettings

_MD_IMAGE = re.compile(r"!\[[^\]\n]*\]\([^)\n]*\)")
_HTML_IMG = re.compile(r"<img\b[^>]*>(?:\s*</img>)?", re.IGNORECASE)
_EMPTY_WRAPPER = re.compile(r"<(div|p|center|figure)\b[^>]*>\s*</\1>", re.IGNORECASE)
_TRAILING_WS = re.compile(r"[ \t\u3000]+$", re.MULTILINE)
_BLANK_RUNS = re.compile(r"\n{3,}")


def strip_images(text: str) -> str:
    """Remove markdown and HTML image tags (and wrappers left empty by that)."""
    text = _MD_IMAGE.sub("", text)
    text = _HTML_IMG.sub("", text)
    previous = None
    while previous != text:  # nested empty wrappers
        previous = text
        text = _EMPTY_WRAPPER.sub("", text)
    return text


def remove_repeated_hui(text: str, min_repeats: int) -> str:
    """Remove runs of at least ``min_repeats`` consecutive "回"."""
    return re.sub(f"回{{{max(1, min_repeats)},}}", "", text)


def collapse_blank_lines(text: str) -> str:
    """Blank out whitespace-only lines, merge runs of blank lines, strip the ends."""
    text = text.replace("\r\n", "\n")
    text = _TRAILING_WS.sub("", text)
    text = _BLANK_RUNS.sub("\n\n", text)
    return text.strip()


def postprocess(text: str, settings: PostprocessSettings) -> str:
    """Apply the configured rules to one document's markdown."""
    if settings.strip_images:
        text = strip_images(text)
    if settings.remove_repeated_hui.enabled:
        text = remove_repeated_hui(text, settings.remove_repeated_hui.min_repeats)
    if settings.collapse_blank_lines:
        text = collapse_blank_lines(text)
    return text
