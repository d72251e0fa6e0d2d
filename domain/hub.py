"""The organization's Hugging Face token connection (C7): it lets runs train gated Hub models.

The token itself lives only in the vault; events carry its fingerprint, the Hub user it belongs
to and its role. One per organization, opened by its first connect (organizations made before
it existed have none until then).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from domain.base import TensorantAggregate, stable_id, topic
from domain.errors import Conflict, DomainError

NOT_CONNECTED, CONNECTED = "not_connected", "connected"


class HubConnection(TensorantAggregate):
    TOPIC = "tensorant.HubConnection"

    class Event(TensorantAggregate.Event):
        TOPIC = "tensorant.HubConnection.Event"

    class Created(Event, TensorantAggregate.Created):
        TOPIC = "tensorant.HubConnection.Created"

    def __init__(self) -> None:
        """State is set by the created event's apply(); annotations below only document it."""

    org_id: str
    status: str
    username: str | None
    role: str | None
    token_fingerprint: str | None
    connected_at: datetime | None
    rotated_at: datetime | None

    @staticmethod
    def id_for(org_id: str) -> Any:
        return stable_id("huggingface", org_id)

    @classmethod
    def open(cls, org_id: str, actor: str, at: datetime) -> HubConnection:
        return cls._create(
            HubConnectionOpened, id=cls.id_for(org_id), actor=actor, timestamp=at, org_id=org_id
        )

    def record_check_failed(self, reason: str, detail: str, actor: str, at: datetime) -> None:
        """A token the Hub refused is kept for auditors as its reason only, never the token."""
        self._trigger(HubTokenCheckFailed, actor, at, reason=reason, detail=detail)

    def save(self, username: str, role: str, fingerprint: str, actor: str, at: datetime) -> None:
        """Connect, or rotate when a token is connected: the rotation records both
        fingerprints, so auditors see which token replaced which."""
        if self.status == CONNECTED:
            self._trigger(
                HubTokenRotated,
                actor,
                at,
                old_fingerprint=self.token_fingerprint or "",
                new_fingerprint=fingerprint,
                username=username,
                role=role,
            )
            return
        self._trigger(
            HubTokenSaved, actor, at, username=username, role=role, token_fingerprint=fingerprint
        )

    def disconnect(self, actor: str, at: datetime) -> None:
        if self.status != CONNECTED:
            raise HubNotConnected("no Hugging Face token is connected")
        self._trigger(HubTokenRemoved, actor, at, token_fingerprint=self.token_fingerprint or "")


@topic("tensorant.HubConnectionOpened")
class HubConnectionOpened(HubConnection.Created):
    org_id: str

    def apply(self, aggregate: HubConnection) -> None:
        aggregate.org_id = self.org_id
        _reset(aggregate)


def _reset(aggregate: HubConnection) -> None:
    aggregate.status = NOT_CONNECTED
    aggregate.username = aggregate.role = aggregate.token_fingerprint = None
    aggregate.connected_at = aggregate.rotated_at = None


@topic("tensorant.HubTokenCheckFailed")
class HubTokenCheckFailed(HubConnection.Event):
    reason: str
    detail: str


@topic("tensorant.HubTokenSaved")
class HubTokenSaved(HubConnection.Event):
    username: str
    role: str
    token_fingerprint: str

    def apply(self, aggregate: HubConnection) -> None:
        aggregate.status = CONNECTED
        aggregate.username, aggregate.role = self.username, self.role
        aggregate.token_fingerprint = self.token_fingerprint
        aggregate.connected_at, aggregate.rotated_at = self.timestamp, None


@topic("tensorant.HubTokenRotated")
class HubTokenRotated(HubConnection.Event):
    old_fingerprint: str
    new_fingerprint: str
    username: str
    role: str

    def apply(self, aggregate: HubConnection) -> None:
        aggregate.username, aggregate.role = self.username, self.role
        aggregate.token_fingerprint = self.new_fingerprint
        aggregate.rotated_at = self.timestamp


@topic("tensorant.HubTokenRemoved")
class HubTokenRemoved(HubConnection.Event):
    token_fingerprint: str

    def apply(self, aggregate: HubConnection) -> None:
        _reset(aggregate)


def ensure_hub_token(value: str) -> str:
    """C7: the Hugging Face field takes a Hugging Face token (hf_…), not a RunPod or S3 key."""
    v = value.strip()
    if v.startswith(("rpa_", "rps_", "user_")):
        raise WrongKindOfHubToken(
            "this looks like a RunPod key; paste a Hugging Face access token (hf_…, from "
            "huggingface.co → Settings → Access Tokens) here"
        )
    if len(v) < 8 or any(c.isspace() for c in v):
        raise WrongKindOfHubToken("this does not look like a Hugging Face access token (hf_…)")
    return v


class WrongKindOfHubToken(DomainError):
    problem = "wrong-kind-of-key"
    title = "A key was pasted in the wrong field"


class HubNotConnected(Conflict):
    problem = "not-connected"
    title = "No Hugging Face token is connected"
