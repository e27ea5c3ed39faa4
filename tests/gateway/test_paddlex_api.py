"""The PaddleX answer checks (gateway/upstream/paddlex_api.py) on answers as they come off the
wire."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.errors import UpstreamClientError, UpstreamFailure
from gateway.upstream.paddlex_api import envelope, parsing_results, restructure_body, restructured
from gateway.wire.upstream_http import Reply


def reply(status: int, body: Any) -> Reply:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return Reply(status, {"content-type": "application/json"}, content)


def ok(result: Any) -> Reply:
    return reply(200, {"logId": "x", "errorCode": 0, "errorMsg": "Success", "result": result})


def test_a_good_answer_gives_its_pages() -> None:
    pages = [{"prunedResult": {"page_index": None}, "markdown": {"text": "a", "images": {}}}]
    assert parsing_results(ok({"layoutParsingResults": pages})) == pages
    assert envelope(ok({"layoutParsingResults": pages}))["logId"] == "x"


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (reply(200, b"<html>"), "HTTP 200 with a non-JSON body"),
        (reply(200, {"errorCode": 1, "errorMsg": "boom"}), "HTTP 200: unexpected envelope: boom"),
        (reply(302, {"errorCode": 0, "result": {}}), "HTTP 302: unexpected envelope"),
        (reply(200, {"errorCode": 0, "result": None}), "envelope without a result object"),
        (ok({"layoutParsingResults": {"not": "a list"}}), "no layoutParsingResults in the result"),
        (reply(503, {"errorCode": 503, "errorMsg": "busy"}), "HTTP 503: busy"),
    ],
)
def test_a_bad_answer_is_an_upstream_failure_that_says_why(answer: Reply, reason: str) -> None:
    with pytest.raises(UpstreamFailure) as failure:
        parsing_results(answer)
    assert failure.value.reason.startswith(reason)


def test_a_4xx_is_the_callers_fault_on_layout_parsing_but_ours_on_restructure() -> None:
    bad = reply(422, {"errorCode": 422, "errorMsg": "bad pages"})
    with pytest.raises(UpstreamClientError, match="bad pages"):
        parsing_results(bad)
    with pytest.raises(UpstreamFailure) as failure:
        restructured(bad)
    assert failure.value.outcome == "protocol_error"
    assert failure.value.reason == "/restructure-pages HTTP 422: bad pages"


def test_restructure_body_never_sends_null_images() -> None:
    body = restructure_body([{"prunedResult": {}, "markdown": {"images": None}}], logId="r")
    assert body == {"pages": [{"prunedResult": {}, "markdownImages": {}}], "logId": "r"}
    with pytest.raises(UpstreamFailure, match="page without prunedResult"):
        restructure_body([{"markdown": {}}])
