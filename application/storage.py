"""The organization's storage (S1–S6): a RunPod network volume or custom S3, bound only after
its storage check passed; the key pair lives only in the vault."""

from __future__ import annotations

from dataclasses import dataclass, field

from application import errors
from application.conflicts import retry_on_conflict
from application.connections import ConnectionService
from application.log import TensorantLog
from application.ports import (
    Clock,
    ComputeProvider,
    ObjectStore,
    S3Credentials,
    SecretVault,
    StorageLocation,
)
from domain import keys
from domain.connection import CONNECTED
from domain.storage import CUSTOM_S3, RUNPOD_VOLUME, Storage, ensure_s3_datacenter

S3_ACCESS_KEY = "s3_access_key_id"  # the vault entries' names
S3_SECRET = "s3_secret_access_key"  # noqa: S105 - a name, not a secret


@dataclass(frozen=True)
class BindVolume:
    """S2: a RunPod network volume, picked from the discovered list or entered by hand."""

    volume_id: str
    datacenter_id: str
    access_key_id: str
    secret_access_key: str = field(repr=False)
    size_gb: int | None = None  # by hand, when the compute key cannot see the volume


@dataclass(frozen=True)
class BindCustomS3:
    """S4: any S3 endpoint (https, not private: the adapter's SSRF guard decides)."""

    endpoint_url: str
    bucket: str
    region: str
    access_key_id: str
    secret_access_key: str = field(repr=False)


@dataclass(frozen=True)
class StorageService:
    log: TensorantLog
    compute: ComputeProvider
    objects: ObjectStore
    vault: SecretVault
    clock: Clock
    connections: ConnectionService

    def location(self, org_id: str) -> tuple[StorageLocation, S3Credentials]:
        """Where the organization's objects live, and the key pair that opens it."""
        st = self.log.storage(org_id)
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

    @retry_on_conflict
    def bind_volume(self, org_id: str, actor: str, command: BindVolume) -> int:
        self.log.organization(org_id).ensure_may_bring_own_connections()
        st = self.log.storage(org_id)
        creds = self._key_pair(command.access_key_id, command.secret_access_key)
        volume_id, dc = command.volume_id.strip(), command.datacenter_id.strip().upper()
        ensure_s3_datacenter(dc)
        size_gb = self._volume_size(org_id, volume_id, command.size_gb)
        loc = StorageLocation(
            RUNPOD_VOLUME, self.objects.endpoint_for_datacenter(dc), volume_id, dc
        )
        # Refuse a locked location before probing anything (S5).
        st.ensure_location_may_change((RUNPOD_VOLUME, volume_id, dc, loc.endpoint_url))
        self._check(st, loc, creds, actor)
        st.bind_volume(
            volume_id,
            dc,
            loc.endpoint_url,
            size_gb,
            keys.fingerprint(creds.access_key_id),
            actor,
            self.clock.now(),
        )
        return self._save(org_id, st, creds)

    @retry_on_conflict
    def bind_custom_s3(self, org_id: str, actor: str, command: BindCustomS3) -> int:
        self.log.organization(org_id).ensure_may_bring_own_connections()
        st = self.log.storage(org_id)
        creds = self._key_pair(command.access_key_id, command.secret_access_key)
        loc = StorageLocation(
            CUSTOM_S3, command.endpoint_url.strip(), command.bucket.strip(), command.region.strip()
        )
        st.ensure_location_may_change((CUSTOM_S3, loc.bucket, None, loc.endpoint_url))
        self._check(st, loc, creds, actor)
        st.bind_custom_s3(
            loc.endpoint_url,
            loc.bucket,
            loc.region,
            keys.fingerprint(creds.access_key_id),
            actor,
            self.clock.now(),
        )
        return self._save(org_id, st, creds)

    @retry_on_conflict
    def rotate_credentials(
        self, org_id: str, actor: str, access_key_id: str, secret_access_key: str
    ) -> int:
        """S5: new credentials for the same location, checked first."""
        self.log.organization(org_id).ensure_may_bring_own_connections()
        st = self.log.storage(org_id)
        st.ensure_connected()
        creds = self._key_pair(access_key_id, secret_access_key)
        loc, _ = self.location(org_id)
        self._check(st, loc, creds, actor)
        st.rotate_credentials(keys.fingerprint(creds.access_key_id), actor, self.clock.now())
        return self._save(org_id, st, creds)

    @retry_on_conflict
    def resize_volume(self, org_id: str, actor: str, size_gb: int) -> int:
        """S6: grow the volume at RunPod first (it bills the new size), then record it."""
        st = self.log.storage(org_id)
        st.resize(size_gb, actor, self.clock.now())  # the rules, before anything is asked
        st = self.log.storage(org_id)
        resized = self.compute.resize_volume(
            self.connections.runpod_key(org_id), st.volume_id or "", size_gb
        )
        st.resize(resized.size_gb, actor, self.clock.now())
        return self.log.save_all(st)

    # ------------------------------------------------------------ helpers
    @staticmethod
    def _key_pair(access_key_id: str, secret_access_key: str) -> S3Credentials:
        """C5: each field holds its own kind of key."""
        return S3Credentials(*keys.ensure_s3_pair(access_key_id, secret_access_key))

    def _check(self, st: Storage, loc: StorageLocation, creds: S3Credentials, actor: str) -> None:
        """The storage check; a failure is recorded (with its step) before it is raised."""
        try:
            self.objects.check(loc, creds)
        except (errors.StorageCheckFailed, errors.UnsafeEndpoint) as e:
            step = getattr(e, "step", "endpoint")
            st.record_check_failed(loc.kind, step, e.detail, actor, self.clock.now())
            e.position = self.log.save_all(st)
            raise

    def _save(self, org_id: str, st: Storage, creds: S3Credentials) -> int:
        self.vault.put(org_id, S3_ACCESS_KEY, creds.access_key_id)
        self.vault.put(org_id, S3_SECRET, creds.secret_access_key)
        return self.log.save_all(st)

    def _volume_size(self, org_id: str, volume_id: str, given: int | None) -> int:
        """The volume's size from RunPod when the compute key can see it (it prices the card)."""
        if self.log.connection(org_id).status == CONNECTED:
            for v in self.compute.list_volumes(self.connections.runpod_key(org_id)):
                if v.id == volume_id:
                    return v.size_gb
        return int(given or 0)
