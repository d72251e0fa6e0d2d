"""The organization's RunPod compute connection (C1–C4); the key itself lives only in the vault."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from domain.base import TensorantAggregate, stable_id, topic
from domain.errors import Conflict

NOT_CONNECTED, CONNECTED = "not_connected", "connected"
UNPROVEN, PROVEN = "unproven", "proven"


class Connection(TensorantAggregate):
    TOPIC = "tensorant.Connection"

    class Event(TensorantAggregate.Event):
        TOPIC = "tensorant.Connection.Event"

    class Created(Event, TensorantAggregate.Created):
        TOPIC = "tensorant.Connection.Created"

    def __init__(self) -> None:
        """State is set by the created event's apply(); annotations below only document it."""

    org_id: str
    status: str
    account_id: str | None
    key_fingerprint: str | None
    write_permission: str
    write_uses: list[str]
    balance: Decimal | None
    spend_per_hour: Decimal | None
    connected_at: datetime | None
    rotated_at: datetime | None
    # A private registry's credentials for a baked trainer image: RunPod's id for them and the
    # secret's fingerprint; the username and secret live only in the vault.
    registry_auth_id: str | None
    registry_fingerprint: str | None

    @staticmethod
    def id_for(org_id: str) -> Any:
        return stable_id("connection", org_id)

    @classmethod
    def open(cls, org_id: str, actor: str, at: datetime) -> Connection:
        return cls._create(
            ConnectionCreated, id=cls.id_for(org_id), actor=actor, timestamp=at, org_id=org_id
        )

    def record_check_failed(self, reason: str, detail: str, actor: str, at: datetime) -> None:
        """C1: a failed attempt is kept for auditors, without key material."""
        self._trigger(ConnectionCheckFailed, actor, at, reason=reason, detail=detail)

    def ensure_not_connected(self) -> None:
        if self.status == CONNECTED:
            raise AlreadyConnected("RunPod is already connected; use Replace key to rotate it")

    def save(
        self,
        account_id: str,
        key_fingerprint: str,
        balance: Decimal | None,
        spend_per_hour: Decimal,
        actor: str,
        at: datetime,
        probe_answer: str | None = None,
    ) -> None:
        self.ensure_not_connected()
        self._trigger(
            ConnectionSaved,
            actor,
            at,
            account_id=account_id,
            key_fingerprint=key_fingerprint,
            balance=balance,
            spend_per_hour=spend_per_hour,
            probe_answer=probe_answer,
        )

    def rotate(
        self,
        account_id: str,
        key_fingerprint: str,
        balance: Decimal | None,
        spend_per_hour: Decimal,
        live_pods: int,
        actor: str,
        at: datetime,
        probe_answer: str | None = None,
    ) -> None:
        """C2/C4: the new key must reach the same RunPod account while Pods depend on it."""
        if self.status != CONNECTED:
            raise NotConnected("RunPod is not connected; connect it first")
        if account_id != self.account_id and live_pods > 0:
            raise KeyForOtherAccount(
                f"the new key belongs to RunPod account {account_id}, not {self.account_id}; "
                f"{live_pods} Pod(s) still need the current account for recovery and cleanup"
            )
        self._trigger(
            KeyRotated,
            actor,
            at,
            old_fingerprint=self.key_fingerprint or "",
            new_fingerprint=key_fingerprint,
            account_id=account_id,
            balance=balance,
            spend_per_hour=spend_per_hour,
            probe_answer=probe_answer,
        )

    def disconnect(self, live_pods: int, actor: str, at: datetime) -> None:
        """C4: the key must stay valid through recovery and cleanup."""
        if self.status != CONNECTED:
            raise NotConnected("RunPod is not connected")
        if live_pods > 0:
            raise PodsDependOnKey(
                f"{live_pods} Pod(s) are running, retained or awaiting cleanup with this key; "
                "release them first (see /v1/cleanup)"
            )
        self._trigger(Disconnected, actor, at, key_fingerprint=self.key_fingerprint or "")

    def refresh_account(
        self, balance: Decimal | None, spend_per_hour: Decimal, actor: str, at: datetime
    ) -> None:
        if self.status == CONNECTED and (balance, spend_per_hour) != (
            self.balance,
            self.spend_per_hour,
        ):
            self._trigger(
                AccountRefreshed, actor, at, balance=balance, spend_per_hour=spend_per_hour
            )

    def record_write_use(
        self, operation: str, key_fingerprint: str, actor: str, at: datetime
    ) -> None:
        """C3: a launch and a release that succeeded with this key prove its write permission."""
        if (
            self.status != CONNECTED
            or self.write_permission == PROVEN
            or key_fingerprint != self.key_fingerprint
            or operation in self.write_uses
        ):
            return
        self._trigger(WriteUseRecorded, actor, at, operation=operation)
        if {"launch", "release"} <= set(self.write_uses):
            self._trigger(WritePermissionProven, actor, at, key_fingerprint=key_fingerprint)

    def ensure_connected(self) -> None:
        if self.status != CONNECTED:
            raise NotConnected("connect RunPod first (Settings → Connections)")

    def attach_registry(
        self, registry_auth_id: str, fingerprint: str, actor: str, at: datetime
    ) -> None:
        """Registry credentials RunPod keeps under `registry_auth_id`; replaces any before."""
        self.ensure_connected()
        self._trigger(
            RegistryCredentialsAttached,
            actor,
            at,
            registry_auth_id=registry_auth_id,
            fingerprint=fingerprint,
            replaced_id=getattr(self, "registry_auth_id", None),
        )

    def remove_registry(self, actor: str, at: datetime) -> None:
        if getattr(self, "registry_auth_id", None) is None:
            return  # removing nothing is done already (DELETE is idempotent)
        self._trigger(
            RegistryCredentialsRemoved,
            actor,
            at,
            registry_auth_id=self.registry_auth_id or "",
            fingerprint=self.registry_fingerprint or "",
        )


@topic("tensorant.ConnectionCreated")
class ConnectionCreated(Connection.Created):
    org_id: str

    def apply(self, aggregate: Connection) -> None:
        aggregate.org_id = self.org_id
        _reset(aggregate)


def _reset(aggregate: Connection) -> None:
    aggregate.status = NOT_CONNECTED
    aggregate.account_id = aggregate.key_fingerprint = None
    aggregate.write_permission = UNPROVEN
    aggregate.write_uses = []
    aggregate.balance = aggregate.spend_per_hour = None
    aggregate.connected_at = aggregate.rotated_at = None
    # Registry credentials outlive a disconnect: RunPod keeps them in the account.
    if not hasattr(aggregate, "registry_auth_id"):
        aggregate.registry_auth_id = aggregate.registry_fingerprint = None


@topic("tensorant.ConnectionCheckFailed")
class ConnectionCheckFailed(Connection.Event):
    reason: str
    detail: str


@topic("tensorant.ConnectionSaved")
class ConnectionSaved(Connection.Event):
    account_id: str
    key_fingerprint: str
    balance: Decimal | None
    spend_per_hour: Decimal
    # What RunPod answered the key check's write probe (for auditors); older events lack it.
    probe_answer: str | None = None

    def apply(self, aggregate: Connection) -> None:
        aggregate.status = CONNECTED
        aggregate.account_id = self.account_id
        aggregate.key_fingerprint = self.key_fingerprint
        aggregate.balance, aggregate.spend_per_hour = self.balance, self.spend_per_hour
        aggregate.write_permission, aggregate.write_uses = UNPROVEN, []
        aggregate.connected_at, aggregate.rotated_at = self.timestamp, None


@topic("tensorant.KeyRotated")
class KeyRotated(Connection.Event):
    old_fingerprint: str
    new_fingerprint: str
    account_id: str
    balance: Decimal | None
    spend_per_hour: Decimal
    probe_answer: str | None = None

    def apply(self, aggregate: Connection) -> None:
        aggregate.key_fingerprint = self.new_fingerprint
        aggregate.account_id = self.account_id
        aggregate.balance, aggregate.spend_per_hour = self.balance, self.spend_per_hour
        aggregate.write_permission, aggregate.write_uses = UNPROVEN, []
        aggregate.rotated_at = self.timestamp


@topic("tensorant.WriteUseRecorded")
class WriteUseRecorded(Connection.Event):
    operation: str

    def apply(self, aggregate: Connection) -> None:
        aggregate.write_uses = [*aggregate.write_uses, self.operation]


@topic("tensorant.WritePermissionProven")
class WritePermissionProven(Connection.Event):
    key_fingerprint: str

    def apply(self, aggregate: Connection) -> None:
        aggregate.write_permission = PROVEN


@topic("tensorant.Disconnected")
class Disconnected(Connection.Event):
    key_fingerprint: str

    def apply(self, aggregate: Connection) -> None:
        _reset(aggregate)


@topic("tensorant.RegistryCredentialsAttached")
class RegistryCredentialsAttached(Connection.Event):
    registry_auth_id: str
    fingerprint: str
    replaced_id: str | None = None

    def apply(self, aggregate: Connection) -> None:
        aggregate.registry_auth_id = self.registry_auth_id
        aggregate.registry_fingerprint = self.fingerprint


@topic("tensorant.RegistryCredentialsRemoved")
class RegistryCredentialsRemoved(Connection.Event):
    registry_auth_id: str
    fingerprint: str

    def apply(self, aggregate: Connection) -> None:
        aggregate.registry_auth_id = aggregate.registry_fingerprint = None


@topic("tensorant.AccountRefreshed")
class AccountRefreshed(Connection.Event):
    balance: Decimal | None
    spend_per_hour: Decimal

    def apply(self, aggregate: Connection) -> None:
        aggregate.balance, aggregate.spend_per_hour = self.balance, self.spend_per_hour


class AlreadyConnected(Conflict):
    problem = "already-connected"


class NotConnected(Conflict):
    problem = "not-connected"
    title = "RunPod is not connected"


class KeyForOtherAccount(Conflict):
    problem = "key-for-other-account"
    title = "The new key belongs to another RunPod account"


class PodsDependOnKey(Conflict):
    problem = "pods-depend-on-key"
    title = "Pods still depend on this key"
