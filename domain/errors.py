"""The base of every refusal the system can give; each carries a stable problem type and status."""

from __future__ import annotations


class TensorantError(Exception):
    """A refusal a user can act on; `problem` is the stable slug of its problem+json type."""

    problem: str = "error"
    status: int = 400
    title: str = "Request refused"
    # The notification id of an event that recorded the refusal (e.g. LaunchRejected), so the
    # API can make it visible to the next read like any other write; 0 when nothing was saved.
    position: int = 0

    def __init__(self, detail: str, **extra: object) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = extra


class DomainError(TensorantError):
    """A rule of the domain refused the command; nothing was saved."""

    problem = "rule-violated"
    status = 422
    title = "A rule refused the request"


class NotFound(DomainError):
    problem = "not-found"
    status = 404
    title = "Not found"


class Forbidden(DomainError):
    problem = "forbidden"
    status = 403
    title = "Your role does not allow this"


class Conflict(DomainError):
    problem = "conflict"
    status = 409
    title = "The request conflicts with the current state"


class IllegalTransition(Conflict):
    problem = "illegal-transition"
    title = "Not allowed in the current state"
