"""The service layer: one eventsourcing Application for every aggregate (one ordered log)."""

from __future__ import annotations

import functools
import hashlib
import logging
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from uuid import UUID, uuid4

from eventsourcing.application import AggregateNotFoundError, Application
from eventsourcing.domain import Aggregate
from eventsourcing.persistence import IntegrityError, Recording

from application import errors as app_errors
from application.ports import (
    Clock,
    ComputeProvider,
    NetworkVolume,
    ObjectStore,
    S3Credentials,
    SecretVault,
    StorageLocation,
)
from application.runs import LocalLocks, NoRuns, RunCommands, RunIndex, RunLocks, RunSettings
from domain import keys
from domain.base import SYSTEM
from domain.connection import Connection
from domain.errors import NotFound, TensorantError
from domain.organization import Organization
from domain.project import Project
from domain.run import Run
from domain.storage import CUSTOM_S3, RUNPOD_VOLUME, Storage, ensure_s3_datacenter

log = logging.getLogger("tensorant.app")

RUNPOD_KEY = "runpod_api_key"
S3_ACCESS_KEY = "s3_access_key_id"
S3_SECRET = "s3_secret_access_key"  # noqa: S105 - the vault entry's name, not a secret


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class NewMember:
    user_id: str
    token: str  # shown once, stored only as its hash


class TensorantApp(RunCommands, Application[UUID]):
    """Commands take ids and values, load, call one aggregate, save; queries read views."""

    name = "tensorant"

    def __init__(
        self,
        env: dict[str, str] | None = None,
        *,
        compute: ComputeProvider,
        objects: ObjectStore,
        vault: SecretVault,
        clock: Clock,
        run_settings: RunSettings | None = None,
        run_index: RunIndex | None = None,
        run_locks: RunLocks | None = None,
    ) -> None:
        super().__init__(env)
        self.run_locks = run_locks or LocalLocks()
        self.run_settings = run_settings or RunSettings()
        self.run_index = run_index or NoRuns()
        self.compute = compute
        self.objects = objects
        self.vault = vault
        self.clock = clock

    # ------------------------------------------------------------ plumbing
    def save_all(self, *aggregates: Aggregate | None) -> int:
        """Save and return the last notification id (for read-your-writes waits)."""
        recordings: list[Recording[UUID]] = self.save(*aggregates)
        return max((r.notification.id for r in recordings), default=0)

    def _get(self, cls: type[Any], aggregate_id: UUID | str, org_id: str | None = None) -> Any:
        """Load an aggregate of the given class; another organization's is 'not found' (A4)."""
        try:
            uid = aggregate_id if isinstance(aggregate_id, UUID) else UUID(str(aggregate_id))
            agg: Any = self.repository.get(uid)
        except (ValueError, AggregateNotFoundError):  # a malformed id is just as unknown
            raise NotFound(f"{cls.__name__.lower()} {aggregate_id} not found") from None
        if not isinstance(agg, cls) or (
            org_id is not None and getattr(agg, "org_id", None) != org_id
        ):
            raise NotFound(f"{cls.__name__.lower()} {aggregate_id} not found")
        return agg

    def organization(self, org_id: str) -> Organization:
        org: Organization = self._get(Organization, org_id)
        return org

    def connection(self, org_id: str) -> Connection:
        conn: Connection = self._get(Connection, Connection.id_for(org_id), org_id)
        return conn

    def storage(self, org_id: str) -> Storage:
        st: Storage = self._get(Storage, Storage.id_for(org_id), org_id)
        return st

    def project(self, org_id: str, project_id: str) -> Project:
        p: Project = self._get(Project, project_id, org_id)
        return p

    def run(self, org_id: str, run_id: str) -> Run:
        r: Run = self._get(Run, run_id, org_id)
        return r

    # ------------------------------------------------------------ organizations (A1, A3)
    def create_organization(self, name: str, mode: str = "own", actor: str = SYSTEM) -> str:
        at = self.clock.now()
        org = Organization.create(name, mode, actor, at)
        org_id = str(org.id)
        self.save_all(org, Connection.open(org_id, actor, at), Storage.open(org_id, actor, at))
        return org_id

    def add_member(self, org_id: str, email: str, role: str, actor: str = SYSTEM) -> NewMember:
        org = self.organization(org_id)
        token = "tnt_" + secrets.token_urlsafe(32)
        user_id = str(uuid4())
        org.add_member(user_id, email, role, hash_token(token), actor, self.clock.now())
        self.save_all(org)
        return NewMember(user_id=user_id, token=token)

    # ------------------------------------------------------------ compute connection (C1–C6)
    def _check_key(self, conn: Connection, api_key: str, actor: str) -> Any:
        """Check a key against RunPod; a failure is recorded for auditors without key material."""
        try:
            return self.compute.check_account(api_key)
        except (
            app_errors.InvalidCredentials,
            app_errors.InsufficientPermissions,
            app_errors.ProviderUnavailable,
        ) as e:
            conn.record_check_failed(e.problem, e.detail, actor, self.clock.now())
            e.position = self.save_all(conn)
            raise

    def connect_runpod(self, org_id: str, actor: str, api_key: str) -> int:
        self.organization(org_id).ensure_may_bring_own_connections()
        key = keys.ensure_compute_key(api_key)
        conn = self.connection(org_id)
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
        )
        return self.save_all(conn)

    def rotate_runpod_key(self, org_id: str, actor: str, api_key: str, live_pods: int) -> int:
        self.organization(org_id).ensure_may_bring_own_connections()
        key = keys.ensure_compute_key(api_key)
        conn = self.connection(org_id)
        conn.ensure_connected()
        account = self._check_key(conn, key, actor)
        conn.rotate(
            account.id,
            keys.fingerprint(key),
            account.balance,
            account.spend_per_hour,
            live_pods,
            actor,
            self.clock.now(),
        )
        # The vault is written only after the rules passed; in-flight work reads it per call (C2).
        self.vault.put(org_id, RUNPOD_KEY, key)
        return self.save_all(conn)

    def disconnect_runpod(self, org_id: str, actor: str, live_pods: int) -> int:
        conn = self.connection(org_id)
        conn.disconnect(live_pods, actor, self.clock.now())
        n = self.save_all(conn)
        self.vault.delete(org_id, RUNPOD_KEY)
        return n

    def runpod_key(self, org_id: str) -> str:
        return self.vault.get(org_id, RUNPOD_KEY)

    def discover_volumes(self, org_id: str) -> list[NetworkVolume]:
        self.connection(org_id).ensure_connected()
        return self.compute.list_volumes(self.runpod_key(org_id))

    def refresh_account(self, org_id: str) -> int:
        conn = self.connection(org_id)
        if conn.status != "connected":
            return 0
        account = self.compute.check_account(self.runpod_key(org_id))
        conn.refresh_account(account.balance, account.spend_per_hour, SYSTEM, self.clock.now())
        return self.save_all(conn)

    # ------------------------------------------------------------ storage (S1–S7)
    def storage_location(self, org_id: str) -> tuple[StorageLocation, S3Credentials]:
        st = self.storage(org_id)
        st.ensure_connected()
        loc = StorageLocation(
            kind=st.kind or "",
            endpoint_url=st.endpoint_url or "",
            bucket=st.bucket or "",
            region=st.region or "",
        )
        creds = S3Credentials(
            self.vault.get(org_id, S3_ACCESS_KEY), self.vault.get(org_id, S3_SECRET)
        )
        return loc, creds

    def _check_storage(
        self, st: Storage, loc: StorageLocation, creds: S3Credentials, actor: str
    ) -> None:
        try:
            self.objects.check(loc, creds)
        except (app_errors.StorageCheckFailed, app_errors.UnsafeEndpoint) as e:
            step = getattr(e, "step", "endpoint")
            st.record_check_failed(loc.kind, step, e.detail, actor, self.clock.now())
            e.position = self.save_all(st)
            raise

    def bind_storage(self, org_id: str, actor: str, spec: dict[str, Any]) -> int:
        self.organization(org_id).ensure_may_bring_own_connections()
        st = self.storage(org_id)
        access, secret = keys.ensure_s3_pair(spec["access_key_id"], spec["secret_access_key"])
        creds = S3Credentials(access, secret)
        if spec["kind"] == RUNPOD_VOLUME:
            volume_id, dc = spec["volume_id"].strip(), spec["datacenter_id"].strip().upper()
            ensure_s3_datacenter(dc)
            size_gb = self._volume_size(org_id, volume_id, spec.get("size_gb"))
            loc = StorageLocation(
                RUNPOD_VOLUME, self.objects.endpoint_for_datacenter(dc), volume_id, dc
            )
            # Refuse a locked location before probing anything (S5).
            st._ensure_location_may_change((RUNPOD_VOLUME, volume_id, dc, loc.endpoint_url))
            self._check_storage(st, loc, creds, actor)
            st.bind_volume(
                volume_id,
                dc,
                loc.endpoint_url,
                size_gb,
                keys.fingerprint(access),
                actor,
                self.clock.now(),
            )
        elif spec["kind"] == CUSTOM_S3:
            loc = StorageLocation(
                CUSTOM_S3,
                spec["endpoint_url"].strip(),
                spec["bucket"].strip(),
                spec["region"].strip(),
            )
            st._ensure_location_may_change((CUSTOM_S3, loc.bucket, None, loc.endpoint_url))
            self._check_storage(st, loc, creds, actor)
            st.bind_custom_s3(
                loc.endpoint_url,
                loc.bucket,
                loc.region,
                keys.fingerprint(access),
                actor,
                self.clock.now(),
            )
        else:
            raise TensorantError("kind must be runpod_volume or s3")
        self.vault.put(org_id, S3_ACCESS_KEY, access)
        self.vault.put(org_id, S3_SECRET, secret)
        return self.save_all(st)

    def _volume_size(self, org_id: str, volume_id: str, given: int | None) -> int:
        """The volume's size from RunPod when the compute key can see it (it prices the card)."""
        conn = self.connection(org_id)
        if conn.status == "connected":
            for v in self.compute.list_volumes(self.runpod_key(org_id)):
                if v.id == volume_id:
                    return v.size_gb
        return int(given or 0)

    def rotate_storage_credentials(
        self, org_id: str, actor: str, access_key_id: str, secret_access_key: str
    ) -> int:
        self.organization(org_id).ensure_may_bring_own_connections()
        st = self.storage(org_id)
        st.ensure_connected()
        access, secret = keys.ensure_s3_pair(access_key_id, secret_access_key)
        loc, _ = self.storage_location(org_id)
        creds = S3Credentials(access, secret)
        self._check_storage(st, loc, creds, actor)
        st.rotate_credentials(keys.fingerprint(access), actor, self.clock.now())
        self.vault.put(org_id, S3_ACCESS_KEY, access)
        self.vault.put(org_id, S3_SECRET, secret)
        return self.save_all(st)

    def resize_volume(self, org_id: str, actor: str, size_gb: int) -> int:
        """S6: grow the volume at RunPod first (it bills the new size), then record it."""
        st = self.storage(org_id)
        st.resize(size_gb, actor, self.clock.now())  # the rules, before anything is asked
        st = self.storage(org_id)
        resized = self.compute.resize_volume(self.runpod_key(org_id), st.volume_id or "", size_gb)
        st.resize(resized.size_gb, actor, self.clock.now())
        return self.save_all(st)

    # ------------------------------------------------------------ projects (P1)
    def create_project(self, org_id: str, actor: str, name: str) -> tuple[str, int]:
        st = self.storage(org_id)
        st.ensure_connected()
        at = self.clock.now()
        project = Project.create(org_id, name, actor, at)
        st.lock(str(project.id), actor, at)
        return str(project.id), self.save_all(project, st)

    def register_dataset_version(
        self, org_id: str, project_id: str, actor: str, **fields: Any
    ) -> tuple[str, int]:
        project = self.project(org_id, project_id)
        dv_id = str(uuid4())
        project.register_dataset_version(dv_id, actor=actor, at=self.clock.now(), **fields)
        return dv_id, self.save_all(project)

    # ------------------------------------------------------------ secrets hygiene
    def secrets_of(self, org_id: str) -> Iterable[str]:
        """For tests proving that no stored byte outside the vault contains key material."""
        for name in (RUNPOD_KEY, S3_ACCESS_KEY, S3_SECRET):
            try:
                yield self.vault.get(org_id, name)
            except app_errors.SecretUnavailable:
                continue


def retry_on_conflict(command: Callable[..., Any]) -> Callable[..., Any]:
    """Optimistic concurrency: when a worker saved the same aggregate first, load and try again.

    Commands are safe to repeat: they decide from the aggregate they load, and their calls to
    RunPod are idempotent or re-read (a second resume of a running Pod changes nothing).
    """

    @functools.wraps(command)
    def attempt(*args: Any, **kwargs: Any) -> Any:
        for n in range(CONFLICT_ATTEMPTS):
            try:
                return command(*args, **kwargs)
            except IntegrityError:
                if n + 1 == CONFLICT_ATTEMPTS:
                    raise
                time.sleep(0.005 * (n + 1))
        raise AssertionError("unreachable")

    return attempt


CONFLICT_ATTEMPTS = 5
# User and trainer commands that load, change and save one aggregate (drive_run retries itself).
for _name in (
    "add_member",
    "connect_runpod",
    "rotate_runpod_key",
    "disconnect_runpod",
    "refresh_account",
    "bind_storage",
    "rotate_storage_credentials",
    "resize_volume",
    "create_project",
    "register_dataset_version",
    "update_draft",
    "discard_draft",
    "launch_run",
    "cancel_run",
    "resume_pod",
    "release_pod",
    "recover_from_volume",
    "recover_from_upload",
    "trainer_progress",
    "trainer_exported",
    "trainer_failed",
    "release_orphan",
):
    setattr(TensorantApp, _name, retry_on_conflict(getattr(TensorantApp, _name)))
