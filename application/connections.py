"""The RunPod compute connection (C1–C5): a key is checked before it is stored, and lives only
in the vault."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from application import errors
from application.conflicts import retry_on_conflict
from application.log import TensorantLog
from application.ports import (
    Clock,
    ComputeProvider,
    GpuOffer,
    NetworkVolume,
    RunIndex,
    SecretVault,
)
from domain import keys
from domain.base import SYSTEM
from domain.connection import CONNECTED, Connection

RUNPOD_KEY = "runpod_api_key"  # the vault entry's name
REGISTRY_USERNAME, REGISTRY_PASSWORD = "registry_username", "registry_password"


@dataclass(frozen=True)
class ConnectionService:
    log: TensorantLog
    compute: ComputeProvider
    vault: SecretVault
    clock: Clock
    pods: RunIndex  # C4: how many Pods depend on the key

    def runpod_key(self, org_id: str) -> str:
        """The organization's key, read per call so a rotation reaches in-flight work (C2)."""
        return self.vault.get(org_id, RUNPOD_KEY)

    def _check_key(self, conn: Connection, api_key: str, actor: str) -> Any:
        """Check a key against RunPod; a failure is recorded for auditors without key material."""
        try:
            return self.compute.check_account(api_key)
        except (
            errors.InvalidCredentials,
            errors.InsufficientPermissions,
            errors.ProviderUnavailable,
        ) as e:
            conn.record_check_failed(e.problem, e.detail, actor, self.clock.now())
            e.position = self.log.save_all(conn)
            raise

    @retry_on_conflict
    def connect(self, org_id: str, actor: str, api_key: str) -> int:
        """C1: saved only after RunPod accepted the key."""
        self.log.organization(org_id).ensure_may_bring_own_connections()
        key = keys.ensure_compute_key(api_key)
        conn = self.log.connection(org_id)
        conn.ensure_not_connected()
        account = self._check_key(conn, key, actor)
        self.vault.put(org_id, RUNPOD_KEY, key)
        conn.save(
            account.id,
            keys.fingerprint(key),
            account.balance,
            account.spend_per_hour,
            actor,
            self.clock.now(),
            probe_answer=account.probe_answer,
        )
        return self.log.save_all(conn)

    @retry_on_conflict
    def rotate_key(self, org_id: str, actor: str, api_key: str) -> int:
        """C2: the new key is checked first; another account's key only when no Pod needs ours."""
        self.log.organization(org_id).ensure_may_bring_own_connections()
        key = keys.ensure_compute_key(api_key)
        conn = self.log.connection(org_id)
        conn.ensure_connected()
        account = self._check_key(conn, key, actor)
        conn.rotate(
            account.id,
            keys.fingerprint(key),
            account.balance,
            account.spend_per_hour,
            self.pods.live_pods(org_id),
            actor,
            self.clock.now(),
            probe_answer=account.probe_answer,
        )
        # The vault is written only after the rules passed; in-flight work reads it per call (C2).
        self.vault.put(org_id, RUNPOD_KEY, key)
        return self.log.save_all(conn)

    @retry_on_conflict
    def disconnect(self, org_id: str, actor: str) -> int:
        """C4: refused while Pods depend on the key; then the key leaves the vault."""
        conn = self.log.connection(org_id)
        conn.disconnect(self.pods.live_pods(org_id), actor, self.clock.now())
        n = self.log.save_all(conn)
        self.vault.delete(org_id, RUNPOD_KEY)
        return n

    # ---------------------------------------------------------------- registry credentials
    def registry_name(self, org_id: str) -> str:
        """The name RunPod keeps the organization's registry credentials under (one per org)."""
        return f"tensorant-{org_id}"

    @retry_on_conflict
    def attach_registry(self, org_id: str, actor: str, username: str, password: str) -> int:
        """A baked trainer image's private registry: the credentials are registered with
        RunPod (which pulls the image with them) and kept only in the vault; events carry
        RunPod's id and the secret's fingerprint."""
        self.log.organization(org_id).ensure_may_bring_own_connections()
        conn = self.log.connection(org_id)
        conn.ensure_connected()
        user, secret = username.strip(), password.strip()
        name = self.registry_name(org_id)
        reg_id = self.compute.save_registry_auth(self.runpod_key(org_id), name, user, secret)
        self.vault.put(org_id, REGISTRY_USERNAME, user)
        self.vault.put(org_id, REGISTRY_PASSWORD, secret)
        conn.attach_registry(reg_id, keys.fingerprint(secret), actor, self.clock.now())
        return self.log.save_all(conn)

    @retry_on_conflict
    def remove_registry(self, org_id: str, actor: str) -> int:
        """Idempotent: RunPod forgets the credentials (gone is fine), then the vault does."""
        conn = self.log.connection(org_id)
        reg_id = conn.registry_auth_id
        if reg_id is None:
            return 0
        # Without a connected key RunPod cannot be asked: its copy stays in the account (the
        # owner deletes it in RunPod's console), ours are forgotten.
        if conn.status == CONNECTED:
            self.compute.delete_registry_auth(self.runpod_key(org_id), reg_id)
        conn.remove_registry(actor, self.clock.now())
        n = self.log.save_all(conn)
        for entry in (REGISTRY_USERNAME, REGISTRY_PASSWORD):
            self.vault.delete(org_id, entry)
        return n

    @retry_on_conflict
    def refresh_account(self, org_id: str) -> int:
        """C1: the card's balance and spend, as RunPod says now."""
        conn = self.log.connection(org_id)
        if conn.status != CONNECTED:
            return 0
        account = self.compute.check_account(self.runpod_key(org_id))
        conn.refresh_account(account.balance, account.spend_per_hour, SYSTEM, self.clock.now())
        return self.log.save_all(conn)

    def discover_volumes(self, org_id: str) -> list[NetworkVolume]:
        """S2: the network volumes the compute key can see."""
        self.log.connection(org_id).ensure_connected()
        return self.compute.list_volumes(self.runpod_key(org_id))

    def gpu_offers(self, org_id: str, gpu_count: int = 1) -> list[GpuOffer]:
        """R2: the GPU catalog as RunPod offers it to this account now."""
        self.log.connection(org_id).ensure_connected()
        return self.compute.list_gpus(self.runpod_key(org_id), gpu_count)
