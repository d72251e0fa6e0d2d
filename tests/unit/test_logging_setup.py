"""O3: log lines are JSON objects carrying the request id and the decision's fields."""

from __future__ import annotations

import json
import logging

import httpx
import pytest

from adapters.logging_setup import JsonFormatter, UrlQueryRedaction, redact_request_urls


def test_a_log_line_is_one_json_object_with_its_extra_fields() -> None:
    record = logging.LogRecord(
        "tensorant.runs", logging.INFO, __file__, 1, "run %s launched pod %s", ("r1", "p1"), None
    )
    record.request_id = "abc123"
    record.run_id = "r1"
    line = JsonFormatter().format(record)
    entry = json.loads(line)
    assert entry["message"] == "run r1 launched pod p1"
    assert (entry["request_id"], entry["run_id"], entry["level"]) == ("abc123", "r1", "info")
    assert entry["time"].endswith("Z") and "\n" not in line


def test_an_http_clients_request_line_leaves_out_a_presigned_urls_query(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A presigned URL's query (key id, signature) is a credential: the line httpx writes for
    each request keeps the method, host and path, never the query."""
    redact_request_urls()
    redact_request_urls()  # idempotent: one filter
    assert sum(isinstance(f, UrlQueryRedaction) for f in logging.getLogger("httpx").filters) == 1
    presigned = (
        "http://127.0.0.1:9/s3/b/runs/r1/manifest.json?X-Amz-Credential=AKIAEXAMPLE%2F20261207"
        "&X-Amz-Signature=0123abcd"
    )

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200)

    client = httpx.Client(transport=httpx.MockTransport(handler))
    with caplog.at_level(logging.INFO, logger="httpx"), client:
        client.get(presigned)
        client.get("http://127.0.0.1:9/v2/pods")
    lines = [r.getMessage() for r in caplog.records if r.name == "httpx"]
    assert len(lines) == 2, lines
    assert "AKIAEXAMPLE" not in lines[0] and "0123abcd" not in lines[0], lines[0]
    assert "/runs/r1/manifest.json?[query redacted]" in lines[0], lines[0]
    assert "http://127.0.0.1:9/v2/pods " in lines[1], lines[1]
