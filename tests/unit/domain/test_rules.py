"""Every no-I/O rule of the product (docs/features.md), one test each; feature ids lead the
names."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from domain import keys
from domain.access import AUDITOR, FINANCE, MEMBER, OWNER, require
from domain.connection import (
    AlreadyConnected,
    Connection,
    KeyForOtherAccount,
    PodsDependOnKey,
    WritePermissionProven,
)
from domain.errors import DomainError, Forbidden, IllegalTransition
from domain.gpus import GpuNotEligible, NotEnoughGpuMemory, UnknownBaseModel
from domain.launch import (
    AvailabilityChanged,
    ConfirmationRequired,
    LowBalance,
    PriceAboveLimit,
    PriceChanged,
    accepted_price,
    balance_refusal,
    quote,
)
from domain.organization import MemberExists, Organization, ProvidedByTensorant
from domain.project import InvalidDataset, Project
from domain.rates import network_volume_per_month, stopped_disk_per_hour
from domain.run import NotADraft, Run, UnverifiedRelease
from domain.run_config import InvalidRunConfig, ensure_offered_in_datacenter
from domain.storage import (
    DatacenterWithoutS3,
    Storage,
    StorageLocationLocked,
    StorageNotConnected,
    VolumeCannotShrink,
)
from tests.builders import trial

T0 = datetime(2026, 11, 1, tzinfo=UTC)
A = "user-1"
CONFIG = trial()


def connected() -> Connection:
    c = Connection.open("org", A, T0)
    c.save("acct1", "…GOOD", Decimal("10"), Decimal("0"), A, T0)
    return c


def bound_volume() -> Storage:
    s = Storage.open("org", A, T0)
    s.bind_volume("vol1", "EU-RO-1", "https://s3api-eu-ro-1.runpod.io", 100, "…KEY1", A, T0)
    return s


# ------------------------------------------------------------ A1–A3
@pytest.mark.parametrize(
    ("role", "permission", "allowed"),
    [
        (OWNER, "manage_connections", True),
        (MEMBER, "manage_connections", False),
        (AUDITOR, "manage_connections", False),
        (FINANCE, "manage_connections", False),
        (MEMBER, "manage_runs", True),
        (AUDITOR, "manage_runs", False),
        (FINANCE, "billing", True),
        (MEMBER, "billing", False),
        (AUDITOR, "audit", True),
        (FINANCE, "audit", False),
        (FINANCE, "read", True),
    ],
)
def test_a1_a2_roles_grant_exactly_their_permissions(
    role: str, permission: str, allowed: bool
) -> None:
    if allowed:
        require(role, permission)
    else:
        with pytest.raises(Forbidden):
            require(role, permission)


def test_a1_members_have_one_of_the_four_roles_and_unique_emails() -> None:
    org = Organization.create("Acme", "own", A, T0)
    org.add_member("u1", "a@x.io", OWNER, "h1", A, T0)
    with pytest.raises(DomainError):
        org.add_member("u2", "b@x.io", "admin", "h2", A, T0)
    with pytest.raises(MemberExists):
        org.add_member("u3", "a@x.io", MEMBER, "h3", A, T0)


def test_a3_a_provided_organization_cannot_bring_its_own_connections() -> None:
    org = Organization.create("Acme", "provided", A, T0)
    with pytest.raises(ProvidedByTensorant, match="platform administrator"):
        org.ensure_may_bring_own_connections()


# ------------------------------------------------------------ C1–C5
def test_c1_the_card_shows_a_masked_fingerprint_of_the_last_four_characters() -> None:
    assert keys.fingerprint("rpa_SECRETSECRETWXYZ") == "…WXYZ"


def test_c1_saving_twice_is_refused_in_favour_of_rotation() -> None:
    with pytest.raises(AlreadyConnected):
        connected().save("acct1", "…GOOD", Decimal(1), Decimal(0), A, T0)


def test_c2_rotation_records_old_and_new_fingerprints() -> None:
    c = connected()
    c.rotate("acct1", "…NEW1", Decimal(1), Decimal(0), live_pods=0, actor=A, at=T0)
    event = c.collect_events()[-1]
    assert (event.old_fingerprint, event.new_fingerprint) == ("…GOOD", "…NEW1")


def test_c3_write_permission_is_unproven_until_a_launch_and_a_release_succeeded() -> None:
    c = connected()
    assert c.write_permission == "unproven"
    c.record_write_use("launch", "…GOOD", A, T0)
    assert c.write_permission == "unproven"
    c.record_write_use("release", "…GOOD", A, T0)
    assert c.write_permission == "proven"
    assert isinstance(c.collect_events()[-1], WritePermissionProven)


def test_c3_a_use_with_an_older_key_proves_nothing_for_the_new_one() -> None:
    c = connected()
    c.record_write_use("launch", "…OLD0", A, T0)
    assert c.write_uses == []


def test_c4_removal_is_refused_while_pods_depend_on_the_key() -> None:
    with pytest.raises(PodsDependOnKey):
        connected().disconnect(live_pods=1, actor=A, at=T0)


def test_c4_rotation_to_another_account_is_refused_while_pods_exist() -> None:
    with pytest.raises(KeyForOtherAccount):
        connected().rotate("acct2", "…OTHR", Decimal(1), Decimal(0), live_pods=2, actor=A, at=T0)


def test_c4_rotation_to_another_account_is_allowed_when_no_pod_depends_on_the_key() -> None:
    c = connected()
    c.rotate("acct2", "…OTHR", Decimal(1), Decimal(0), live_pods=0, actor=A, at=T0)
    assert c.account_id == "acct2"


@pytest.mark.parametrize(
    "pasted", ["user_2abcdef123456", "rps_" + "x" * 30, "AKIAABCDEFGHIJKLMNOP"]
)
def test_c5_an_s3_key_in_the_compute_field_gets_a_clear_error(pasted: str) -> None:
    with pytest.raises(keys.WrongKindOfKey, match=r"S3|AWS|storage"):
        keys.ensure_compute_key(pasted)


def test_c5_the_compute_key_in_an_s3_field_gets_a_clear_error() -> None:
    with pytest.raises(keys.WrongKindOfKey, match="RunPod API key"):
        keys.ensure_s3_pair("rpa_" + "A" * 40, "rps_secret")


def test_c5_a_swapped_s3_pair_is_refused() -> None:
    with pytest.raises(keys.WrongKindOfKey, match="swapped"):
        keys.ensure_s3_pair("rps_secretvalue", "user_abc")


# ------------------------------------------------------------ S1–S7
def test_s2_a_bound_volume_uses_its_id_as_bucket_and_datacenter_as_region() -> None:
    s = bound_volume()
    assert (s.bucket, s.region, s.kind) == ("vol1", "EU-RO-1", "runpod_volume")


def test_s2_the_card_prices_the_volume_per_month_from_binding() -> None:
    assert bound_volume().cost_per_month(T0) == Decimal("7.00")


def test_b1_network_volumes_bill_0_07_up_to_1000_gb_and_0_05_above() -> None:
    assert network_volume_per_month(1500, T0) == Decimal("95.00")


def test_b1_stopped_pods_bill_volume_disk_at_0_20_per_gb_month() -> None:
    assert stopped_disk_per_hour(730, T0) == Decimal("0.20")


def test_s3_a_datacenter_without_s3_is_refused_with_the_supported_list() -> None:
    s = Storage.open("org", A, T0)
    with pytest.raises(DatacenterWithoutS3) as e:
        s.bind_volume("vol2", "CA-MTL-1", "https://x", 50, "…KEY1", A, T0)
    assert "EU-RO-1" in e.value.extra["supported"]


def test_s5_the_first_project_locks_the_location_and_a_move_is_refused() -> None:
    s = bound_volume()
    s.lock("project-1", A, T0)
    with pytest.raises(StorageLocationLocked, match="migration"):
        s.bind_volume("vol9", "EU-RO-1", "https://s3api-eu-ro-1.runpod.io", 10, "…KEY1", A, T0)
    with pytest.raises(StorageLocationLocked):
        s.bind_custom_s3("https://s3.example.com", "b", "us-east-1", "…KEY1", A, T0)


def test_s5_rotating_credentials_for_the_same_location_is_allowed_when_locked() -> None:
    s = bound_volume()
    s.lock("project-1", A, T0)
    s.bind_volume("vol1", "EU-RO-1", "https://s3api-eu-ro-1.runpod.io", 100, "…KEY2", A, T0)
    assert type(s.collect_events()[-1]).__name__ == "StorageCredentialsRotated"
    assert s.access_key_fingerprint == "…KEY2"


def test_s6_a_network_volume_grows_but_never_shrinks() -> None:
    s = bound_volume()
    s.resize(200, A, T0)
    assert s.size_gb == 200
    with pytest.raises(VolumeCannotShrink):
        s.resize(150, A, T0)


def test_p1_a_project_needs_connected_storage_to_lock() -> None:
    with pytest.raises(StorageNotConnected):
        Storage.open("org", A, T0).lock("p", A, T0)


def test_p1_dataset_versions_need_a_valid_sha256_and_a_relative_key() -> None:
    p = Project.create("org", "Support bot", A, T0)
    with pytest.raises(InvalidDataset, match="sha256"):
        p.register_dataset_version("d", "chats", "1", "data/a.jsonl", 10, 5, "abc", A, T0)
    with pytest.raises(InvalidDataset, match="relative"):
        p.register_dataset_version("d", "chats", "1", "../etc/passwd", 10, 5, "a" * 64, A, T0)
    p.register_dataset_version("d", "chats", "1", "data/a.jsonl", 10, 5, "a" * 64, A, T0)
    assert p.datasets["d"]["row_count"] == 5


def test_p1_token_counts_are_cached_per_base_model_and_max_seq_len() -> None:
    p = Project.create("org", "Support bot", A, T0)
    p.register_dataset_version("d", "chats", "1", "data/a.jsonl", 10, 5, "a" * 64, A, T0)
    counts = {"tokens": 120, "trained_tokens": 40, "examples": 5}
    assert p.token_count_needed("d", "storage:models/tiny", 64)
    assert p.record_token_count("d", "storage:models/tiny", 64, counts, None, A, T0)
    assert not p.record_token_count("d", "storage:models/tiny", 64, counts, None, A, T0)
    assert not p.token_count_needed("d", "storage:models/tiny", 64)
    assert p.token_count_needed("d", "storage:models/tiny", 128)  # cut elsewhere: again
    assert p.token_count_needed("d", "Qwen/Qwen2.5-0.5B-Instruct", 64)
    assert not p.token_count_needed("missing", "storage:models/tiny", 64)
    assert p.record_token_count("d", "other", 64, None, "the tokenizer does not load", A, T0)
    shown = p.datasets["d"]["token_counts"]
    assert shown["storage:models/tiny"]["tokens"] == 120
    assert shown["storage:models/tiny"]["trained_tokens"] == 40
    assert shown["other"]["status"] == "unavailable"
    assert shown["other"]["tokens"] is None
    assert len(p.collect_events()) == 4  # created, registered, two counts


# ------------------------------------------------------------ R1–R3
def test_r1_a_full_run_requires_a_baseline() -> None:
    with pytest.raises(InvalidRunConfig, match="baseline"):
        Run.draft("org", replace(CONFIG, kind="full"), A, T0)


@pytest.mark.parametrize("gpu", ["Tesla T4", "Tesla V100-PCIE-16GB"])
def test_r2_pre_ampere_gpus_are_refused_by_name(gpu: str) -> None:
    with pytest.raises(GpuNotEligible, match="pre-Ampere"):
        Run.draft("org", replace(CONFIG, gpu_type_id=gpu), A, T0)


def test_r2_gpu_memory_must_cover_the_model_on_one_gpu() -> None:
    """The trainer uses one GPU: a second one adds no memory to the check (it is refused)."""
    big = replace(CONFIG, base_model="meta-llama/Llama-3.3-70B-Instruct")
    with pytest.raises(NotEnoughGpuMemory, match=r"needs 14\d\.\d GB at 2,048 tokens"):
        Run.draft("org", big, A, T0)
    with pytest.raises(InvalidRunConfig, match="uses one GPU") as refused:
        Run.draft("org", replace(big, gpu_count=2), A, T0)
    assert refused.value.extra["rule"] == "gpu_count"


@pytest.mark.parametrize("count", [2, 8])
def test_r2_more_than_one_gpu_is_refused_until_the_trainer_uses_them(count: int) -> None:
    with pytest.raises(InvalidRunConfig, match="billed and sit idle"):
        Run.draft("org", replace(CONFIG, gpu_count=count), A, T0)


def test_r2_unknown_base_models_are_refused() -> None:
    with pytest.raises(UnknownBaseModel):
        Run.draft("org", replace(CONFIG, base_model="gpt-5"), A, T0)


def test_r2_with_network_storage_the_gpu_must_be_offered_in_the_volume_datacenter() -> None:
    with pytest.raises(DomainError, match="not offered in US-KS-2"):
        ensure_offered_in_datacenter("NVIDIA A100 80GB PCIe", ["EU-RO-1"], "US-KS-2")


@pytest.mark.parametrize("price", ["0", "-1", "NaN"])
def test_r2_the_price_limit_must_be_positive(price: str) -> None:
    with pytest.raises(InvalidRunConfig, match="price"):
        Run.draft("org", replace(CONFIG, price_limit_per_hour=price), A, T0)


@pytest.mark.parametrize("minutes", [0, 241])
def test_r2_the_runtime_limit_is_bounded(minutes: int) -> None:
    with pytest.raises(InvalidRunConfig, match="max_runtime_minutes"):
        Run.draft("org", replace(CONFIG, max_runtime_minutes=minutes), A, T0)


def test_r3_drafts_can_be_edited_and_deleted_but_not_after_launch() -> None:
    run = Run.draft("org", CONFIG, A, T0)
    run.update_draft(replace(CONFIG, max_runtime_minutes=20), A, T0)
    assert run.config.max_runtime_minutes == 20
    run.confirm_launch(Decimal("1.64"), Decimal("1.64"), "EU-RO-1", A, T0)
    with pytest.raises(IllegalTransition):
        run.update_draft(CONFIG, A, T0)
    with pytest.raises(IllegalTransition):
        run.discard(A, T0)
    with pytest.raises(NotADraft):
        run.confirm_launch(Decimal("1.64"), Decimal("1.64"), "EU-RO-1", A, T0)


# ------------------------------------------------------------ R4 launch refusals
def test_r4_a_launch_needs_a_confirmation_that_names_the_price() -> None:
    for confirm, price in ((False, "1.64"), (True, None)):
        with pytest.raises(ConfirmationRequired):
            accepted_price(confirm, price)
    assert accepted_price(True, "1.64") == Decimal("1.64")


def test_r4_a_gpu_no_longer_offered_where_the_volume_is_is_an_availability_change() -> None:
    for price, dcs in ((None, ["EU-RO-1"]), (Decimal("1.64"), []), (Decimal("1.64"), ["US-KS-2"])):
        _, refusal = quote(CONFIG, price, dcs, "EU-RO-1", Decimal("2"))
        assert isinstance(refusal, AvailabilityChanged) and "EU-RO-1" in refusal.detail
    _, refusal = quote(CONFIG, Decimal("1.64"), ["US-KS-2"], None, Decimal("2"))
    assert refusal is None  # custom S3: any datacenter will do


def test_r5_a_launch_where_the_gpu_is_only_on_hosts_older_than_cuda13_is_refused() -> None:
    _, refusal = quote(CONFIG, Decimal("1.64"), ["US-KS-2"], "EU-RO-1", Decimal("2"), ("EU-RO-1",))
    assert isinstance(refusal, AvailabilityChanged) and "CUDA 13" in refusal.detail
    _, refusal = quote(CONFIG, Decimal("1.64"), ["EU-RO-1"], "EU-RO-1", Decimal("2"), ("US-KS-2",))
    assert refusal is None


def test_r4_the_price_counts_every_gpu_against_the_limit_then_the_accepted_price() -> None:
    two = replace(CONFIG, gpu_count=2)
    price, refusal = quote(two, Decimal("1.10"), ["EU-RO-1"], "EU-RO-1", Decimal("5"))
    assert price == Decimal("2.20") and isinstance(refusal, PriceAboveLimit)
    assert refusal.extra == {"price_per_hour": "2.20", "price_limit_per_hour": "2.00"}
    price, refusal = quote(CONFIG, Decimal("1.70"), ["EU-RO-1"], "EU-RO-1", Decimal("1.64"))
    assert isinstance(refusal, PriceChanged) and refusal.extra == {"price_per_hour": "1.70"}
    assert quote(CONFIG, Decimal("1.64"), ["EU-RO-1"], "EU-RO-1", Decimal("1.64")) == (
        Decimal("1.64"),
        None,
    )


def test_r4_the_balance_must_cover_one_hour_unless_runpod_does_not_say() -> None:
    refusal = balance_refusal(Decimal("1.00"), Decimal("1.64"))
    assert isinstance(refusal, LowBalance) and refusal.extra == {"balance": "1.00"}
    assert balance_refusal(Decimal("1.64"), Decimal("1.64")) is None
    assert balance_refusal(None, Decimal("1.64")) is None


# ------------------------------------------------------------ R5–R13 state machine
def launched() -> Run:
    run = Run.draft("org", CONFIG, A, T0)
    run.confirm_launch(Decimal("1.64"), Decimal("1.64"), "EU-RO-1", A, T0)
    run.record_pod_launched(
        "pod1", "tensorant-run-x", Decimal("1.64"), "EU-RO-1", "pod1-ab", 20, 0, "system", T0
    )
    return run


def test_r5_one_launch_is_one_pod_and_the_same_answer_twice_changes_nothing() -> None:
    run = launched()
    n = len(run.pending_events)
    run.record_pod_launched(
        "pod1", "tensorant-run-x", Decimal("1.64"), "EU-RO-1", None, 20, 0, "system", T0
    )
    assert len(run.pending_events) == n
    with pytest.raises(IllegalTransition, match="one launch = one Pod"):
        run.record_pod_launched(
            "pod2", "tensorant-run-x", Decimal("1.64"), "EU-RO-1", None, 20, 0, "system", T0
        )


def test_r7_a_verified_adapter_releases_the_pod_and_the_run_succeeds_once_terminated() -> None:
    run = launched()
    run.record_adapter_exported("runs/x/adapter.zip", "f" * 64, 100, "system", T0)
    assert run.state == "verifying"
    run.record_adapter_verified("runs/x/adapter.zip", "f" * 64, 100, "system", T0)
    assert (run.state, run.pod_status) == ("releasing", "terminating")
    run.record_pod_terminated("system", T0)
    assert run.state == "succeeded"


def test_r8_export_failure_stops_and_retains_the_pod_and_needs_recovery() -> None:
    run = launched()
    run.record_export_failed("export_failed", "upload failed", "system", T0)
    assert run.stop_pending
    run.record_pod_stopped("export_failed", "system", T0)
    assert (run.state, run.state_reason, run.pod_status) == (
        "needs_recovery",
        "export_failed",
        "stopped",
    )


def test_r8_the_runtime_limit_is_due_after_max_runtime_minutes() -> None:
    run = launched()
    assert not run.runtime_limit_due(T0 + timedelta(minutes=59))
    assert run.runtime_limit_due(T0 + timedelta(minutes=60))
    run.reach_runtime_limit("system", T0)
    run.record_pod_stopped("runtime_limit", "system", T0)
    assert run.state_reason == "runtime_limit"


def test_r9_recovery_verifies_and_proceeds_as_r7() -> None:
    run = launched()
    run.record_export_failed("export_failed", "", "system", T0)
    run.record_pod_stopped("export_failed", "system", T0)
    run.request_recovery("volume", "runs/x/adapter.zip", None, None, A, T0)
    assert run.state == "recovering"
    run.record_adapter_verified("runs/x/adapter.zip", "f" * 64, 10, "system", T0)
    run.record_pod_terminated("system", T0)
    assert run.state == "succeeded"


def test_r9_a_failed_recovery_returns_to_needs_recovery_with_adapter_invalid() -> None:
    run = launched()
    run.record_export_failed("export_failed", "", "system", T0)
    run.record_pod_stopped("export_failed", "system", T0)
    run.request_recovery("volume", "k", None, None, A, T0)
    run.record_verification_failed("adapter_invalid", "not a zip", "system", T0)
    assert (run.state, run.state_reason) == ("needs_recovery", "adapter_invalid")


def test_r11_only_a_stopped_pod_resumes() -> None:
    run = launched()
    with pytest.raises(IllegalTransition):
        run.ensure_resumable()
    run.record_export_failed("export_failed", "", "system", T0)
    run.record_pod_stopped("export_failed", "system", T0)
    run.ensure_resumable()
    run.record_pod_resumed(Decimal("1.70"), "pod1-cd", A, T0)
    assert (run.pod_status, run.price_per_hour) == ("running", Decimal("1.70"))


@pytest.mark.parametrize("state_setup", ["draft", "launching", "running", "needs_recovery"])
def test_r12_a_run_can_be_cancelled_in_each_live_state(state_setup: str) -> None:
    run = Run.draft("org", CONFIG, A, T0)
    if state_setup != "draft":
        run.confirm_launch(Decimal("1.64"), Decimal("1.64"), "EU-RO-1", A, T0)
    if state_setup in ("running", "needs_recovery"):
        run.record_pod_launched("pod1", "n", Decimal("1.64"), "EU-RO-1", None, 20, 0, "system", T0)
    if state_setup == "needs_recovery":
        run.record_export_failed("export_failed", "", "system", T0)
        run.record_pod_stopped("export_failed", "system", T0)
    run.cancel(A, T0)
    if state_setup in ("draft", "needs_recovery"):
        assert run.state == "cancelled"
    else:
        assert run.state == "cancelling"
    if run.pod_status == "terminating":
        run.record_pod_terminated("system", T0)
        assert run.state == "cancelled"
    if state_setup == "launching":
        run.launch_failed("capacity", "", "system", T0)
        assert run.state == "cancelled"


def test_r13_releasing_an_unverified_pod_needs_explicit_confirmation() -> None:
    run = launched()
    run.record_export_failed("export_failed", "", "system", T0)
    run.record_pod_stopped("export_failed", "system", T0)
    with pytest.raises(UnverifiedRelease, match="only copy"):
        run.request_release(False, A, T0)
    run.request_release(True, A, T0)
    run.record_pod_terminated("system", T0)
    assert (run.state, run.state_reason) == ("failed", "released_unverified")


def test_k2_a_termination_is_confirmed_only_through_record_pod_terminated() -> None:
    run = launched()
    run.cancel(A, T0)
    run.record_termination_failed("500", 3, "system", T0)
    assert run.pod_status == "terminating"
    run.record_termination_failed("500", 3, "system", T0)
    run.record_termination_failed("500", 3, "system", T0)
    assert (run.pod_status, run.termination_attempts) == ("needs_manual", 3)
    run.record_pod_terminated("system", T0)
    assert (run.pod_status, run.state) == ("terminated", "cancelled")


def test_k2_a_pod_gone_at_runpod_is_recorded_and_fails_the_live_run() -> None:
    run = launched()
    run.record_pod_vanished("system", T0)
    assert (run.pod_status, run.state, run.state_reason) == ("gone", "failed", "pod_vanished")
