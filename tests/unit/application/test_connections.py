"""The compute connection (C1–C5, A3) through the service layer on fakes: what is checked,
what is recorded, and what reaches the vault."""

from __future__ import annotations

from pathlib import Path
from uuid import UUID

import pytest

from application import errors
from application.service import TensorantApp
from domain.connection import AlreadyConnected, KeyForOtherAccount, PodsDependOnKey
from domain.keys import WrongKindOfKey
from domain.organization import ProvidedByTensorant
from tests.fakes import GOOD_KEY, OTHER_ACCOUNT_KEY, READ_ONLY_KEY, S3_SECRET, FakeCompute
from tests.unit.application.conftest import new_app

BAD_KEY = "rpa_" + "Z" * 36 + "BADK"


def events(app: TensorantApp, org: str) -> list[str]:
    conn = app.connection(org)
    return [type(e).__name__ for e in app.repository.event_store.get(UUID(str(conn.id)))]


@pytest.fixture
def app(tmp_path: Path) -> TensorantApp:
    return new_app(tmp_path)[0]


def test_c1_a_key_is_checked_against_runpod_then_stored_with_the_account(app: TensorantApp) -> None:
    org = app.create_organization("Acme")
    app.connect_runpod(org, "owner", GOOD_KEY)
    conn = app.connection(org)
    assert (conn.status, conn.account_id, conn.key_fingerprint) == (
        "connected",
        "user_acct1",
        "…GOOD",
    )
    assert conn.write_permission == "unproven"  # C3: the account check proves no write
    assert app.runpod_key(org) == GOOD_KEY
    assert events(app, org) == ["ConnectionCreated", "ConnectionSaved"]


@pytest.mark.parametrize(
    ("key", "refusal", "problem"),
    [
        (BAD_KEY, errors.InvalidCredentials, "invalid-key"),
        (READ_ONLY_KEY, errors.InsufficientPermissions, "read-only-key"),
    ],
)
def test_c1_a_refused_key_stores_nothing_and_the_attempt_is_recorded_without_key_material(
    app: TensorantApp, key: str, refusal: type[Exception], problem: str
) -> None:
    org = app.create_organization("Acme")
    with pytest.raises(refusal) as caught:
        app.connect_runpod(org, "owner", key)
    assert caught.value.position > 0  # type: ignore[attr-defined] - recorded: the API waits for it
    assert app.connection(org).status == "not_connected"
    with pytest.raises(errors.SecretUnavailable):
        app.runpod_key(org)
    failed = list(app.repository.event_store.get(UUID(str(app.connection(org).id))))[-1]
    assert type(failed).__name__ == "ConnectionCheckFailed"
    assert failed.reason == problem  # type: ignore[attr-defined]
    assert key not in repr(vars(failed)) and key[-4:] not in repr(vars(failed))


def test_c1_runpod_unreachable_is_recorded_and_nothing_is_stored(tmp_path: Path) -> None:
    app, compute = new_app(tmp_path)[:2]
    org = app.create_organization("Acme")
    compute.unreachable = True
    with pytest.raises(errors.ProviderUnavailable):
        app.connect_runpod(org, "owner", GOOD_KEY)
    assert events(app, org) == ["ConnectionCreated", "ConnectionCheckFailed"]
    with pytest.raises(errors.SecretUnavailable):
        app.runpod_key(org)


def test_c5_an_s3_secret_in_the_key_field_is_named_before_runpod_is_asked(tmp_path: Path) -> None:
    app, compute = new_app(tmp_path)[:2]
    org = app.create_organization("Acme")
    with pytest.raises(WrongKindOfKey):
        app.connect_runpod(org, "owner", S3_SECRET)
    assert compute.calls == [] and events(app, org) == ["ConnectionCreated"]


def test_a3_a_provided_organization_cannot_save_its_own_key(app: TensorantApp) -> None:
    org = app.create_organization("Initech", "provided")
    with pytest.raises(ProvidedByTensorant):
        app.connect_runpod(org, "owner", GOOD_KEY)
    assert events(app, org) == ["ConnectionCreated"]


def test_connecting_twice_is_refused_rotation_is_the_way(app: TensorantApp) -> None:
    org = app.create_organization("Acme")
    app.connect_runpod(org, "owner", GOOD_KEY)
    with pytest.raises(AlreadyConnected):
        app.connect_runpod(org, "owner", GOOD_KEY)


def test_c2_rotation_checks_the_new_key_first_and_records_both_fingerprints(
    app: TensorantApp,
) -> None:
    org = app.create_organization("Acme")
    app.connect_runpod(org, "owner", GOOD_KEY)
    with pytest.raises(errors.InvalidCredentials):
        app.rotate_runpod_key(org, "owner", BAD_KEY, 0)
    assert app.runpod_key(org) == GOOD_KEY  # the refused key never reached the vault
    app.rotate_runpod_key(org, "owner", OTHER_ACCOUNT_KEY, 0)
    rotated = list(app.repository.event_store.get(UUID(str(app.connection(org).id))))[-1]
    assert type(rotated).__name__ == "KeyRotated"
    assert (rotated.old_fingerprint, rotated.new_fingerprint) == ("…GOOD", "…OTHR")  # type: ignore[attr-defined]
    assert app.runpod_key(org) == OTHER_ACCOUNT_KEY


def test_c4_rotating_to_another_account_is_refused_while_pods_depend_on_the_key(
    app: TensorantApp,
) -> None:
    org = app.create_organization("Acme")
    app.connect_runpod(org, "owner", GOOD_KEY)
    with pytest.raises(KeyForOtherAccount):
        app.rotate_runpod_key(org, "owner", OTHER_ACCOUNT_KEY, 1)
    assert app.runpod_key(org) == GOOD_KEY


def test_c4_disconnecting_is_refused_while_pods_depend_on_the_key_then_shreds_it(
    app: TensorantApp,
) -> None:
    org = app.create_organization("Acme")
    app.connect_runpod(org, "owner", GOOD_KEY)
    with pytest.raises(PodsDependOnKey):
        app.disconnect_runpod(org, "owner", 2)
    assert app.runpod_key(org) == GOOD_KEY
    app.disconnect_runpod(org, "owner", 0)
    assert app.connection(org).status == "not_connected"
    with pytest.raises(errors.SecretUnavailable):
        app.runpod_key(org)


def test_c1_the_reconciler_refreshes_balance_and_spend(tmp_path: Path) -> None:
    app, compute = new_app(tmp_path)[:2]
    org = app.create_organization("Acme")
    assert app.refresh_account(org) == 0  # not connected: nothing to ask
    app.connect_runpod(org, "owner", GOOD_KEY)
    compute.balance = compute.balance - 100
    assert app.refresh_account(org) > 0
    assert str(app.connection(org).balance) == "150.00"


def test_volumes_are_discovered_with_the_compute_key_only_once_connected(
    tmp_path: Path,
) -> None:
    app, compute = new_app(tmp_path)[:2]
    assert isinstance(compute, FakeCompute)
    org = app.create_organization("Acme")
    with pytest.raises(Exception, match="connect RunPod first"):
        app.discover_volumes(org)
    app.connect_runpod(org, "owner", GOOD_KEY)
    assert [v.id for v in app.discover_volumes(org)] == ["vol1euro", "vol2camtl"]
