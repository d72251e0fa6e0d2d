"""In-process implementations of the ports (`application.ports`): what the embedded default
runs on one process, and what services built without a read side (unit tests) are given."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from application.errors import HubUnavailable
from application.ports import HubAccount, Lease, ReportLine, StateChange, WhileAt, change_state


class NoRuns:
    """A RunIndex that knows no runs (services built without a read side, e.g. in tests)."""

    def live_runs(self) -> list[tuple[str, str]]:
        return []

    def live_pods(self, org_id: str) -> int:
        return 0

    def busy_org_ids(self) -> set[str]:
        return set()

    def org_ids(self) -> list[str]:
        return []

    def reconciled(self, at: datetime, organizations: int) -> None:
        return None


class NothingOwned:
    """OwnedResources without a read side: no bill is recorded for anyone."""

    def owned(self, org_id: str) -> set[tuple[str, str]]:
        return set()


class LocalLocks:
    """One process (the embedded default): a lock per run id."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}

    @contextmanager
    def hold(self, run_id: str) -> Iterator[None]:
        with self._guard:
            lock = self._locks.setdefault(run_id, threading.Lock())
        with lock:
            yield


class LocalLeases:
    """One process: a set of names held."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._held: set[str] = set()

    def try_take(self, name: str) -> Lease | None:
        with self._guard:
            if name in self._held:
                return None
            self._held.add(name)
        return _LocalLease(self, name)

    def _release(self, name: str) -> None:
        with self._guard:
            self._held.discard(name)


@dataclass
class _LocalLease:
    owner: LocalLeases
    name: str

    def release(self) -> None:
        self.owner._release(self.name)


class MemoryReportStore:
    """In-process reports (unit tests); lines kept as (time, text) per run."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self.claims: dict[tuple[str, str, int], str] = {}
        self.lines: dict[str, list[tuple[datetime, str]]] = {}
        self.state: dict[tuple[str, str], dict[str, Any]] = {}
        self.metrics: dict[str, dict[tuple[str, int], dict[str, Any]]] = {}

    def append_reports(self, run_id: str, lines: list[ReportLine], via: str) -> int:
        with self._guard:
            stored = 0
            for boot, seq, at, text in lines:
                if boot is not None and seq is not None:
                    if (run_id, boot, seq) in self.claims:
                        continue
                    self.claims[(run_id, boot, seq)] = via
                self.lines.setdefault(run_id, []).append((at, text))
                stored += 1
            return stored

    def append_many(
        self,
        batches: Mapping[str, Sequence[ReportLine]],
        via: str,
        states: Mapping[str, Mapping[str, dict[str, Any]]],
        seen: tuple[str, dict[str, Any]] | None = None,
    ) -> dict[str, int]:
        stored: dict[str, int] = {}
        with self._guard:
            for run_id, lines in batches.items():
                stored[run_id] = 0
                reported = False
                for boot, seq, at, text in lines:
                    if boot is not None and seq is not None:
                        if (run_id, boot, seq) in self.claims:
                            continue
                        self.claims[(run_id, boot, seq)] = via
                        reported = True
                    self.lines.setdefault(run_id, []).append((at, text))
                    stored[run_id] += 1
                if reported and seen is not None:
                    self.state[(run_id, seen[0])] = dict(seen[1])
            for run_id, named in states.items():
                for name, body in named.items():
                    self.state[(run_id, name)] = dict(body)
        return stored

    def claim(
        self,
        run_id: str,
        boot: str,
        seq: int,
        via: str,
        state: Mapping[str, StateChange] | None = None,
        while_at: WhileAt | None = None,
    ) -> bool:
        if while_at is not None:
            while_at.require()
        with self._guard:
            if (run_id, boot, seq) in self.claims:
                return False
            bodies = {}  # all computed before anything changes, as a transaction would
            for name, change in (state or {}).items():
                current = self.state.get((run_id, name))
                body = change_state(change, dict(current) if current is not None else None)
                if body is not None:
                    bodies[(run_id, name)] = dict(body)
            self.claims[(run_id, boot, seq)] = via
            self.state.update(bodies)
            return True

    def claimed_seqs(self, run_id: str, boot: str) -> set[int]:
        with self._guard:
            return {seq for r, b, seq in self.claims if r == run_id and b == boot}

    def get_state(self, run_id: str, name: str) -> dict[str, Any] | None:
        with self._guard:
            body = self.state.get((run_id, name))
            return dict(body) if body is not None else None

    def get_states(self, run_ids: list[str], name: str) -> dict[str, dict[str, Any]]:
        with self._guard:
            found = ((r, self.state.get((r, name))) for r in run_ids)
            return {r: dict(body) for r, body in found if body is not None}

    def get_states_later(
        self, run_ids: list[str], name: str
    ) -> Callable[[], dict[str, dict[str, Any]]]:
        found = self.get_states(run_ids, name)
        return lambda: found

    def put_state(self, run_id: str, name: str, body: dict[str, Any]) -> None:
        with self._guard:
            self.state[(run_id, name)] = dict(body)

    def add_metric(self, run_id: str, boot: str, seq: int, point: dict[str, Any]) -> bool:
        with self._guard:
            series = self.metrics.setdefault(run_id, {})
            if (boot, seq) in series:
                return False
            series[(boot, seq)] = dict(point)
            return True


class NoHub:
    """A ModelHub that cannot be reached (services built without one, e.g. in tests)."""

    def whoami(self, token: str) -> HubAccount:
        raise HubUnavailable("no Hugging Face Hub is configured")

    def can_read(self, token: str, repo_id: str) -> bool:
        raise HubUnavailable("no Hugging Face Hub is configured")

    def page(self, repo_id: str) -> str:
        return f"https://huggingface.co/{repo_id}"

    def revision(self, token: str | None, repo_id: str) -> str:
        raise HubUnavailable("no Hugging Face Hub is configured")
