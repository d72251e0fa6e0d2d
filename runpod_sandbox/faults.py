"""Fault injection knobs; one immutable value replaced wholesale so `{}` clears everything."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

SOMETHING_WENT_WRONG = "Something went wrong. Please try again later or contact support."
NO_INSTANCES = (
    "There are no longer any instances available with the requested specifications. "
    "Please refresh and try again."
)
NOT_ENOUGH_GPUS = "There are not enough free GPUs on the host machine to start this pod."


@dataclass(frozen=True)
class Faults:
    """Rates are probabilities per HTTP call to /graphql and /v2 (0..1).

    Counters (`create_then_500`, `hold_creates`, `terminate_lies`) are consumed one per matching
    call; -1 means "every time".
    """

    error_rate: float = 0.0  # HTTP 500 with a JSON `errors` body (-> QueryError in the SDK)
    rate_limit_rate: float = 0.0  # HTTP 429 with Retry-After and a JSON `errors` body
    non_json_rate: float = 0.0  # HTTP 502 with an HTML body (-> JSONDecodeError in the SDK)
    slow_rate: float = 0.0  # answer after `slow_seconds` (then normally)
    slow_seconds: float = 2.0
    capacity_gpu_types: tuple[str, ...] = ()  # creates of these GPU types fail for capacity
    capacity_datacenters: tuple[str, ...] = ()  # creates in these datacenters fail for capacity
    create_then_500: int = 0  # the Pod IS created, then the answer is HTTP 500 (an orphan)
    # The Pod (or Serverless endpoint) IS created, then the create's answer waits until POST
    # /_sandbox/held/release (a client killed meanwhile never learns its id); GET
    # /_sandbox/held lists what waits (`pod_id` is the endpoint's id for an endpoint).
    hold_creates: int = 0
    list_lag_seconds: float = 0.0  # new Pods missing from myself.pods for this long
    list_pods_error_rate: float = 0.0  # Pod listings (myself.pods, GET /v2/pods) answer 500
    terminate_lies: int = 0  # podTerminate answers success but nothing happens
    resume_no_gpus: bool = False  # podResume fails "not enough free GPUs"
    seed: int | None = None  # seeds the random draws so rate tests are repeatable
    # REST v2 per-key quotas (None: the sandbox default, see ratelimit.DEFAULT_QUOTAS).
    rate_limit_per_minute: int | None = None
    rate_limit_per_hour: int | None = None
    rate_limit_per_day: int | None = None
    graphql_retired: bool = False  # /graphql answers 410 Gone, as after early 2027
    # GET /v2/pods/{id}/logs: a stream is cut after it sent this many events (0: never), at most
    # `log_stream_cuts` times (-1: every stream); abrupt drops the connection mid-response,
    # otherwise the stream just ends as a proxy's idle timeout would end it.
    log_stream_cut_after: int = 0
    log_stream_cuts: int = -1
    log_stream_cut_abrupt: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> Faults:
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        kwargs: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in payload.items():
            if key not in known:
                extra[key] = value
                continue
            if key in ("capacity_gpu_types", "capacity_datacenters"):
                kwargs[key] = tuple(value or ())
            elif key in ("create_then_500", "hold_creates", "terminate_lies", "log_stream_cuts"):
                kwargs[key] = -1 if value is True else int(value or 0)
            else:
                kwargs[key] = value
        rates = ("error_rate", "rate_limit_rate", "non_json_rate", "slow_rate")
        for key in (*rates, "list_pods_error_rate"):
            rate = float(kwargs.get(key, 0.0))
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"{key} must be between 0 and 1")
        if int(kwargs.get("log_stream_cut_after", 0) or 0) < 0:
            raise ValueError("log_stream_cut_after must be >= 0")
        return cls(**kwargs, extra=extra)

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["capacity_gpu_types"] = list(self.capacity_gpu_types)
        data["capacity_datacenters"] = list(self.capacity_datacenters)
        return data
