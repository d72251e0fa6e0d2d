"""S3ObjectStore against the sandbox's S3 front over real HTTP (S1, S2, S4, C5, C6)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests
from starlette.applications import Starlette
from starlette.routing import Mount

from adapters.objectstore import S3ObjectStore
from application.errors import StorageCheckFailed, UnsafeEndpoint, VolumeNotFound
from application.ports import S3Credentials, StorageLocation
from runpod_sandbox.s3 import SandboxS3
from tests.integration.adapters.test_sandbox_s3 import serve_asgi

ACCESS, SECRET = "user_2objSTORE", "rps_TopSecretValue_9f8e7d6c5b4a"
DC, VOLUME = "US-KS-2", "vol9objstore"
CUSTOM_ACCESS, CUSTOM_SECRET, CUSTOM_BUCKET = "AKIACUSTOM1", "custom/Secret+Value", "my-bucket"
GOOD = S3Credentials(ACCESS, SECRET)


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    s3 = SandboxS3(ACCESS, SECRET)
    s3.create_bucket(VOLUME, DC)
    s3.create_bucket(CUSTOM_BUCKET, "us-east-1")
    s3.add_credentials(CUSTOM_ACCESS, CUSTOM_SECRET, {CUSTOM_BUCKET})
    with serve_asgi(Starlette(routes=[Mount("/s3", app=s3.asgi_app())])) as base:
        yield base
    s3.close()


@pytest.fixture
def store(base_url: str) -> S3ObjectStore:
    return S3ObjectStore(
        f"{base_url}/s3/{{dc}}",
        timeout_s=5,
        multipart_threshold=1024,
        part_size=400,
        max_attempts=1,
    )


@pytest.fixture
def volume(store: S3ObjectStore) -> StorageLocation:
    return StorageLocation("runpod_volume", store.endpoint_for_datacenter(DC), VOLUME, DC)


def custom(base_url: str) -> StorageLocation:
    return StorageLocation("s3", f"{base_url}/s3/us-east-1", CUSTOM_BUCKET, "us-east-1")


def test_endpoint_for_datacenter_uses_the_lower_case_id() -> None:
    assert S3ObjectStore().endpoint_for_datacenter("EUR-IS-1") == "https://s3api-eur-is-1.runpod.io"


def test_check_passes_and_leaves_no_probe_behind(
    store: S3ObjectStore, volume: StorageLocation
) -> None:
    store.check(volume, GOOD)
    assert store.list(volume, GOOD, prefix=".tensorant/") == []


def test_check_with_a_wrong_secret_fails_at_head_bucket_without_leaking_it(
    store: S3ObjectStore, volume: StorageLocation
) -> None:
    wrong = "rps_WRONGsecret_0000"
    with pytest.raises(StorageCheckFailed) as exc:
        store.check(volume, S3Credentials(ACCESS, wrong))
    assert exc.value.step == "head_bucket"
    assert "access denied: check the S3 access key and secret" in exc.value.detail
    for text in (str(exc.value), repr(exc.value), exc.value.detail, repr(exc.value.extra)):
        assert wrong not in text
        assert SECRET not in text


def test_a_runpod_api_key_as_access_key_is_refused_as_access_denied(
    store: S3ObjectStore, volume: StorageLocation
) -> None:
    with pytest.raises(StorageCheckFailed) as exc:
        store.check(volume, S3Credentials("rpa_ABCDEF", SECRET))
    assert exc.value.step == "head_bucket"
    assert "not the RunPod API key" in exc.value.detail


def test_a_missing_volume_is_volume_not_found(store: S3ObjectStore) -> None:
    missing = StorageLocation("runpod_volume", store.endpoint_for_datacenter(DC), "nosuchvol", DC)
    with pytest.raises(VolumeNotFound) as exc:
        store.check(missing, GOOD)
    assert exc.value.step == "head_bucket"


def test_a_volume_in_another_datacenter_is_not_found(store: S3ObjectStore) -> None:
    elsewhere = StorageLocation(
        "runpod_volume", store.endpoint_for_datacenter("EU-RO-1"), VOLUME, "EU-RO-1"
    )
    with pytest.raises(VolumeNotFound):
        store.check(elsewhere, GOOD)


def test_put_get_head_list_delete(store: S3ObjectStore, volume: StorageLocation) -> None:
    store.put(volume, GOOD, "runs/r1/a b#1.json", b"{}")
    assert store.get(volume, GOOD, "runs/r1/a b#1.json") == b"{}"
    info = store.head(volume, GOOD, "runs/r1/a b#1.json")
    assert info is not None
    assert info.size == 2
    assert info.etag
    assert [o.key for o in store.list(volume, GOOD, "runs/r1/")] == ["runs/r1/a b#1.json"]
    store.delete(volume, GOOD, "runs/r1/a b#1.json")
    assert store.head(volume, GOOD, "runs/r1/a b#1.json") is None
    with pytest.raises(StorageCheckFailed) as exc:
        store.get(volume, GOOD, "runs/r1/a b#1.json")
    assert exc.value.step == "read"


def test_large_puts_go_multipart(store: S3ObjectStore, volume: StorageLocation) -> None:
    data = bytes(range(256)) * 10  # 2560 bytes > threshold 1024 -> 7 parts of 400
    store.put(volume, GOOD, "big/blob.bin", data)
    assert store.get(volume, GOOD, "big/blob.bin") == data
    info = store.head(volume, GOOD, "big/blob.bin")
    assert info is not None
    assert info.etag is not None
    assert info.etag.endswith("-7")


def test_presign_is_refused_for_a_runpod_volume(
    store: S3ObjectStore, volume: StorageLocation
) -> None:
    with pytest.raises(StorageCheckFailed, match="presigned"):
        store.presign_put(volume, GOOD, "x", 60)


def test_custom_s3_on_loopback_is_refused_unless_allow_listed(base_url: str) -> None:
    creds = S3Credentials(CUSTOM_ACCESS, CUSTOM_SECRET)
    with pytest.raises(UnsafeEndpoint):
        S3ObjectStore(timeout_s=5).check(custom(base_url), creds)
    allowed = S3ObjectStore(allow_endpoints=[base_url.removeprefix("http://")], timeout_s=5)
    allowed.check(custom(base_url), creds)


def test_custom_s3_presigned_put_works(base_url: str) -> None:
    creds = S3Credentials(CUSTOM_ACCESS, CUSTOM_SECRET)
    store = S3ObjectStore(allow_endpoints=[f"{base_url}/s3/"], timeout_s=5)
    url = store.presign_put(custom(base_url), creds, "uploads/adapter.zip", 300)
    assert CUSTOM_SECRET not in url
    assert requests.put(url, data=b"PK\x03\x04", timeout=5).status_code == 200
    assert store.get(custom(base_url), creds, "uploads/adapter.zip") == b"PK\x03\x04"


def test_a_changed_secret_replaces_the_cached_client(
    store: S3ObjectStore, volume: StorageLocation
) -> None:
    with pytest.raises(StorageCheckFailed):
        store.check(volume, S3Credentials(ACCESS, "rps_stale"))
    store.check(volume, GOOD)
    assert SECRET not in repr(store)


def test_an_unreachable_endpoint_fails_at_head_bucket() -> None:
    store = S3ObjectStore("http://127.0.0.1:9/s3/{dc}", timeout_s=1, max_attempts=1)
    volume = StorageLocation("runpod_volume", store.endpoint_for_datacenter(DC), VOLUME, DC)
    with pytest.raises(StorageCheckFailed) as exc:
        store.check(volume, GOOD)
    assert exc.value.step == "head_bucket"
    assert "cannot reach" in exc.value.detail
    assert SECRET not in str(exc.value)
