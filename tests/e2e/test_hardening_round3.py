"""Security round three: each finding of the outside probe, reproduced over HTTP
against a served stack, now fails to do harm.

The run-bound findings share one private stack whose sandbox Pods train and then hang, so the
test acts as the Pod's trainer with the run token from the Pod's environment, as the probe did.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Api, Org, custom_spec, problem
from tests.e2e.flows import (
    RunPodConsole,
    draft,
    launch,
    private_stack,
    ready,
    until,
    volume_objects,
    wait_state,
)
from tests.lora_builders import QWEN_7B, lora_zip
from trainer.callbacks import CallbackSender
from trainer.protocol import Log

World = tuple[Api, RunPodConsole, Org, dict[str, Any]]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with private_stack(tmp_path_factory, "round3") as (api, console):
        org, config = ready(api, api.sandbox.credentials())
        yield api, console, org, config


def _hung_run(world: World) -> tuple[str, httpx.Client]:
    """A launched run whose Pod trains and then hangs; (run id, a client with its run token)."""
    api, console, org, config = world
    console.scenario("hang", 1)
    run_id = draft(org, config)["id"]
    launch(org, run_id)
    wait_state(org, run_id, "running")
    pods = until(lambda: console.pods_of_run(run_id), what="the run's Pod")
    return run_id, api.client(pods[0]["env"]["TENSORANT_RUN_TOKEN"])


# ---------------------------------------------------------------- N6: bounded integers, JSON depth
def test_n6_a_report_seq_beyond_64_bits_is_a_422_and_every_trainer_route_still_answers(
    world: World,
) -> None:
    _api, _console, org, _config = world
    run_id, trainer = _hung_run(world)
    huge = {"boot": "b" * 16, "seq": 2**63, "time": "2026-12-01T00:00:00Z"}
    for path, body in (
        ("progress", {**huge, "phase": "training", "step": 1, "total_steps": 6}),
        (
            "progress",
            {"boot": "c" * 16, "seq": 1, "phase": "training", "step": 2**63, "total_steps": 6},
        ),
        ("failed", {**huge, "reason": "trainer_crashed", "detail": "x"}),
        ("logs", {"lines": [{**huge, "text": "a line"}]}),
    ):
        problem(
            trainer.post(f"/v1/trainer/runs/{run_id}/{path}", json=body), 422, "validation-error"
        )
    # The largest integer a store holds is taken, and the trainer's routes answer as before.
    ok = {"boot": "d" * 16, "seq": 2**63 - 1, "phase": "training", "step": 1, "total_steps": 6}
    assert trainer.post(f"/v1/trainer/runs/{run_id}/progress", json=ok).status_code == 202
    line = {"lines": [{"boot": "d" * 16, "seq": 2**63 - 2, "text": "still answering"}]}
    assert trainer.post(f"/v1/trainer/runs/{run_id}/logs", json=line).status_code == 202
    assert org.member.get(f"/v1/runs/{run_id}").json()["state"] in ("running", "exporting")


def test_n6_a_dataset_line_nested_100000_deep_is_refused_in_plain_words(world: World) -> None:
    _api, _console, org, config = world
    deep = b"[" * 100_000 + b"]" * 100_000 + b"\n"
    r = org.member.post(
        f"/v1/projects/{config['project_id']}/datasets",
        data={"name": "deep", "version": "1"},
        files={"file": ("deep.jsonl", deep, "application/jsonl")},
    )
    body = problem(r, 422, "dataset-invalid")
    assert any("nested deeper than" in e["problem"] for e in body["errors"]), body
    # The same line as a JSON request body: a 4xx, not a 500.
    raw = b'{"name": ' + deep.strip() + b"}"
    r = org.member.post("/v1/projects", content=raw, headers={"content-type": "application/json"})
    assert "nested too deeply" in problem(r, 422, "validation-error")["detail"]


def test_n6_a_status_json_nested_deep_does_not_stop_the_mailbox(world: World) -> None:
    """The probe's nested `status.json` failed the run's mailbox reads on every tick: the
    result.json written beside it must still be read and end the run."""
    api, _console, org, _config = world
    run_id, _trainer = _hung_run(world)

    def hung() -> bool:
        shown = org.member.get(f"/v1/runs/{run_id}").json()["progress"] or {}
        return bool(shown.get("step")) and shown["step"] == shown["total_steps"]

    until(hung, what="the trainer's last step (its heartbeat stops there)")
    s3 = volume_objects(api.sandbox.credentials())
    s3.put_object(
        Bucket="nv7eu1ro4k",
        Key=f"runs/{run_id}/status.json",
        Body=b'{"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    )
    result = {
        "boot": "e" * 16,
        "seq": 1,
        "time": "2026-12-01T00:00:00Z",
        "type": "failed",
        "reason": "trainer_crashed",
        "detail": "after a deep status.json",
    }
    s3.put_object(
        Bucket="nv7eu1ro4k", Key=f"runs/{run_id}/result.json", Body=json.dumps(result).encode()
    )
    wait_state(org, run_id, "needs_recovery", timeout=30)
    events = org.auditor.get(f"/v1/runs/{run_id}/events", params={"limit": 500}).json()
    failed = [e["data"] for e in events["events"] if e["type"] == "ExportFailed"]
    assert failed and failed[0]["detail"] == "after a deep status.json", events


# ---------------------------------------------------------------- informational findings
def test_member_emails_are_unique_whatever_their_case(world: World) -> None:
    api, _console, _org, _config = world
    org = api.new_org("Cases")
    made = org.owner.post("/v1/members", json={"email": "Ana@Example.com", "role": "member"})
    assert made.status_code == 201, made.text
    for email in ("ana@example.com", "ANA@EXAMPLE.COM"):
        again = org.owner.post("/v1/members", json={"email": email, "role": "auditor"})
        problem(again, 409, "member-exists")
    emails = [m["email"].casefold() for m in org.owner.get("/v1/members").json()]
    assert emails.count("ana@example.com") == 1


def test_only_the_project_s_dataset_objects_register_and_other_objects_are_not_confirmed(
    world: World,
) -> None:
    api, _console, org, config = world
    pid = config["project_id"]
    s3 = volume_objects(api.sandbox.credentials())
    chats = s3.get_object(
        Bucket="nv7eu1ro4k",
        Key=org.member.get(f"/v1/projects/{pid}/datasets").json()[0]["object_key"],
    )["Body"].read()
    # A valid JSONL file elsewhere in the bucket (beside a run's manifest, another project's).
    s3.put_object(Bucket="nv7eu1ro4k", Key="runs/elsewhere/rows.jsonl", Body=chats)
    other_project = f"datasets/{uuid.uuid4()}/rows.jsonl"
    s3.put_object(Bucket="nv7eu1ro4k", Key=other_project, Body=chats)
    url = f"/v1/projects/{pid}/datasets"
    answers = []
    for i, key in enumerate(
        (
            "runs/elsewhere/rows.jsonl",  # exists, not a dataset of this project
            "runs/elsewhere/none.jsonl",  # missing
            other_project,  # exists, another project's
            f"datasets/{pid}/none.jsonl",  # missing, under the prefix
        )
    ):
        body = {"name": f"probe-{i}", "version": "1", "object_key": key}
        found = problem(org.member.post(url, json=body), 422, "dataset-not-found")
        answers.append(
            {
                k: v.replace(key, "KEY") if isinstance(v, str) else v
                for k, v in found.items()
                if k not in ("instance", "request_id")
            }
        )
    assert all(a == answers[0] for a in answers), answers
    names = {d["name"] for d in org.member.get(url).json()}
    assert not {n for n in names if n.startswith("probe-")}
    # Under the prefix, a real dataset file registers.
    s3.put_object(Bucket="nv7eu1ro4k", Key=f"datasets/{pid}/by-hand/1.jsonl", Body=chats)
    r = org.member.post(
        url,
        json={"name": "by-hand", "version": "1", "object_key": f"datasets/{pid}/by-hand/1.jsonl"},
    )
    assert r.status_code == 201, r.text


def test_the_trailing_slash_redirect_is_relative_whatever_the_host_header(world: World) -> None:
    _api, _console, org, _config = world
    for path in ("/v1/runs/", "/v1/projects/?limit=5"):
        r = org.member.get(path, headers={"Host": "evil.example"}, follow_redirects=False)
        assert r.status_code in (307, 308), r.text
        location = r.headers["location"]
        assert location.startswith("/") and not location.startswith("//"), location
        assert "evil.example" not in location
        assert location == path.replace("/?", "?").rstrip("/")


# ---------------------------------------------------------------- N3: the owner's expiry
def test_n3_rotating_keeps_the_owner_s_expiry_and_an_owner_sets_and_changes_it(
    world: World,
) -> None:
    api, _console, _org, _config = world
    org = api.new_org("Expiry")
    made = org.owner.post(
        "/v1/members", json={"email": "brief@example.com", "role": "member", "expires_in_days": 1}
    ).json()
    expires, user_id = made["token_expires_at"], made["user_id"]
    member = api.client(made["token"])
    # The probe: a rotate with no body gave a token that never expired.
    r = member.post("/v1/me/token/rotate")
    assert r.status_code == 200, r.text
    assert r.json()["token_expires_at"] == expires
    member = api.client(r.json()["token"])
    # ... or one of 3,650 days: now the owner's expiry still.
    r = member.post("/v1/me/token/rotate", json={"expires_in_days": 3650})
    assert r.status_code == 200, r.text
    assert r.json()["token_expires_at"] == expires
    member = api.client(r.json()["token"])
    listed = {m["user_id"]: m for m in org.owner.get("/v1/members").json()}
    assert listed[user_id]["token_expires_at"] == expires
    # The expiry holds: past it, the rotated token is refused.
    clock = api.container.clock
    real_now = clock.now
    clock.now = lambda: real_now() + timedelta(days=1, seconds=1)  # type: ignore[method-assign]
    try:
        problem(member.get("/v1/me"), 401, "unauthenticated")
    finally:
        del clock.now
    # A member may shorten it (an expiry earlier than the owner's).
    two = org.owner.patch(f"/v1/members/{user_id}", json={"expires_in_days": 2}).json()
    r = member.post("/v1/me/token/rotate", json={"expires_in_days": 1})
    assert r.status_code == 200, r.text
    assert r.json()["token_expires_at"] < two["token_expires_at"]
    member = api.client(r.json()["token"])
    # An owner changes it, lifts it, and only an owner may.
    problem(
        member.patch(f"/v1/members/{user_id}", json={"expires_in_days": None}), 403, "forbidden"
    )
    r = org.owner.patch(f"/v1/members/{user_id}", json={"expires_in_days": 30})
    assert r.status_code == 200, r.text
    thirty = r.json()["token_expires_at"]
    assert thirty > expires and r.json()["role"] == "member"
    r = member.post("/v1/me/token/rotate")
    assert r.json()["token_expires_at"] == thirty
    member = api.client(r.json()["token"])
    r = org.owner.patch(f"/v1/members/{user_id}", json={"expires_in_days": None})
    assert r.status_code == 200 and r.json()["token_expires_at"] is None, r.text
    assert member.get("/v1/me").status_code == 200
    problem(org.owner.patch(f"/v1/members/{user_id}", json={}), 422, "validation-error")
    events = org.auditor.get(
        "/v1/audit/events", params={"type": "MemberTokenExpiryChanged", "limit": 100}
    ).json()["events"]
    assert len(events) == 3, events  # 2 days, 30 days, never
    assert "tnt_" not in str(events) and "token_hash" not in str(events)


# ---------------------------------------------------------------- N2: reports bound to their run
def _export(api: Api, run_id: str, trainer: httpx.Client, data: bytes, key: str) -> httpx.Response:
    volume_objects(api.sandbox.credentials()).put_object(Bucket="nv7eu1ro4k", Key=key, Body=data)
    return trainer.post(
        f"/v1/trainer/runs/{run_id}/exported",
        json={
            "object_key": key,
            "sha256": hashlib.sha256(data).hexdigest(),
            "size_bytes": len(data),
        },
    )


def test_n2_a_run_s_token_cannot_report_another_run_s_adapter(world: World) -> None:
    api, _console, org, _config = world
    first, first_trainer = _hung_run(world)
    data = lora_zip(QWEN_7B)
    r = _export(api, first, first_trainer, data, f"runs/{first}/adapter.zip")
    assert r.status_code == 202, r.text
    verified = wait_state(org, first, "succeeded")["adapter"]
    # The probe: another run's token reports the first run's verified adapter as its own.
    second, trainer = _hung_run(world)
    report = {
        "object_key": verified["object_key"],
        "sha256": verified["sha256"],
        "size_bytes": verified["size_bytes"],
    }
    for _ in range(2):  # a repeat (or another channel) records nothing more
        found = problem(
            trainer.post(f"/v1/trainer/runs/{second}/exported", json=report),
            422,
            "foreign-adapter-key",
        )
        assert f"runs/{second}/adapter.zip" in found["detail"]
    events = org.auditor.get(f"/v1/runs/{second}/events", params={"limit": 500}).json()["events"]
    refused = [e["data"] for e in events if e["type"] == "ExportReportRefused"]
    assert refused == [
        {**refused[0], "object_key": verified["object_key"], "reason": "foreign_adapter_key"}
    ], refused
    assert not [e for e in events if e["type"] in ("AdapterExported", "AdapterVerified")]
    body = org.member.get(f"/v1/runs/{second}").json()
    assert body["state"] in ("running", "exporting") and body["adapter"] is None, body
    # Its own key is still taken: the run verifies its own adapter.
    own = lora_zip(QWEN_7B, seed=2)
    r = _export(api, second, trainer, own, f"runs/{second}/adapter.zip")
    assert r.status_code == 202, r.text
    assert (
        wait_state(org, second, "succeeded")["adapter"]["sha256"] == hashlib.sha256(own).hexdigest()
    )


# ---------------------------------------------------------------- N1: a verified adapter is pinned
def _custom_objects(creds: dict[str, Any]) -> Any:
    """The organization's own S3 bucket, as its owner reaches it."""
    import boto3
    from botocore.config import Config

    c = creds["custom_s3"]
    return boto3.client(
        "s3",
        endpoint_url=c["endpoint_url"],
        region_name=c["region"],
        aws_access_key_id=c["access_key_id"],
        aws_secret_access_key=c["secret_access_key"],
        config=Config(
            s3={"addressing_style": "path"},
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        ),
    )


def test_n1_junk_put_to_the_old_adapter_url_after_verification_changes_nothing(
    world: World,
) -> None:
    api, console, _org, _config = world
    creds = api.sandbox.credentials()
    org, config = ready(api, creds, storage=custom_spec(creds), name="Custom")
    console.scenario("hang", 1)
    run_id = draft(org, config)["id"]
    launch(org, run_id)
    wait_state(org, run_id, "running")
    env = until(lambda: console.pods_of_run(run_id), what="the run's Pod")[0]["env"]
    # What anyone holding a key on the RunPod account reads: the Pod's env, then its manifest.
    manifest = httpx.get(env["TENSORANT_MANIFEST"], timeout=30).json()
    upload_url = manifest["adapter"]["upload_url"]
    data = lora_zip(QWEN_7B, seed=3)
    assert httpx.put(upload_url, content=data, timeout=30).status_code == 200
    trainer = api.client(env["TENSORANT_RUN_TOKEN"])
    report = {
        "object_key": manifest["adapter"]["object_key"],
        "sha256": hashlib.sha256(data).hexdigest(),
        "size_bytes": len(data),
    }
    assert trainer.post(f"/v1/trainer/runs/{run_id}/exported", json=report).status_code == 202
    verified = wait_state(org, run_id, "succeeded")["adapter"]
    assert verified["object_key"] == f"runs/{run_id}/verified/{report['sha256']}.zip"
    # The probe: 43 junk bytes PUT to the old URL after verification and the Pod's release.
    junk = b"not an adapter, 43 bytes of junk.........."
    assert httpx.put(upload_url, content=junk, timeout=30).status_code == 200
    s3 = _custom_objects(creds)
    bucket = creds["custom_s3"]["bucket"]
    body = org.member.get(f"/v1/runs/{run_id}").json()["adapter"]
    assert body == verified
    stored = s3.get_object(Bucket=bucket, Key=body["object_key"])["Body"].read()
    assert hashlib.sha256(stored).hexdigest() == body["sha256"] == report["sha256"]
    assert stored == data  # the run's adapter is still the verified one, byte for byte
    # What the Pod's env leads to now holds no URL to write with.
    again = httpx.get(env["TENSORANT_MANIFEST"], timeout=30).json()
    assert "upload_url" not in again["adapter"] and "mailbox" not in again, again


def test_n1_a_resumed_pod_reads_its_manifest_with_fresh_urls(world: World) -> None:
    api, console, _org, _config = world
    creds = api.sandbox.credentials()
    org, config = ready(api, creds, storage=custom_spec(creds), name="Resumed")
    console.scenario("export_fails", 1)
    run_id = draft(org, config)["id"]
    launch(org, run_id)
    env = until(lambda: console.pods_of_run(run_id), what="the run's Pod")[0]["env"]
    first = httpx.get(env["TENSORANT_MANIFEST"], timeout=30).json()
    until(
        lambda: org.member.get(f"/v1/runs/{run_id}").json()["cleanup"]["pod_status"] == "stopped",
        timeout=60,
        what="the Pod stopped and retained",
    )
    r = org.member.post(f"/v1/runs/{run_id}/pod/resume", json={"confirm_billing": True})
    assert r.status_code in (200, 202), r.text
    again = httpx.get(env["TENSORANT_MANIFEST"], timeout=30).json()
    assert again["adapter"]["upload_url"] != first["adapter"]["upload_url"]
    assert again["mailbox"]["result_url"] != first["mailbox"]["result_url"]
    assert again["adapter"]["object_key"] == first["adapter"]["object_key"]


# ---------------------------------------------------------------- M2: a trainer's JSON, 1 MiB too
def test_m2_a_trainer_s_log_batches_fit_the_json_cap_and_a_bigger_one_is_refused(
    world: World,
) -> None:
    api, _console, org, _config = world
    run_id, trainer = _hung_run(world)
    text = "é" * 9_990  # ~60 KB a line as the trainer's ASCII-escaped JSON
    huge = {"lines": [{"boot": "f" * 16, "seq": i, "text": text} for i in range(1, 1001)]}
    problem(trainer.post(f"/v1/trainer/runs/{run_id}/logs", json=huge), 413, "body-too-large")
    # The trainer's own sender splits the same lines into batches the API takes.
    token = trainer.headers["Authorization"].removeprefix("Bearer ")
    sender = CallbackSender(api.base_url, run_id, token, timeout_s=10)
    for i in range(1, 61):
        sender.publish(Log(boot="g" * 16, seq=i, time="2026-12-01T00:00:00Z", text=f"{i} {text}"))
    assert sender.drain(60) and sender.failures == 0, sender.failures
    sender.close()
    lines = org.member.get(f"/v1/runs/{run_id}/logs", params={"limit": 1000}).json()["lines"]
    assert sum(1 for line in lines if line["text"].endswith(text)) == 60
