"""What the trainer reports (T1): one JSON object per report, the same on every channel.

Each report is `{boot, seq, time, type, ...}`: `boot` is a random id per process start and `seq`
counts 1, 2, 3... within it, so the control plane applies a `(boot, seq)` once whichever channel
(mailbox, stdout line, callback) brings it first. Unknown keys are ignored when parsing, so fields
can be added without breaking an older reader.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Any, ClassVar

from trainer.protocol.bounded import MAX_INT, bounded_loads

REPORT_PREFIX = "TENSORANT-REPORT "
MAX_LOG_TEXT = 10_000  # the callback schema's limit for one log line
# `installing` and `downloading_model` come before the trainer loads anything: the Pod's boot
# (trainer/boot.py) installing the trainer's environment, and the base model's download.
PHASES = ("installing", "downloading_model", "loading", "training", "exporting")
BOOT_PHASES = frozenset({"installing", "downloading_model"})  # nothing is written yet
MAX_BOOT = 64  # a boot id is 16 hexadecimal characters; the callback schema allows 64


class ReportError(ValueError):
    """A report object that does not have the contract's shape."""


def utc_now() -> str:
    """UTC ISO 8601 with milliseconds and `Z`, as every time in the contract."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_boot_id() -> str:
    return uuid.uuid4().hex[:16]


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    """A report class's field names, in order (`fields` builds them anew on every call: a
    report's `to_json` is on the control plane's path of every progress report)."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


@dataclass(frozen=True, kw_only=True)
class Report:
    boot: str
    seq: int
    time: str
    type: ClassVar[str] = ""

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"boot": self.boot, "seq": self.seq, "time": self.time}
        body["type"] = self.type
        for name in _field_names(type(self)):
            value = getattr(self, name)
            if value is None and name in _OMITTED_WHEN_NONE:
                continue  # absent unless reported: older readers see no change
            body[name] = value
        return body


@dataclass(frozen=True, kw_only=True)
class Progress(Report):
    type: ClassVar[str] = "progress"
    phase: str
    step: int
    total_steps: int
    loss: float | None = None
    learning_rate: float | None = None
    tokens_per_s: float | None = None
    # downloading_model (and installing): bytes fetched so far, and of how many when known
    bytes_done: int | None = None
    bytes_total: int | None = None
    # R17: the training curve's other measures (absent from the JSON when not measured)
    epoch: float | None = None  # epochs done, fractional
    grad_norm: float | None = None  # before clipping
    eval_loss: float | None = None  # on the held-out validation split, when there is one


# The measures of a training progress report kept in the run's metric series (R17)
METRIC_FIELDS = (
    "step",
    "epoch",
    "loss",
    "learning_rate",
    "grad_norm",
    "tokens_per_s",
    "eval_loss",
)


@dataclass(frozen=True, kw_only=True)
class Log(Report):
    type: ClassVar[str] = "log"
    text: str


@dataclass(frozen=True, kw_only=True)
class Exported(Report):
    type: ClassVar[str] = "exported"
    object_key: str
    sha256: str
    size_bytes: int
    partial: bool


@dataclass(frozen=True, kw_only=True)
class Failed(Report):
    type: ClassVar[str] = "failed"
    reason: str
    detail: str


@dataclass(frozen=True, kw_only=True)
class Heartbeat(Report):
    type: ClassVar[str] = "heartbeat"


REPORT_TYPES: dict[str, type[Report]] = {
    cls.type: cls for cls in (Progress, Log, Exported, Failed, Heartbeat)
}
# The callback each report type is POSTed to (under /v1/trainer/runs/{id}/); heartbeats are not.
CALLBACK_PATHS = {"progress": "progress", "log": "logs", "exported": "exported", "failed": "failed"}
FINAL_TYPES = frozenset({"exported", "failed"})

_OPTIONAL_FLOATS = ("loss", "learning_rate", "tokens_per_s", "epoch", "grad_norm", "eval_loss")
_OPTIONAL_INTS = ("bytes_done", "bytes_total")
_OMITTED_WHEN_NONE = frozenset({*_OPTIONAL_INTS, "epoch", "grad_norm", "eval_loss"})


def _check_field(cls: type[Report], name: str, value: Any) -> Any:
    if name in _OPTIONAL_INTS and value is None:
        return None
    if name in ("seq", "step", "total_steps", "size_bytes", *_OPTIONAL_INTS):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INT:
            raise ReportError(f"{cls.type}.{name} must be an integer from 0 to {MAX_INT}")
        return value
    if name in _OPTIONAL_FLOATS:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ReportError(f"{cls.type}.{name} must be a number or null")
        if not math.isfinite(value):
            raise ReportError(f"{cls.type}.{name} must be finite")
        return float(value)
    if name == "partial":
        if not isinstance(value, bool):
            raise ReportError("exported.partial must be a boolean")
        return value
    if not isinstance(value, str):
        raise ReportError(f"{cls.type}.{name} must be a string")
    return value


def report_from_json(body: Mapping[str, Any]) -> Report:
    """The report in a JSON object (a stdout line, a mailbox file, a callback body)."""
    if not isinstance(body, Mapping):
        raise ReportError("a report is a JSON object")
    cls = REPORT_TYPES.get(body.get("type"))  # type: ignore[arg-type]
    if cls is None:
        raise ReportError(f"unknown report type {body.get('type')!r}")
    values: dict[str, Any] = {}
    for f in fields(cls):
        if f.name in body:
            values[f.name] = _check_field(cls, f.name, body[f.name])
        elif f.name not in _OPTIONAL_FLOATS + _OPTIONAL_INTS:
            raise ReportError(f"{cls.type} report lacks {f.name!r}")
    if not values["boot"] or len(values["boot"]) > MAX_BOOT:
        raise ReportError(f"boot must be 1 to {MAX_BOOT} characters")
    if cls is Progress and values["phase"] not in PHASES:
        raise ReportError(f"unknown phase {values['phase']!r}")
    return cls(**values)


def dumps(body: Mapping[str, Any]) -> str:
    """Compact, single-line, ASCII JSON (a log viewer never splits it)."""
    return json.dumps(body, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def format_report_line(report: Report) -> str:
    """`TENSORANT-REPORT <compact JSON>`, the stdout form of a report."""
    return REPORT_PREFIX + dumps(report.to_json())


def parse_report_line(line: str) -> Report | None:
    """The report on a log line, or None for an ordinary line (or a damaged report line).

    The prefix may follow a timestamp a log collector put in front of it."""
    at = line.find(REPORT_PREFIX)
    if at < 0:
        return None
    try:
        return report_from_json(bounded_loads(line[at + len(REPORT_PREFIX) :]))
    except (ValueError, ReportError):
        return None


def clip_log_text(text: str) -> str:
    return text if len(text) <= MAX_LOG_TEXT else text[: MAX_LOG_TEXT - 1] + "…"


@dataclass(frozen=True, kw_only=True)
class Status:
    """`status.json`: the latest progress report plus when it was last rewritten (a heartbeat).

    `last_activity_at` moves only while the training process makes progress (steps, downloads),
    so a stale one under a fresh `updated_at` means a hung process, not a dead one."""

    run_id: str
    progress: Progress
    updated_at: str
    last_activity_at: str
    attempt: int
    pod_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        body = self.progress.to_json()
        body.update(
            run_id=self.run_id,
            updated_at=self.updated_at,
            last_activity_at=self.last_activity_at,
            attempt=self.attempt,
            pod_id=self.pod_id,
        )
        return body

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Status:
        progress = report_from_json(body)
        if not isinstance(progress, Progress):
            raise ReportError("status.json holds a progress report")
        try:
            return cls(
                run_id=str(body["run_id"]),
                progress=progress,
                updated_at=str(body["updated_at"]),
                last_activity_at=str(body.get("last_activity_at", body["updated_at"])),
                attempt=_attempt(body.get("attempt", 1)),
                pod_id=body.get("pod_id"),
            )
        except KeyError as e:
            raise ReportError(f"status.json lacks {e.args[0]!r}") from None


def _attempt(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INT:
        raise ReportError(f"status.json attempt must be an integer from 0 to {MAX_INT}")
    return value
