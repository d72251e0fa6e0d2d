"""Working in-memory fakes of every port; they record what happened so tests assert end state."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import BinaryIO

from application import errors
from application.ports import (
    POD_RUNNING,
    POD_STOPPED,
    Account,
    BillingRecord,
    GpuOffer,
    NetworkVolume,
    ObjectInfo,
    PodInfo,
    PodLogLine,
    PodSpec,
    S3Credentials,
    StorageLocation,
)
from trainer.protocol import ENV_RUN_ID

GOOD_KEY = "rpa_" + "A" * 36 + "GOOD"
OTHER_ACCOUNT_KEY = "rpa_" + "B" * 36 + "OTHR"
READ_ONLY_KEY = "rpa_" + "C" * 36 + "READ"
S3_ACCESS = "user_2abcdefFAKE"
S3_SECRET = "rps_" + "S" * 36 + "SECR"


class FixedClock:
    def __init__(self, start: datetime | None = None) -> None:
        self.t = start or datetime(2026, 11, 1, 12, 0, tzinfo=UTC)

    def now(self) -> datetime:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += timedelta(seconds=seconds)


@dataclass
class FakeCompute:
    """A RunPod account in memory: keys map to accounts; Pods are dicts by id."""

    accounts: dict[str, str] = field(
        default_factory=lambda: {GOOD_KEY: "user_acct1", OTHER_ACCOUNT_KEY: "user_acct2"}
    )
    read_only: set[str] = field(default_factory=lambda: {READ_ONLY_KEY})
    unreachable: bool = False
    balance: Decimal = Decimal("250.00")
    volumes: list[NetworkVolume] = field(
        default_factory=lambda: [
            NetworkVolume("vol1euro", "training", 100, "EU-RO-1"),
            NetworkVolume("vol2camtl", "old", 50, "CA-MTL-1"),
        ]
    )
    gpus: list[GpuOffer] = field(
        default_factory=lambda: [
            GpuOffer(
                "NVIDIA A100 80GB PCIe", "A100 PCIe", 80, Decimal("1.64"), {"EU-RO-1": "High"}
            ),
            GpuOffer(
                "NVIDIA GeForce RTX 4090",
                "RTX 4090",
                24,
                Decimal("0.60"),
                {"EU-RO-1": "Medium", "US-KS-2": "High"},
            ),
            GpuOffer("Tesla T4", "T4", 16, Decimal("0.20"), {"EU-RO-1": "High"}),
        ]
    )
    pods: dict[str, PodInfo] = field(default_factory=dict)
    calls: list[tuple[str, str]] = field(default_factory=list)
    specs: list[PodSpec] = field(default_factory=list)  # every create asked for, retries too
    logs: dict[str, list[PodLogLine]] = field(default_factory=dict)  # what each Pod printed
    registries: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # id -> credentials
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def prints(self, pod_id: str, *lines: str, source: str = "system") -> None:
        """The Pod's log gains `lines` (REST v2 event ids: `<time>/<sequence>`)."""
        kept = self.logs.setdefault(pod_id, [])
        for text in lines:
            seq = len(kept) + 1
            kept.append(PodLogLine(f"2026-11-01T12:00:00Z/{seq:012d}", None, source, text))

    def _auth(self, api_key: str, write: bool = False) -> str:
        if self.unreachable:
            raise errors.ProviderUnavailable("RunPod did not answer")
        if api_key in self.read_only:
            if write:
                raise errors.InsufficientPermissions("the key is read-only")
            return "user_acct1"
        if api_key not in self.accounts:
            raise errors.InvalidCredentials("RunPod rejected the API key")
        return self.accounts[api_key]

    def check_account(self, api_key: str) -> Account:
        acct = self._auth(api_key)
        if api_key in self.read_only:
            raise errors.InsufficientPermissions("the key cannot manage Pods")
        spend = sum(
            (p.cost_per_hour for p in self.pods.values() if p.status == POD_RUNNING), Decimal(0)
        )
        return Account(id=acct, balance=self.balance, spend_per_hour=spend)

    def list_volumes(self, api_key: str) -> list[NetworkVolume]:
        self._auth(api_key)
        return list(self.volumes)

    def resize_volume(self, api_key: str, volume_id: str, size_gb: int) -> NetworkVolume:
        self._auth(api_key, write=True)
        for i, v in enumerate(self.volumes):
            if v.id == volume_id:
                self.volumes[i] = replace(v, size_gb=size_gb)
                return self.volumes[i]
        raise errors.VolumeNotFound("resize", f"no network volume {volume_id}")

    def save_registry_auth(self, api_key: str, name: str, username: str, password: str) -> str:
        self._auth(api_key, write=True)
        self.calls.append(("save_registry_auth", name))
        self.registries = {k: v for k, v in self.registries.items() if v[0] != name}
        reg_id = f"cra_{len(self.calls)}"
        self.registries[reg_id] = (name, username, password)
        return reg_id

    def delete_registry_auth(self, api_key: str, registry_auth_id: str) -> None:
        self._auth(api_key, write=True)
        self.calls.append(("delete_registry_auth", registry_auth_id))
        self.registries.pop(registry_auth_id, None)

    def list_gpus(
        self,
        api_key: str,
        gpu_count: int = 1,
        *,
        allow_cached: bool = False,
        account: str | None = None,
    ) -> list[GpuOffer]:
        self._auth(api_key)
        return list(self.gpus)

    def cached_gpus(self, account: str, gpu_count: int = 1) -> list[GpuOffer] | None:
        return None  # no copy: every draft asks (`list_gpus`)

    def launch_pod(self, api_key: str, spec: PodSpec) -> PodInfo:
        """Creates a Pod, as RunPod's create does: a second create of one name makes a second
        Pod. Looking the name up first is the caller's job (R5), and tests prove it there."""
        self._auth(api_key, write=True)
        self.specs.append(spec)
        with self._lock:
            offer = next(g for g in self.gpus if g.id == spec.gpu_type_id)
            same_name = sum(1 for p in self.pods.values() if p.name == spec.name)
            seed = spec.name if not same_name else f"{spec.name}#{same_name}"
            pod_id = hashlib.sha256(seed.encode()).hexdigest()[:14]
            pod = PodInfo(
                id=pod_id,
                name=spec.name,
                status=POD_RUNNING,
                cost_per_hour=offer.price_per_hour * spec.gpu_count,
                gpu_type_id=spec.gpu_type_id,
                gpu_count=spec.gpu_count,
                datacenter_id=spec.datacenter_id,
                network_volume_id=spec.network_volume_id,
                pod_host_id=f"{pod_id}-abcdef12",
                container_disk_gb=spec.container_disk_gb,
                volume_gb=spec.volume_gb,
                run_id=spec.env.get(ENV_RUN_ID),  # RunPod lists the Pod's env marker
            )
            self.pods[pod_id] = pod
            self.calls.append(("launch", pod_id))
            return pod

    def find_pod_by_name(self, api_key: str, name: str) -> PodInfo | None:
        self._auth(api_key)
        return next((p for p in self.pods.values() if p.name == name), None)

    def get_pod(self, api_key: str, pod_id: str) -> PodInfo | None:
        self._auth(api_key)
        return self.pods.get(pod_id)

    def list_pods(self, api_key: str) -> list[PodInfo]:
        self._auth(api_key)
        return list(self.pods.values())

    def stop_pod(self, api_key: str, pod_id: str) -> None:
        self._auth(api_key, write=True)
        self.pods[pod_id] = replace(self.pods[pod_id], status=POD_STOPPED)
        self.calls.append(("stop", pod_id))

    def resume_pod(self, api_key: str, pod_id: str, gpu_count: int) -> PodInfo:
        self._auth(api_key, write=True)
        self.pods[pod_id] = replace(self.pods[pod_id], status=POD_RUNNING)
        self.calls.append(("resume", pod_id))
        return self.pods[pod_id]

    def terminate_pod(self, api_key: str, pod_id: str) -> None:
        self._auth(api_key, write=True)
        self.pods.pop(pod_id, None)
        self.calls.append(("terminate", pod_id))

    def billing_pods(self, api_key: str, start: datetime, end: datetime) -> list[BillingRecord]:
        return []

    def billing_volumes(self, api_key: str, start: datetime, end: datetime) -> list[BillingRecord]:
        return []

    def pod_logs(
        self, api_key: str, pod_id: str, last_event_id: str | None = None, tail: int = 5000
    ) -> Iterator[PodLogLine]:
        """The lines the Pod printed (after `last_event_id`, else its last `tail`); the stream
        ends there, where RunPod's would follow the Pod."""
        self._auth(api_key)
        lines = list(self.logs.get(pod_id, []))
        if last_event_id is not None:
            ids = [line.id for line in lines]
            lines = lines[ids.index(last_event_id) + 1 :] if last_event_id in ids else lines
        else:
            lines = lines[-tail:] if tail else []  # tail 0: live lines only
        return iter(lines)


@dataclass
class FakeObjectStore:
    """Buckets in memory; `credentials` says which key pair opens which bucket."""

    buckets: dict[str, dict[str, bytes]] = field(
        default_factory=lambda: {"vol1euro": {}, "vol2camtl": {}, "custom-bucket": {}}
    )
    credentials: dict[str, str] = field(default_factory=lambda: {S3_ACCESS: S3_SECRET})
    template: str = "https://s3api-{dc}.runpod.io"

    def endpoint_for_datacenter(self, datacenter_id: str) -> str:
        return self.template.format(dc=datacenter_id.lower())

    def _bucket(self, location: StorageLocation, creds: S3Credentials) -> dict[str, bytes]:
        if self.credentials.get(creds.access_key_id) != creds.secret_access_key:
            raise errors.StorageCheckFailed("head_bucket", "access denied: check the S3 key pair")
        if location.bucket not in self.buckets:
            raise errors.VolumeNotFound("head_bucket", f"bucket {location.bucket} not found")
        return self.buckets[location.bucket]

    def check(self, location: StorageLocation, credentials: S3Credentials) -> None:
        b = self._bucket(location, credentials)
        b[".tensorant/probe"] = b"probe"
        del b[".tensorant/probe"]

    def head(
        self, location: StorageLocation, credentials: S3Credentials, key: str
    ) -> ObjectInfo | None:
        data = self._bucket(location, credentials).get(key)
        return None if data is None else ObjectInfo(key, len(data))

    def get(self, location: StorageLocation, credentials: S3Credentials, key: str) -> bytes:
        return self._bucket(location, credentials)[key]

    def download(
        self, location: StorageLocation, credentials: S3Credentials, key: str, into: BinaryIO
    ) -> bool:
        data = self._bucket(location, credentials).get(key)
        if data is None:
            return False
        into.write(data)
        return True

    def upload(
        self, location: StorageLocation, credentials: S3Credentials, key: str, source: BinaryIO
    ) -> None:
        self._bucket(location, credentials)[key] = source.read()

    def put(
        self, location: StorageLocation, credentials: S3Credentials, key: str, data: bytes
    ) -> None:
        self._bucket(location, credentials)[key] = data

    def delete(self, location: StorageLocation, credentials: S3Credentials, key: str) -> None:
        self._bucket(location, credentials).pop(key, None)

    def list(
        self, location: StorageLocation, credentials: S3Credentials, prefix: str = ""
    ) -> list[ObjectInfo]:
        b = self._bucket(location, credentials)
        return [ObjectInfo(k, len(v)) for k, v in sorted(b.items()) if k.startswith(prefix)]

    def presign_put(
        self, location: StorageLocation, credentials: S3Credentials, key: str, expires_s: int
    ) -> str:
        return f"https://presigned.invalid/{location.bucket}/{key}"

    def presign_get(
        self, location: StorageLocation, credentials: S3Credentials, key: str, expires_s: int
    ) -> str:
        return f"https://presigned.invalid/{location.bucket}/{key}?get"


@dataclass
class FakeVault:
    secrets: dict[tuple[str, str], str] = field(default_factory=dict)
    shredded: set[str] = field(default_factory=set)

    def put(self, org_id: str, name: str, secret: str) -> None:
        self.secrets[(org_id, name)] = secret

    def get(self, org_id: str, name: str) -> str:
        if org_id in self.shredded or (org_id, name) not in self.secrets:
            raise errors.SecretUnavailable(f"secret {name} is not available")
        return self.secrets[(org_id, name)]

    def delete(self, org_id: str, name: str) -> None:
        self.secrets.pop((org_id, name), None)

    def shred(self, org_id: str) -> None:
        self.shredded.add(org_id)
        for k in [k for k in self.secrets if k[0] == org_id]:
            del self.secrets[k]
