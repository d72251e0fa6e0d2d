"""Webhook endpoints (R20): where an organization's owners want to be told of run state changes
and risk states, and how a delivery is signed so a receiver can trust it.

One `WebhookEndpoint` aggregate per registered URL. Its events carry the URL and the topics it
subscribes to, never its signing secret: the secret is kept in the vault only and shown once,
in the answer that created it.

Signing (docs/webhooks.md): `Tensorant-Signature: t=<unix seconds>,v1=<hex>` where the hex is
HMAC-SHA256 with the endpoint's secret over `<t>.<the exact body bytes>`. A receiver recomputes
it, compares in constant time and refuses a timestamp outside its replay window.
"""

from __future__ import annotations

import hashlib
import hmac
from datetime import datetime

from domain.base import TensorantAggregate, topic
from domain.errors import DomainError, NotFound

# What a delivery may be about (the payload's `type`), in the words receivers subscribe with.
RUN_STATE_CHANGED = "run.state_changed"
POD_STILL_BILLING = "pod.still_billing"
CLEANUP_NEEDS_MANUAL = "cleanup.needs_manual"
BALANCE_LOW = "balance.low"
EVENT_TYPES = (RUN_STATE_CHANGED, POD_STILL_BILLING, CLEANUP_NEEDS_MANUAL, BALANCE_LOW)

SIGNATURE_HEADER = "Tensorant-Signature"
EVENT_ID_HEADER = "Tensorant-Event-Id"
IDEMPOTENCY_HEADER = "Idempotency-Key"
DEFAULT_TOLERANCE_S = 300  # the replay window docs/webhooks.md recommends
SECRET_PREFIX = "whsec_"  # noqa: S105 - a prefix, not a secret
MAX_URL_LENGTH = 2000


def vault_name(endpoint_id: str) -> str:
    """The vault entry (per organization) holding an endpoint's signing secret."""
    return f"webhook:{endpoint_id}"


class WebhookEndpoint(TensorantAggregate):
    TOPIC = "tensorant.WebhookEndpoint"

    class Event(TensorantAggregate.Event):
        TOPIC = "tensorant.WebhookEndpoint.Event"

    class Created(Event, TensorantAggregate.Created):
        TOPIC = "tensorant.WebhookEndpoint.Created"

    def __init__(self) -> None:
        """State is set by the created event's apply(); annotations below only document it."""

    org_id: str
    url: str
    events: list[str]
    removed: bool

    @classmethod
    def register(
        cls, org_id: str, url: str, events: list[str], actor: str, at: datetime
    ) -> WebhookEndpoint:
        url = url.strip()
        if not url or len(url) > MAX_URL_LENGTH:
            raise InvalidWebhook(f"the URL must be 1 to {MAX_URL_LENGTH} characters")
        unknown = sorted(set(events) - set(EVENT_TYPES))
        if unknown:
            raise InvalidWebhook(
                f"unknown event types {', '.join(unknown)}; known: {', '.join(EVENT_TYPES)}"
            )
        chosen = [e for e in EVENT_TYPES if e in events] if events else list(EVENT_TYPES)
        return cls._create(
            WebhookRegistered, actor=actor, timestamp=at, org_id=org_id, url=url, events=chosen
        )

    def remove(self, actor: str, at: datetime) -> None:
        if self.removed:
            raise NotFound(f"webhook {self.id} not found")
        self._trigger(WebhookRemoved, actor, at)


@topic("tensorant.WebhookRegistered")
class WebhookRegistered(WebhookEndpoint.Created):
    org_id: str
    url: str
    events: list[str]

    def apply(self, aggregate: WebhookEndpoint) -> None:
        aggregate.org_id, aggregate.url = self.org_id, self.url
        aggregate.events, aggregate.removed = list(self.events), False


@topic("tensorant.WebhookRemoved")
class WebhookRemoved(WebhookEndpoint.Event):
    def apply(self, aggregate: WebhookEndpoint) -> None:
        aggregate.removed = True


class InvalidWebhook(DomainError):
    problem = "invalid-webhook"
    title = "The webhook endpoint is not valid"


# ---------------------------------------------------------------- signing (pure: no I/O)


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The hex HMAC-SHA256 of `<timestamp>.<body>` with the endpoint's secret."""
    message = str(int(timestamp)).encode() + b"." + body
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def signature_header(secret: str, timestamp: int, body: bytes) -> str:
    """The `Tensorant-Signature` header's value for one attempt."""
    return f"t={int(timestamp)},v1={signature(secret, timestamp, body)}"


class SignatureInvalid(ValueError):
    """A delivery that does not verify (what a receiver answers 400 to)."""


def verify_signature(
    secret: str,
    header: str,
    body: bytes,
    now: float,
    tolerance: float = DEFAULT_TOLERANCE_S,
) -> int:
    """Check a delivery as a receiver does; returns its timestamp or raises SignatureInvalid.

    Every `v1=` value is tried (a sender may sign with more than one secret while one is being
    replaced); the timestamp must be within `tolerance` seconds of `now` either way.
    """
    timestamp: int | None = None
    candidates: list[str] = []
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        if name == "t" and value.isdigit():
            timestamp = int(value)
        elif name == "v1" and value:
            candidates.append(value)
    if timestamp is None or not candidates:
        raise SignatureInvalid("the header has no t= timestamp or no v1= signature")
    if abs(now - timestamp) > tolerance:
        raise SignatureInvalid("the timestamp is outside the replay window")
    expected = signature(secret, timestamp, body)
    if not any(hmac.compare_digest(expected, c) for c in candidates):
        raise SignatureInvalid("no signature matches")
    return timestamp


def backoff_seconds(attempts: int, base: float, cap: float) -> float:
    """The wait after the `attempts`-th failed attempt: base, 2x, 4x, ... never above `cap`."""
    if attempts < 1:
        return 0.0
    return float(min(cap, base * (2 ** min(attempts - 1, 62))))
