"""A failure the trainer reports with a stable reason code (T1) instead of a traceback."""

from __future__ import annotations


class TrainerFailure(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class Interrupted(BaseException):
    """SIGTERM while nothing could be saved yet (loading); a BaseException so no library's
    `except Exception` swallows it."""
