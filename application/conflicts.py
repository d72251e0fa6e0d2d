"""Optimistic concurrency: a command that lost a race with another writer loads and tries again."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from eventsourcing.persistence import IntegrityError

P = ParamSpec("P")
R = TypeVar("R")
CONFLICT_ATTEMPTS = 5


def retry_on_conflict(command: Callable[P, R]) -> Callable[P, R]:
    """When a worker saved the same aggregate first, load and try again.

    For commands that load, change and save: they decide from the aggregate they load, and
    their calls to RunPod are idempotent or re-read (a second resume of a running Pod changes
    nothing), so repeating one is safe. The reactor retries by itself (it looks again).
    """

    @functools.wraps(command)
    def attempt(*args: P.args, **kwargs: P.kwargs) -> R:
        for n in range(CONFLICT_ATTEMPTS - 1):
            try:
                return command(*args, **kwargs)
            except IntegrityError:
                time.sleep(0.005 * (n + 1))
        return command(*args, **kwargs)

    return attempt
