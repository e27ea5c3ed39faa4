"""The PaddleX serving protocol as the gateway speaks it: request bodies and answer checks.

One place for what ``/layout-parsing`` and ``/restructure-pages`` take and give back
(``docs/paddlex-protocol.md``), used by the proxy (one document), the fan-out (page slices)
and the job runner.

Usage::

    body = layout_body(doc.b64(), is_pdf=True, log_id="rid", options={"useLayoutDetection": True})
    pages = parsing_results(await client.post(url + "/layout-parsing", json=body))
    merged = restructure_body(pages, concatenatePages=True, logId="rid")
"""

from __future__ import annotations

from typing import Any

from gateway.attempts import UpstreamFailure, raise_for_upstream_status
from gateway.upstream_http import Reply

TRUNCATION_HINT = (
    "set 'Serving: {extra: {max_num_input_imgs: null}}' in that instance's pipeline config"
)


def layout_body(
    file_b64: str, is_pdf: bool, log_id: str, options: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The ``/layout-parsing`` body of a document given as raw standard base64, with an explicit
    ``fileType`` (PaddleX cannot tell a base64 file's type); ``visualize`` off unless the
    options turn it on (PaddleX's default is on, which costs images nobody reads)."""
    return {
        "visualize": False,
        **(options or {}),
        "file": file_b64,
        "fileType": 0 if is_pdf else 1,
        "logId": log_id,
    }


def restructure_body(pages: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    """The ``/restructure-pages`` body over ``pages`` (``layoutParsingResults`` items);
    ``markdownImages`` is never null (PaddleX fails on null with ``concatenatePages``)."""
    try:
        return {
            "pages": [
                {
                    "prunedResult": page["prunedResult"],
                    "markdownImages": (page.get("markdown") or {}).get("images") or {},
                }
                for page in pages
            ],
            **fields,
        }
    except (KeyError, TypeError, AttributeError):
        raise UpstreamFailure("protocol_error", "page without prunedResult", 200) from None


def parsing_results(response: Reply) -> Any:
    """``result.layoutParsingResults`` of a PaddleX answer: 4xx raise
    :class:`~gateway.attempts.UpstreamClientError`, 5xx and bodies without it
    :class:`~gateway.attempts.UpstreamFailure`."""
    raise_for_upstream_status(response)
    try:
        data = response.json()
    except ValueError:
        raise UpstreamFailure(
            "protocol_error", f"HTTP {response.status_code} with a non-JSON body", 200
        ) from None
    if not isinstance(data, dict) or data.get("errorCode", 0):
        raise UpstreamFailure("protocol_error", "unexpected envelope", response.status_code)
    try:
        return data["result"]["layoutParsingResults"]
    except (KeyError, TypeError):
        raise UpstreamFailure("protocol_error", "no layoutParsingResults", 200) from None


def markdown_text(merged: Any) -> str:
    """The whole document's markdown of a concatenating ``/restructure-pages`` answer."""
    try:
        return str(merged[0]["markdown"]["text"])
    except (KeyError, IndexError, TypeError):
        raise UpstreamFailure(
            "protocol_error", "/restructure-pages result without markdown text", 200
        ) from None
