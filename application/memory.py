"""In-process implementations of the ports (`application.ports`): what the embedded default
runs on one process, and what services built without a read side (unit tests) are given."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

from application.errors import HubUnavailable
from application.ports import HubAccount, Lease


class NoRuns:
    """A RunIndex that knows no runs (services built without a read side, e.g. in tests)."""

    def live_runs(self) -> list[tuple[str, str]]:
        return []

    def live_pods(self, org_id: str) -> int:
        return 0

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


class NoHub:
    """A ModelHub that cannot be reached (services built without one, e.g. in tests)."""

    def whoami(self, token: str) -> HubAccount:
        raise HubUnavailable("no Hugging Face Hub is configured")

    def can_read(self, token: str, repo_id: str) -> bool:
        raise HubUnavailable("no Hugging Face Hub is configured")

    def page(self, repo_id: str) -> str:
        return f"https://huggingface.co/{repo_id}"
