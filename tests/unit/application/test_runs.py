"""The run reactor with in-memory fakes: launch, verify, release, stop and retain, recovery."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import pytest

from application.pods import pod_name
from application.ports import GpuOffer
from domain.launch import AvailabilityChanged, LowBalance, PriceAboveLimit
from tests.builders import adapter_zip, custom_s3, trial, upload_chats
from tests.fakes import GOOD_KEY, S3_ACCESS, S3_SECRET, FakeCompute
from tests.lora_builders import BAD_ADAPTERS
from tests.unit.application.conftest import new_services, seed_org
from trainer.protocol import POD_ENV, Manifest, manifest_key


def test_r5_r7_a_trial_launches_one_pod_verifies_the_adapter_and_releases_it(world) -> None:  # type: ignore[no-untyped-def]
    app, compute, objects, org, run_id = world
    app.runs.launch(org, run_id, "owner", True, "1.64")
    app.reactor.drive_run(run_id)
    app.reactor.drive_run(run_id)  # a duplicate message changes nothing
    run = app.log.run(org, run_id)
    assert run.state == "running" and len(compute.pods) == 1
    assert compute.find_pod_by_name(GOOD_KEY, pod_name(run_id)) is not None
    data = adapter_zip()
    objects.buckets["vol1euro"][f"runs/{run_id}/adapter.zip"] = data
    token = app.trainer.token(run_id)
    app.trainer.progress(run_id, token, "training")
    app.trainer.exported(
        run_id, token, f"runs/{run_id}/adapter.zip", hashlib.sha256(data).hexdigest(), len(data)
    )
    app.reactor.drive_run(run_id)
    run = app.log.run(org, run_id)
    assert run.state == "succeeded" and compute.pods == {}
    assert app.log.connection(org).write_permission == "proven"


def test_r7_a_corrupt_adapter_stops_and_retains_the_pod(world) -> None:  # type: ignore[no-untyped-def]
    app, compute, objects, org, run_id = world
    app.runs.launch(org, run_id, "owner", True, "1.64")
    app.reactor.drive_run(run_id)
    bad = b"not a zip"
    objects.buckets["vol1euro"][f"runs/{run_id}/adapter.zip"] = bad
    app.trainer.exported(
        run_id,
        app.trainer.token(run_id),
        f"runs/{run_id}/adapter.zip",
        hashlib.sha256(bad).hexdigest(),
        len(bad),
    )
    app.reactor.drive_run(run_id)
    run = app.log.run(org, run_id)
    assert (run.state, run.state_reason, run.pod_status) == (
        "needs_recovery",
        "adapter_not_zip",
        "stopped",
    )
    assert [c for c, _ in compute.calls] == ["launch", "stop"]


def test_r8_r9_export_failure_then_verify_the_saved_adapter(world) -> None:  # type: ignore[no-untyped-def]
    app, _compute, objects, org, run_id = world
    app.runs.launch(org, run_id, "owner", True, "1.64")
    app.reactor.drive_run(run_id)
    app.trainer.failed(run_id, app.trainer.token(run_id), "export_failed", "upload timed out")
    app.reactor.drive_run(run_id)
    assert app.log.run(org, run_id).state == "needs_recovery"
    objects.buckets["vol1euro"][f"runs/{run_id}/adapter.zip"] = adapter_zip()
    app.runs.recover_from_volume(org, run_id, "owner")
    app.reactor.drive_run(run_id)
    assert app.log.run(org, run_id).state == "succeeded"


def test_r4_launch_refusals_are_recorded_and_leave_a_draft(world) -> None:  # type: ignore[no-untyped-def]
    app, compute, _, org, run_id = world
    compute.gpus[0] = type(compute.gpus[0])(
        "NVIDIA A100 80GB PCIe",
        "A100",
        80,
        __import__("decimal").Decimal("2.50"),
        {"EU-RO-1": "High"},
    )
    with pytest.raises(PriceAboveLimit):
        app.runs.launch(org, run_id, "owner", True, "2.50")
    compute.gpus[0] = type(compute.gpus[0])(
        "NVIDIA A100 80GB PCIe",
        "A100",
        80,
        __import__("decimal").Decimal("1.64"),
        {"US-KS-2": "High"},
    )
    with pytest.raises(AvailabilityChanged):
        app.runs.launch(org, run_id, "owner", True, "1.64")
    compute.gpus[0] = type(compute.gpus[0])(
        "NVIDIA A100 80GB PCIe",
        "A100",
        80,
        __import__("decimal").Decimal("1.64"),
        {"EU-RO-1": "High"},
    )
    compute.balance = __import__("decimal").Decimal("1.00")
    with pytest.raises(LowBalance):
        app.runs.launch(org, run_id, "owner", True, "1.64")
    assert app.log.run(org, run_id).state == "draft"


class LaggingCompute(FakeCompute):
    """RunPod behind a copy of the offers: an ask that allows it gets the first answer."""

    copy: list[GpuOffer] | None = None

    def list_gpus(
        self,
        api_key: str,
        gpu_count: int = 1,
        *,
        allow_cached: bool = False,
        account: str | None = None,
    ) -> list[GpuOffer]:
        fresh = super().list_gpus(api_key, gpu_count)
        if allow_cached and self.copy is not None:
            return list(self.copy)
        self.copy = fresh
        return fresh


def test_r4_a_launch_asks_runpod_for_availability_even_right_after_a_draft(tmp_path) -> None:  # type: ignore[no-untyped-def]
    fakes = new_services(tmp_path, compute=LaggingCompute())
    org, run_id = seed_org(fakes.services)
    a100 = fakes.compute.gpus[0]
    fakes.compute.gpus[0] = replace(a100, stock={"US-KS-2": "High"})  # gone from the volume's DC
    project = str(fakes.services.log.run(org, run_id).config.project_id)
    dv = str(fakes.services.log.run(org, run_id).config.dataset_version_id)
    fakes.services.runs.draft(org, "owner", trial(project, dv))  # a draft may use the copy
    with pytest.raises(AvailabilityChanged):
        fakes.services.runs.launch(org, run_id, "owner", True, "1.64")
    assert fakes.services.log.run(org, run_id).state == "draft"


def test_r12_cancel_while_running_terminates_the_pod(world) -> None:  # type: ignore[no-untyped-def]
    app, compute, _, org, run_id = world
    app.runs.launch(org, run_id, "owner", True, "1.64")
    app.reactor.drive_run(run_id)
    app.runs.cancel(org, run_id, "owner")
    app.reactor.drive_run(run_id)
    assert app.log.run(org, run_id).state == "cancelled" and compute.pods == {}


def test_r12_a_cancel_that_overtook_the_pods_creation_terminates_the_pod(world) -> None:  # type: ignore[no-untyped-def]
    """The worker created the Pod and died before recording it; the member cancelled meanwhile.
    The next drive finds the Pod by name, records it, and terminates it: it must not be left
    running under a run stuck in `cancelling` (found by the worker-crash chaos test)."""
    app, compute, _, org, run_id = world
    app.runs.launch(org, run_id, "owner", True, "1.64")
    spec = app.reactor._pod_spec(app.log.run(org, run_id), pod_name(run_id))
    compute.launch_pod(GOOD_KEY, spec)  # RunPod created it; our save never happened
    app.runs.cancel(org, run_id, "owner")
    assert app.log.run(org, run_id).state == "cancelling"
    app.reactor.drive_run(run_id)
    run = app.log.run(org, run_id)
    assert run.state == "cancelled", (run.state, run.pod_status)
    assert compute.pods == {}


def test_a_trainer_token_is_useless_for_another_run(world) -> None:  # type: ignore[no-untyped-def]
    app, _, _, org, run_id = world
    other, _ = app.runs.draft(org, "owner", app.log.run(org, run_id).config)
    with pytest.raises(Exception, match="not found"):
        app.trainer.progress(other, app.trainer.token(run_id), "training")


@pytest.mark.parametrize("case", sorted(BAD_ADAPTERS))
def test_r7_each_bad_adapter_goes_to_needs_recovery_with_its_own_reason(world, case: str) -> None:  # type: ignore[no-untyped-def]
    app, compute, objects, org, run_id = world
    reason, spoil = BAD_ADAPTERS[case]
    app.runs.launch(org, run_id, "owner", True, "1.64")
    app.reactor.drive_run(run_id)
    bad = spoil(adapter_zip())
    objects.buckets["vol1euro"][f"runs/{run_id}/adapter.zip"] = bad
    token = app.trainer.token(run_id)
    app.trainer.exported(
        run_id, token, f"runs/{run_id}/adapter.zip", hashlib.sha256(bad).hexdigest(), len(bad)
    )
    app.reactor.drive_run(run_id)
    run = app.log.run(org, run_id)
    assert (run.state, run.state_reason, run.pod_status) == ("needs_recovery", reason, "stopped")
    assert [c for c, _ in compute.calls] == ["launch", "stop"]  # retained, never terminated


def test_r7_a_missing_adapter_object_is_adapter_missing(world) -> None:  # type: ignore[no-untyped-def]
    app, _compute, _objects, org, run_id = world
    app.runs.launch(org, run_id, "owner", True, "1.64")
    app.reactor.drive_run(run_id)
    token = app.trainer.token(run_id)
    app.trainer.exported(run_id, token, f"runs/{run_id}/adapter.zip", "ab" * 32, 10)
    app.reactor.drive_run(run_id)
    run = app.log.run(org, run_id)
    assert (run.state, run.state_reason) == ("needs_recovery", "adapter_missing")


@pytest.mark.parametrize(
    ("wrong", "reason"), [("sha256", "adapter_sha256_mismatch"), ("size", "adapter_size_mismatch")]
)
def test_r7_a_good_adapter_reported_with_a_wrong_sha256_or_size_is_refused_and_kept(  # type: ignore[no-untyped-def]
    world, wrong: str, reason: str
) -> None:
    """The stored object is checked against what the trainer reported, not only as a zip."""
    app, compute, objects, org, run_id = world
    app.runs.launch(org, run_id, "owner", True, "1.64")
    app.reactor.drive_run(run_id)
    good = adapter_zip()
    objects.buckets["vol1euro"][f"runs/{run_id}/adapter.zip"] = good
    sha256, size = hashlib.sha256(good).hexdigest(), len(good)
    if wrong == "sha256":
        sha256 = hashlib.sha256(b"another adapter").hexdigest()
    else:
        size += 1
    token = app.trainer.token(run_id)
    app.trainer.exported(run_id, token, f"runs/{run_id}/adapter.zip", sha256, size)
    app.reactor.drive_run(run_id)
    run = app.log.run(org, run_id)
    assert (run.state, run.state_reason, run.pod_status) == ("needs_recovery", reason, "stopped")
    assert [c for c, _ in compute.calls] == ["launch", "stop"]  # retained, never terminated


def test_t1_the_manifest_is_written_before_create_and_the_pod_env_has_four_names(world) -> None:  # type: ignore[no-untyped-def]
    app, compute, objects, org, run_id = world
    app.runs.launch(org, run_id, "owner", True, "1.64")
    app.reactor.drive_run(run_id)
    [spec] = compute.specs
    assert set(spec.env) == set(POD_ENV)
    assert spec.env["TENSORANT_MANIFEST"] == f"file:///workspace/runs/{run_id}/manifest.json"
    assert S3_SECRET not in repr(spec) and S3_ACCESS not in repr(spec)
    raw = objects.buckets["vol1euro"][manifest_key(run_id)]
    manifest = Manifest.loads(raw)
    run = app.log.run(org, run_id)
    [dv] = app.log.project(org, str(run.config.project_id)).datasets.values()
    assert manifest.run_id == run_id and manifest.kind == "trial"
    assert manifest.base_model.name == run.config.base_model
    assert (manifest.dataset.object_key, manifest.dataset.sha256) == (
        dv["object_key"],
        dv["sha256"],
    )
    assert manifest.dataset.format == "chat" and manifest.dataset.url is None
    assert manifest.adapter.object_key == f"runs/{run_id}/adapter.zip"
    assert manifest.hyperparameters.lora_r == 16 and manifest.hyperparameters.batch_size == 4
    assert manifest.storage == "runpod_volume" and manifest.mailbox is None
    # A retried create (the reactor's create path again) rewrites the same bytes.
    app.reactor._pod_spec(run, pod_name(run_id))
    assert objects.buckets["vol1euro"][manifest_key(run_id)] == raw


def test_t1_custom_s3_gets_presigned_urls_in_the_manifest_and_never_a_key_pair(tmp_path) -> None:  # type: ignore[no-untyped-def]
    fakes = new_services(tmp_path)
    s = fakes.services
    org = s.organizations.create("Acme")
    s.connections.connect(org, "owner", GOOD_KEY)
    s.storage.bind_custom_s3(org, "owner", custom_s3())
    project, _ = s.projects.create(org, "owner", "bot")
    dv = upload_chats(s, org, project)
    run_id, _ = s.runs.draft(org, "owner", trial(project, dv))
    s.runs.launch(org, run_id, "owner", True, "1.64")
    s.reactor.drive_run(run_id)
    [spec] = fakes.compute.specs
    assert set(spec.env) == set(POD_ENV)
    assert spec.env["TENSORANT_MANIFEST"].startswith("https://presigned.invalid/")
    assert S3_SECRET not in repr(spec) and S3_ACCESS not in repr(spec)
    raw = fakes.objects.buckets["custom-bucket"][manifest_key(run_id)]
    assert S3_SECRET.encode() not in raw and S3_ACCESS.encode() not in raw
    manifest = Manifest.loads(raw)
    assert manifest.storage == "s3" and manifest.dataset.url and manifest.adapter.upload_url
    assert manifest.mailbox is not None and len(manifest.mailbox.log_urls) == 64


def test_n1_a_training_run_s_download_urls_are_renewed_while_each_lives_minutes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    fakes = new_services(tmp_path)
    s, clock, objects = fakes.services, fakes.clock, fakes.objects
    objects.presign_get = lambda loc, creds, key, expires_s: (  # type: ignore[method-assign,assignment]
        f"https://presigned.invalid/{key}?get&at={clock.now().isoformat()}&for={expires_s}"
    )
    objects.presign_put = lambda loc, creds, key, expires_s: (  # type: ignore[method-assign,assignment]
        f"https://presigned.invalid/{key}?put&at={clock.now().isoformat()}&for={expires_s}"
    )
    org = s.organizations.create("Acme")
    s.connections.connect(org, "owner", GOOD_KEY)
    s.storage.bind_custom_s3(org, "owner", custom_s3())
    project, _ = s.projects.create(org, "owner", "bot")
    run_id, _ = s.runs.draft(org, "owner", trial(project, upload_chats(s, org, project)))
    s.runs.launch(org, run_id, "owner", True, "1.64")
    s.reactor.drive_run(run_id)
    token = s.trainer.token(run_id)

    def manifest() -> Manifest:
        return Manifest.loads(objects.buckets["custom-bucket"][manifest_key(run_id)])

    launched = manifest()
    get_s = 25 * 60 + 30 * 60  # the boot deadline and half an hour
    assert launched.dataset.url and launched.dataset.url.endswith(f"&for={get_s}")
    runtime_s = 60 * 60 + 10 * 60  # the trial's 60 minutes and the stop grace
    assert launched.adapter.upload_url and launched.adapter.upload_url.endswith(f"&for={runtime_s}")
    elapsed = 0
    for seq in range(1, 6):  # a trainer that keeps reporting, for 5 x 400 s
        s.trainer.progress(
            run_id, token, "training", boot="b" * 16, seq=seq, step=seq, total_steps=100
        )
        clock.advance(400)
        elapsed += 400
        s.reactor.reconcile_org(org, [run_id])
        if elapsed < get_s / 2:
            assert manifest() == launched, elapsed  # not yet half way: nothing rewritten
    renewed = manifest()
    assert renewed.dataset.url != launched.dataset.url
    assert renewed.dataset.url and renewed.dataset.url.endswith(f"&for={get_s}")
    # the uploads' URLs still end when the Pod's runtime and grace do, as at launch
    assert renewed.adapter.upload_url and renewed.adapter.upload_url.endswith(
        f"&for={runtime_s - elapsed}"
    )
