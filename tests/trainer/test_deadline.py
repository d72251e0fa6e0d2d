"""R5: the trainer stops training in time to export before the run's limit (trainer/deadline.py)."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from trainer.deadline import FIXED_RESERVE_S, Clock, Deadline, either, export_reserve_s

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


class FixedClock(Clock):
    def __init__(self, at: datetime) -> None:
        super().__init__(None)
        self.at = at

    def now(self) -> datetime:
        return self.at


def test_the_reserve_grows_with_the_adapter() -> None:
    small, large = export_reserve_s(1_000_000), export_reserve_s(170_000_000)  # r=16 on 8B: 170 MB
    assert FIXED_RESERVE_S < small < large
    assert large == FIXED_RESERVE_S + 34.0


def test_training_stops_once_only_the_reserve_is_left_and_stays_stopped() -> None:
    clock = FixedClock(T0)
    deadline = Deadline(T0 + timedelta(minutes=10), 90.0, clock)
    clock.at = T0 + timedelta(minutes=10) - timedelta(seconds=91)
    assert not deadline()
    clock.at += timedelta(seconds=1)
    assert deadline() and deadline.reached
    clock.at = T0  # a clock read again never un-stops a loop that stopped
    assert deadline()
    assert not Deadline(None, 90.0, clock)()  # no deadline in the manifest: never
    assert either(lambda: False, deadline)() and not either(lambda: False)()


def test_a_short_limit_still_trains_the_reserve_is_at_most_half_the_time_left() -> None:
    clock = FixedClock(T0)
    roomy = Deadline.for_training(T0 + timedelta(minutes=30), 1_000_000, clock)
    assert roomy.reserve_s == export_reserve_s(1_000_000)
    short = Deadline.for_training(T0 + timedelta(seconds=40), 1_000_000, clock)
    assert short.reserve_s == 20.0 and not short()
    gone = Deadline.for_training(T0 - timedelta(seconds=1), 1_000_000, clock)
    assert gone.reserve_s == 0.0 and gone()  # the boot used the limit up: stop at once
    assert Deadline.for_training(None, 1_000_000, clock).reserve_s == export_reserve_s(1_000_000)


def test_the_sandbox_clock_is_read_over_http_and_a_frozen_one_does_not_run_on() -> None:
    state: dict[str, Any] = {"now": "2026-12-01T12:00:00.000Z", "frozen": True}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps(state).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        clock = Clock(f"http://127.0.0.1:{server.server_address[1]}/_sandbox/clock")
        assert clock.now() == T0
        state["now"] = "2026-12-01T13:00:00.000Z"  # moved forward; read again after a second
        clock._read = (clock._read[0], clock._read[1] - 1, True)  # type: ignore[index]
        assert clock.now() == T0 + timedelta(hours=1)
    finally:
        server.shutdown()
    assert abs((Clock(None).now() - datetime.now(UTC)).total_seconds()) < 5
