"""Storage (S1–S6) through the service layer on fakes: the check before anything is recorded,
the lock once a project exists, and growth at RunPod before it is recorded."""

from __future__ import annotations

from pathlib import Path

import pytest

from application import errors
from application.connections import RUNPOD_KEY
from application.services import Services
from domain.keys import WrongKindOfKey
from domain.storage import DatacenterWithoutS3, StorageLocationLocked, VolumeCannotShrink
from tests.builders import custom_s3, volume
from tests.fakes import GOOD_KEY, S3_ACCESS, S3_SECRET, FakeCompute, FakeObjectStore, FakeVault
from tests.unit.application.conftest import new_services

S3 = (S3_ACCESS, S3_SECRET)


def events(app: Services, org: str) -> list[str]:
    st = app.log.storage(org)
    return [type(e).__name__ for e in app.log.repository.event_store.get(st.id)]


World = tuple[Services, FakeCompute, FakeObjectStore, str, FakeVault]


@pytest.fixture
def world(tmp_path: Path) -> World:
    f = new_services(tmp_path)
    org = f.services.organizations.create("Acme")
    f.services.connections.connect(org, "owner", GOOD_KEY)
    return f.services, f.compute, f.objects, org, f.vault


def test_s2_a_volume_binds_after_its_check_at_the_derived_endpoint_with_runpods_size(
    world: World,
) -> None:
    app, _, objects, org, _ = world
    app.storage.bind_volume(org, "owner", volume())
    st = app.log.storage(org)
    assert (st.kind, st.volume_id, st.datacenter_id) == ("runpod_volume", "vol1euro", "EU-RO-1")
    assert st.endpoint_url == "https://s3api-eu-ro-1.runpod.io"
    assert st.size_gb == 100  # what RunPod says, not what the form said
    assert objects.buckets["vol1euro"] == {}  # the probe was written and removed
    loc, creds = app.storage.location(org)
    assert (loc.bucket, loc.region, creds.access_key_id) == ("vol1euro", "EU-RO-1", S3_ACCESS)
    assert events(app, org) == ["StorageCreated", "VolumeBound"]


def test_s2_a_volume_entered_by_hand_binds_without_the_compute_key(tmp_path: Path) -> None:
    app = new_services(tmp_path).services
    org = app.organizations.create("Acme")
    app.storage.bind_volume(org, "owner", volume(size_gb=70))
    assert app.log.storage(org).size_gb == 70


def test_s2_a_failing_check_names_its_step_records_it_and_stores_no_secret(world: World) -> None:
    app, _, _, org, vault = world
    with pytest.raises(errors.StorageCheckFailed) as caught:
        app.storage.bind_volume(org, "owner", volume(secret_access_key="rps_" + "W" * 36 + "WRNG"))
    assert caught.value.step == "head_bucket" and caught.value.position > 0
    assert events(app, org) == ["StorageCreated", "StorageCheckFailed"]
    assert list(vault.secrets) == [(org, RUNPOD_KEY)]  # the vault holds no S3 pair


def test_s2_a_volume_runpod_does_not_know_is_named(world: World) -> None:
    app, _, _, org, _ = world
    with pytest.raises(errors.VolumeNotFound):
        app.storage.bind_volume(org, "owner", volume("nosuchvol"))


def test_s3_a_datacenter_without_s3_is_refused_before_anything_is_probed(world: World) -> None:
    app, _, objects, org, _ = world
    with pytest.raises(DatacenterWithoutS3) as caught:
        app.storage.bind_volume(org, "owner", volume("vol2camtl", "CA-MTL-1"))
    assert "EU-RO-1" in caught.value.extra["supported"]  # type: ignore[operator]
    assert events(app, org) == ["StorageCreated"]
    assert objects.buckets["vol2camtl"] == {}


def test_s4_custom_s3_binds_after_the_same_check(world: World) -> None:
    app, _, _, org, _ = world
    app.storage.bind_custom_s3(org, "owner", custom_s3())
    st = app.log.storage(org)
    assert (st.kind, st.bucket, st.endpoint_url) == (
        "s3",
        "custom-bucket",
        "https://s3.example.com",
    )
    assert events(app, org) == ["StorageCreated", "CustomS3Bound"]


def test_c5_the_compute_key_in_an_s3_field_is_named(world: World) -> None:
    app, _, _, org, _ = world
    with pytest.raises(WrongKindOfKey):
        app.storage.bind_volume(org, "owner", volume(secret_access_key=GOOD_KEY))


def test_s5_the_location_locks_with_the_first_project_but_credentials_still_rotate(
    world: World,
) -> None:
    app, _, _, org, _ = world
    app.storage.bind_volume(org, "owner", volume())
    app.projects.create(org, "owner", "bot")
    with pytest.raises(StorageLocationLocked):
        app.storage.bind_custom_s3(org, "owner", custom_s3())
    app.storage.rotate_credentials(org, "owner", *S3)
    app.storage.bind_volume(org, "owner", volume())  # the same location again: a rotation
    assert events(app, org)[-4:] == [
        "VolumeBound",
        "StorageLocked",
        "StorageCredentialsRotated",
        "StorageCredentialsRotated",
    ]


def test_s5_rotated_credentials_are_checked_first(world: World) -> None:
    app, _, _, org, _ = world
    app.storage.bind_volume(org, "owner", volume())
    with pytest.raises(errors.StorageCheckFailed):
        app.storage.rotate_credentials(org, "owner", S3_ACCESS, "rps_" + "W" * 36 + "WRNG")
    assert app.storage.location(org)[1].secret_access_key == S3_SECRET


def test_s6_a_volume_grows_at_runpod_before_it_is_recorded_and_never_shrinks(
    world: World,
) -> None:
    app, compute, _, org, _ = world
    app.storage.bind_volume(org, "owner", volume())
    with pytest.raises(VolumeCannotShrink):
        app.storage.resize_volume(org, "owner", 50)
    assert compute.volumes[0].size_gb == 100  # refused before RunPod was asked
    app.storage.resize_volume(org, "owner", 150)
    assert compute.volumes[0].size_gb == 150 and app.log.storage(org).size_gb == 150
