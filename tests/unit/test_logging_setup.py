"""O3: log lines are JSON objects carrying the request id and the decision's fields."""

from __future__ import annotations

import json
import logging

from adapters.logging_setup import JsonFormatter


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
