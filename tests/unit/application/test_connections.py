"""The compute connection (C1–C5, A3) through the service layer on fakes: what is checked,
what is recorded, and what reaches the vault."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest

from application import errors
from application.connections import RUNPOD_KEY
from domain.connection import AlreadyConnected, KeyForOtherAccount, PodsDependOnKey
from domain.keys import WrongKindOfKey
from domain.organization import ProvidedByTensorant
from tests.fakes import GOOD_KEY, OTHER_ACCOUNT_KEY, READ_ONLY_KEY, S3_SECRET
from tests.unit.application.conftest import Fakes, new_services

BAD_KEY = "rpa_" + "Z" * 36 + "BADK"


@dataclass
class Pods:
    """The read side's count of Pods that depend on an organization's key."""

    live: int = 0

    def live_runs(self) -> list[tuple[str, str]]:
        return []

    def live_pods(self, org_id: str) -> int:
        return self.live

    def org_ids(self) -> list[str]:
        return []

    def reconciled(self, at: datetime, organizations: int) -> None:
        return None


@pytest.fixture
def pods() -> Pods:
    return Pods()


@pytest.fixture
def f(tmp_path: Path, pods: Pods) -> Fakes:
    return new_services(tmp_path, runs=pods)


def events(f: Fakes, org: str) -> list[str]:
    conn = f.services.log.connection(org)
    return [type(e).__name__ for e in f.services.log.repository.event_store.get(conn.id)]


def connected(f: Fakes, key: str = GOOD_KEY) -> str:
    org = f.services.organizations.create("Acme")
    f.services.connections.connect(org, "owner", key)
    return org


def test_c1_a_key_is_checked_against_runpod_then_stored_with_the_account(f: Fakes) -> None:
    org = connected(f)
    conn = f.services.log.connection(org)
    assert (conn.status, conn.account_id, conn.key_fingerprint) == (
        "connected",
        "user_acct1",
        "…GOOD",
    )
    assert conn.write_permission == "unproven"  # C3: the account check proves no write
    assert f.vault.secrets == {(org, RUNPOD_KEY): GOOD_KEY}
    assert events(f, org) == ["ConnectionCreated", "ConnectionSaved"]


@pytest.mark.parametrize(
    ("key", "refusal", "problem"),
    [
        (BAD_KEY, errors.InvalidCredentials, "invalid-key"),
        (READ_ONLY_KEY, errors.InsufficientPermissions, "read-only-key"),
    ],
)
def test_c1_a_refused_key_stores_nothing_and_the_attempt_is_recorded_without_key_material(
    f: Fakes, key: str, refusal: type[errors.ProviderError], problem: str
) -> None:
    org = f.services.organizations.create("Acme")
    with pytest.raises(refusal) as caught:
        f.services.connections.connect(org, "owner", key)
    assert caught.value.position > 0  # recorded: the API waits for it before answering
    assert f.services.log.connection(org).status == "not_connected"
    assert f.vault.secrets == {}
    conn = f.services.log.connection(org)
    failed = list(f.services.log.repository.event_store.get(conn.id))[-1]
    assert type(failed).__name__ == "ConnectionCheckFailed"
    assert failed.reason == problem  # type: ignore[attr-defined]
    assert key not in repr(vars(failed)) and key[-4:] not in repr(vars(failed))


def test_c1_runpod_unreachable_is_recorded_and_nothing_is_stored(f: Fakes) -> None:
    org = f.services.organizations.create("Acme")
    f.compute.unreachable = True
    with pytest.raises(errors.ProviderUnavailable):
        f.services.connections.connect(org, "owner", GOOD_KEY)
    assert events(f, org) == ["ConnectionCreated", "ConnectionCheckFailed"]
    assert f.vault.secrets == {}


def test_c5_an_s3_secret_in_the_key_field_is_named_before_runpod_is_asked(f: Fakes) -> None:
    org = f.services.organizations.create("Acme")
    with pytest.raises(WrongKindOfKey):
        f.services.connections.connect(org, "owner", S3_SECRET)
    assert f.compute.calls == [] and events(f, org) == ["ConnectionCreated"]


def test_a3_a_provided_organization_cannot_save_its_own_key(f: Fakes) -> None:
    org = f.services.organizations.create("Initech", "provided")
    with pytest.raises(ProvidedByTensorant):
        f.services.connections.connect(org, "owner", GOOD_KEY)
    assert events(f, org) == ["ConnectionCreated"]


def test_connecting_twice_is_refused_rotation_is_the_way(f: Fakes) -> None:
    org = connected(f)
    with pytest.raises(AlreadyConnected):
        f.services.connections.connect(org, "owner", GOOD_KEY)


def test_c2_rotation_checks_the_new_key_first_and_records_both_fingerprints(f: Fakes) -> None:
    org = connected(f)
    with pytest.raises(errors.InvalidCredentials):
        f.services.connections.rotate_key(org, "owner", BAD_KEY)
    assert f.services.connections.runpod_key(org) == GOOD_KEY  # the refused key never got in
    f.services.connections.rotate_key(org, "owner", OTHER_ACCOUNT_KEY)
    conn = f.services.log.connection(org)
    rotated = list(f.services.log.repository.event_store.get(conn.id))[-1]
    assert type(rotated).__name__ == "KeyRotated"
    assert (rotated.old_fingerprint, rotated.new_fingerprint) == ("…GOOD", "…OTHR")  # type: ignore[attr-defined]
    assert f.services.connections.runpod_key(org) == OTHER_ACCOUNT_KEY


def test_c4_rotating_to_another_account_is_refused_while_pods_depend_on_the_key(
    f: Fakes, pods: Pods
) -> None:
    org = connected(f)
    pods.live = 1
    with pytest.raises(KeyForOtherAccount):
        f.services.connections.rotate_key(org, "owner", OTHER_ACCOUNT_KEY)
    assert f.services.connections.runpod_key(org) == GOOD_KEY


def test_c4_disconnecting_is_refused_while_pods_depend_on_the_key_then_deletes_it(
    f: Fakes, pods: Pods
) -> None:
    org = connected(f)
    pods.live = 2
    with pytest.raises(PodsDependOnKey):
        f.services.connections.disconnect(org, "owner")
    assert f.services.connections.runpod_key(org) == GOOD_KEY
    pods.live = 0
    f.services.connections.disconnect(org, "owner")
    assert f.services.log.connection(org).status == "not_connected"
    assert f.vault.secrets == {}


def test_c1_the_reconciler_refreshes_balance_and_spend(f: Fakes) -> None:
    org = f.services.organizations.create("Acme")
    assert f.services.connections.refresh_account(org) == 0  # not connected: nothing to ask
    f.services.connections.connect(org, "owner", GOOD_KEY)
    f.compute.balance -= 100
    assert f.services.connections.refresh_account(org) > 0
    assert str(f.services.log.connection(org).balance) == "150.00"


def test_s2_volumes_and_r2_gpus_are_read_with_the_compute_key_once_connected(f: Fakes) -> None:
    org = f.services.organizations.create("Acme")
    for query in (f.services.connections.discover_volumes, f.services.connections.gpu_offers):
        with pytest.raises(Exception, match="connect RunPod first"):
            query(org)
    f.services.connections.connect(org, "owner", GOOD_KEY)
    assert [v.id for v in f.services.connections.discover_volumes(org)] == [
        "vol1euro",
        "vol2camtl",
    ]
    assert "Tesla T4" in [g.id for g in f.services.connections.gpu_offers(org)]


def test_registry_credentials_outlive_a_disconnect_and_are_forgotten_without_runpod(
    f: Fakes,
) -> None:
    """Removing them after RunPod was disconnected cannot ask RunPod: ours are forgotten (the
    vault's included), RunPod's copy stays for the owner to delete in RunPod's console."""
    org = connected(f)
    f.services.connections.attach_registry(org, "owner", "bot", "tok-9876")
    conn = f.services.log.connection(org)
    assert conn.registry_fingerprint == "…9876" and conn.registry_auth_id in f.compute.registries
    f.services.connections.disconnect(org, "owner")
    assert f.services.log.connection(org).registry_auth_id is not None
    f.services.connections.remove_registry(org, "owner")
    assert f.services.log.connection(org).registry_auth_id is None
    assert set(f.vault.secrets) == set()
    assert events(f, org)[-3:] == [
        "RegistryCredentialsAttached",
        "Disconnected",
        "RegistryCredentialsRemoved",
    ]
    assert f.services.connections.remove_registry(org, "owner") == 0  # nothing more to do
