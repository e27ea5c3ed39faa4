"""Property-based fuzzing of the gateway's OpenAPI schema (schemathesis) against the gateway in
front of PaddleX doubles: the gateway answers no 5xx of its own, every 4xx carries the JSON
error body, and answers match the documented statuses, content types and schemas.

URL fetches resolve names with a stand-in that answers 127.0.0.1 (no DNS, loopback only), so
a generated ``url`` reaches nothing but the loopback guard. The run is bounded by
``max_examples`` per operation and phase (a minute or less on a loaded 2-core machine).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterator
from typing import ClassVar

import pytest
import schemathesis
from schemathesis.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.core.failures import Failure

from gateway.config.settings import parse_settings
from gateway.server.app import create_app
from tests.doubles.paddlex_double import DoubleFleet
from tests.gateway.conftest import RunningGateway, gateway_config

TOKEN = "fuzz-admin-token"
MAX_EXAMPLES = 200
CASES: list[str] = []
RELAYED: list[str] = []  # upstream 500s relayed as 502


async def loopback_dns(host: str, port: int) -> list[str]:
    return ["127.0.0.1"]


class _RefusedAnswer(Failure):
    """An answer of the gateway a check refuses: its status and the start of its body are the
    message; the title is the class's ``kind_title`` (schemathesis's own default)."""

    body_chars: ClassVar[int] = 300

    def __init__(self, operation: str, status: int, body: str) -> None:
        super().__init__(operation=operation, message=f"HTTP {status}: {body[: self.body_chars]}")


class ErrorBodyMissing(_RefusedAnswer):
    """A 4xx without ``{"error": {"code", "message"}, "request_id"}``."""

    kind_title = "4xx without the gateway's JSON error body"


class GatewayServerError(_RefusedAnswer):
    """A 5xx that the gateway produced itself (not every upstream answering 500)."""

    kind_title = "the gateway answered 5xx"
    body_chars = 500


def no_gateway_5xx(ctx, response, case) -> bool | None:
    """No 5xx, except a 502 that relays upstreams answering 500 to a body that crashes them
    (the doubles, like PaddleX, answer 500 to some malformed /restructure-pages bodies)."""
    if response.status_code < 500:
        return None
    try:
        error = json.loads(response.content)["error"]
        relayed = error["code"] == "all_upstreams_failed" and all(
            attempt["outcome"] == "server_error" for attempt in error["attempts"]
        )
    except (ValueError, KeyError, TypeError):
        relayed = False
    if not relayed:
        raise GatewayServerError(case.operation.label, response.status_code, response.text)
    RELAYED.append(case.operation.label)
    return True


def error_body_check(ctx, response, case) -> bool | None:
    """Every 4xx has the gateway's JSON error body (PaddleX envelope keys may come too); on the
    job routes, the official API's error envelope (``code`` the status, ``msg``)."""
    if not 400 <= response.status_code < 500:
        return None
    try:
        body = json.loads(response.content)
        if case.operation.path.startswith("/api/v2/"):
            ok = body["code"] == response.status_code and isinstance(body["msg"], str)
            if not ok:
                raise ErrorBodyMissing(case.operation.label, response.status_code, response.text)
            return True
        error = body["error"]
        ok = isinstance(error["code"], str) and isinstance(error["message"], str)
        ok = ok and isinstance(body["request_id"], str) and bool(body["request_id"])
    except (ValueError, KeyError, TypeError):
        ok = False
    if not ok:
        raise ErrorBodyMissing(case.operation.label, response.status_code, response.text)
    return True


@pytest.fixture(scope="module")
def gateway(tmp_path_factory) -> Iterator[RunningGateway]:
    with DoubleFleet(2) as fleet:
        config = gateway_config(
            fleet.urls,
            load_balance={"mode": "queue"},
            auth={
                "tokens": [{"name": "user", "sha256": hashlib.sha256(b"user").hexdigest()}],
                "admin_tokens": [
                    {"name": "fuzz", "sha256": hashlib.sha256(TOKEN.encode()).hexdigest()}
                ],
            },
            http={"timeout_s": 20, "request_deadline_s": 30},
            input={"url_timeout_s": 5, "max_request_bytes": 5_000_000},
            jobs={"dir": str(tmp_path_factory.mktemp("jobs")), "poll_interval_s": 0.1},
        )
        gw = RunningGateway(create_app(parse_settings(config), resolver=loopback_dns))
        try:
            yield gw
        finally:
            gw.stop()
            answers = ", ".join(f"{k}: {n}" for k, n in sorted(Counter(CASES).items()))
            print(
                f"\nfuzzer: {len(CASES)} cases sent to the gateway ({answers}); "
                f"{len(RELAYED)} relayed upstream 500s"
            )


def _schema():
    # the document is static: taken from an app that is not served
    document = create_app(parse_settings({})).openapi()
    loaded = schemathesis.openapi.from_dict(document)
    loaded.config.generation.update(
        modes=["positive", "negative"], max_examples=MAX_EXAMPLES, database="none"
    )
    loaded.config.phases.update(phases=["examples", "coverage", "fuzzing"])
    return loaded


schema = _schema()


@schema.parametrize()
def test_gateway_schema(case, gateway: RunningGateway) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"} if len(CASES) % 5 else {}
    response = case.call_and_validate(
        base_url=gateway.url,
        headers=headers,
        timeout=60,
        checks=[
            no_gateway_5xx,
            status_code_conformance,
            content_type_conformance,
            response_schema_conformance,
            error_body_check,
        ],
    )
    CASES.append(f"{case.operation.label} {response.status_code}")


def test_the_schema_describes_every_route(gateway: RunningGateway) -> None:
    document = gateway.client.get("/openapi.json").json()
    for path in ("/ocr", "/ocr-file", "/layout-parsing", "/restructure-pages"):
        operation = document["paths"][path]["post"]
        assert operation["requestBody"]["required"] is True
        assert {"200", "400", "401", "413", "429"} <= set(operation["responses"])
    assert "OcrRequest" in document["components"]["schemas"]
    assert document["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    assert gateway.client.get("/docs").status_code == 200
