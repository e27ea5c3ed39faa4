"""The PaddleX serving protocol as the gateway speaks it: request bodies and answer checks.

One place for what ``/layout-parsing`` and ``/restructure-pages`` take and give back
(``docs/paddlex-protocol.md``), used by the proxy (one document), the fan-out (page slices)
and the job runner.

Usage::

    body = layout_body(doc.b64(), is_pdf=True, log_id="rid", options={"useLayoutDetection": True})
    pages = parsing_results(await client.post(url + "/layout-parsing", json=body))
    body = restructure_body(pages, concatenatePages=True, logId="rid")
    text = markdown_text(restructured(await client.post(url + "/restructure-pages", json=body)))
"""

from __future__ import annotations

from typing import Any

from gateway.errors import UpstreamClientError, UpstreamFailure
from gateway.upstream.attempts import error_message, raise_for_upstream_status
from gateway.wire import paddlex_routes
from gateway.wire.jsonfast import RawString
from gateway.wire.upstream_http import Reply

TRUNCATION_HINT = (
    "set 'Serving: {extra: {max_num_input_imgs: null}}' in that instance's pipeline config"
)


def layout_body(
    file_b64: str | RawString, is_pdf: bool, log_id: str, options: dict[str, Any] | None = None
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


def envelope(response: Reply) -> dict[str, Any]:
    """The JSON envelope of a PaddleX answer whose ``result`` is an object: 4xx raise
    :class:`~gateway.errors.UpstreamClientError`; 5xx, other statuses, non-JSON bodies, a
    non-zero ``errorCode`` and a missing ``result``
    :class:`~gateway.errors.UpstreamFailure`."""
    raise_for_upstream_status(response)
    status = response.status_code
    try:
        data = response.json()
    except ValueError:
        raise UpstreamFailure(
            "protocol_error", f"HTTP {status} with a non-JSON body", status
        ) from None
    if status != 200 or not isinstance(data, dict) or data.get("errorCode", 0):
        raise UpstreamFailure(
            "protocol_error",
            f"HTTP {status}: unexpected envelope: {error_message(response.content)}",
            status,
        )
    if not isinstance(data.get("result"), dict):
        raise UpstreamFailure("protocol_error", "envelope without a result object", 200)
    return data


def parsing_results(response: Reply) -> list[Any]:
    """``result.layoutParsingResults`` of a PaddleX answer (a list), checked as :func:`envelope`."""
    pages = envelope(response)["result"].get("layoutParsingResults")
    if not isinstance(pages, list):
        raise UpstreamFailure("protocol_error", "no layoutParsingResults in the result", 200)
    return pages


def restructured(response: Reply) -> list[Any]:
    """The pages of a ``/restructure-pages`` answer. A 4xx there is about the gateway's own
    request, not the caller's document, so it is a protocol failure, not a client error."""
    try:
        return parsing_results(response)
    except UpstreamClientError as exc:
        raise UpstreamFailure(
            "protocol_error",
            f"{paddlex_routes.RESTRUCTURE_PAGES} HTTP {exc.status}: {exc.message}",
            exc.status,
        ) from None


def markdown_text(merged: Any) -> str:
    """The whole document's markdown of a concatenating ``/restructure-pages`` answer."""
    try:
        return str(merged[0]["markdown"]["text"])
    except (KeyError, IndexError, TypeError):
        raise UpstreamFailure(
            "protocol_error",
            f"{paddlex_routes.RESTRUCTURE_PAGES} result without markdown text",
            200,
        ) from None
