"""The Hugging Face token connection (C7): a token is checked against the Hub before it is
stored, lives only in the vault, and is what a draft on a gated model is checked with."""

from __future__ import annotations

from dataclasses import dataclass

from application import errors
from application.conflicts import retry_on_conflict
from application.log import TensorantLog
from application.ports import Clock, HubAccount, ModelHub, SecretVault
from domain import keys
from domain.base_models import access_denied, gated_model, no_token, storage_folder
from domain.errors import NotFound
from domain.hub import CONNECTED, HubConnection, HubNotConnected, ensure_hub_token

HUB_TOKEN = "huggingface_token"  # noqa: S105 - the vault entry's name, not a secret


@dataclass(frozen=True)
class HubService:
    log: TensorantLog
    hub: ModelHub
    vault: SecretVault
    clock: Clock

    def _load(self, org_id: str, actor: str) -> HubConnection:
        """The organization's Hub connection, opened on first use (older organizations have
        none until their first connect)."""
        self.log.organization(org_id)  # an unknown organization is not found
        try:
            return self.log.load(HubConnection, HubConnection.id_for(org_id), org_id)
        except NotFound:
            return HubConnection.open(org_id, actor, self.clock.now())

    def connection(self, org_id: str) -> HubConnection | None:
        """Read, not changed (`peek`): None when the organization never connected a token."""
        found = self.log.peek((HubConnection, HubConnection.id_for(org_id), org_id))[0]
        return found if isinstance(found, HubConnection) else None

    def _check(self, conn: HubConnection, token: str, actor: str) -> HubAccount:
        """Ask the Hub who the token is; a refusal is recorded for auditors, without the token."""
        try:
            return self.hub.whoami(token)
        except (errors.InvalidHubToken, errors.HubUnavailable) as e:
            conn.record_check_failed(e.problem, e.detail, actor, self.clock.now())
            e.position = self.log.save_all(conn)
            raise

    @retry_on_conflict
    def connect(self, org_id: str, actor: str, token: str) -> int:
        """C7: saved (or rotated, recording both fingerprints) only after the Hub accepted it;
        the vault is written before the event, so a saved connection always has its token."""
        value = ensure_hub_token(token)
        conn = self._load(org_id, actor)
        account = self._check(conn, value, actor)
        self.vault.put(org_id, HUB_TOKEN, value)
        conn.save(account.username, account.role, keys.fingerprint(value), actor, self.clock.now())
        return self.log.save_all(conn)

    @retry_on_conflict
    def disconnect(self, org_id: str, actor: str) -> int:
        """C7: the token leaves the vault; runs already started keep what they fetched."""
        conn = self._load(org_id, actor)
        conn.disconnect(actor, self.clock.now())
        n = self.log.save_all(conn)
        self.vault.delete(org_id, HUB_TOKEN)
        return n

    def token(self, org_id: str) -> str | None:
        """The organization's token, read per call so a rotation reaches the next Pod."""
        conn = self.connection(org_id)
        if conn is None or conn.status != CONNECTED:
            return None
        return self.vault.get(org_id, HUB_TOKEN)

    def ensure_can_read(self, org_id: str, base_model: str) -> None:
        """C7: a gated catalogue model needs a connected token whose account was granted the
        repository (asked of the Hub without downloading anything)."""
        model = gated_model(base_model)
        if model is None:
            return
        conn = self.connection(org_id)
        if conn is None or conn.status != CONNECTED:
            raise no_token(model)
        if not self.hub.can_read(self.vault.get(org_id, HUB_TOKEN), model.id):
            raise access_denied(model, conn.username, self.hub.page(model.id))

    def revision(self, org_id: str, base_model: str) -> str | None:
        """R19: the commit a Hub base model's `main` is at, asked at launch (with the
        organization's token for a gated model); None for a storage model, or when the Hub
        cannot say (the trainer then reads `main` and records the commit it read)."""
        if storage_folder(base_model) is not None:
            return None
        token = self.token(org_id) if gated_model(base_model) else None
        try:
            return self.hub.revision(token, base_model)
        except (errors.HubUnavailable, NotFound):
            return None

    def token_for_run(self, org_id: str, base_model: str) -> str:
        """C7: a run's Pod gets the token only when its base model is gated, and only while the
        organization has one connected (asked for with the run's token, never put in the
        Pod's environment or on storage)."""
        model = gated_model(base_model)
        if model is None:
            raise NotFound(f"{base_model} is not gated: its runs get no Hugging Face token")
        token = self.token(org_id)
        if token is None:
            raise HubNotConnected("no Hugging Face token is connected")
        return token
