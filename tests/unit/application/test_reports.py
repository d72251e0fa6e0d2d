"""One report applier for every channel. A `(boot, seq)` is applied once whichever of
callback, mailbox or Pod logs brings it; the mailbox alone (no callback ever arrives) carries a
run to a verified adapter; nothing on any channel while the Pod runs shows `stalled_since`."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
from collections import Counter
from typing import Any
from uuid import UUID, uuid4

import pytest

from application.mailbox import MAILBOX
from application.memory import MemoryReportStore
from application.services import Services
from application.trainer_callbacks import (
    VIA_CALLBACK,
    VIA_MAILBOX,
    VIA_POD_LOGS,
    TrainerTokenExpired,
)
from domain.run import TERMINAL, Run
from tests.builders import adapter_zip
from tests.fakes import FakeObjectStore, FixedClock
from trainer.protocol import (
    Exported,
    Log,
    Progress,
    Status,
    format_report_line,
    log_chunk_key,
    parse_report_line,
    result_key,
    status_key,
)

BOOT = "b00t0000aaaa1111"
BUCKET = "vol1euro"


def _events(app: Services, run_id: str) -> list[str]:
    return [type(e).__name__ for e in app.log.repository.event_store.get(UUID(run_id))]


def _reports(run_id: str, data: bytes) -> list[Any]:
    """What a trainer reports in a short run: logs, progress through export, the adapter."""
    t = "2026-12-01T10:00:{:02d}.000Z"
    out: list[Any] = [Log(boot=BOOT, seq=1, time=t.format(1), text="loading the base model")]
    out.append(
        Progress(boot=BOOT, seq=2, time=t.format(2), phase="training", step=1, total_steps=3)
    )
    out.append(Log(boot=BOOT, seq=3, time=t.format(3), text="step 1 loss 2.1"))
    out.append(
        Progress(boot=BOOT, seq=4, time=t.format(4), phase="training", step=3, total_steps=3)
    )
    out.append(Log(boot=BOOT, seq=5, time=t.format(5), text="saving the adapter"))
    out.append(
        Progress(boot=BOOT, seq=6, time=t.format(6), phase="exporting", step=3, total_steps=3)
    )
    out.append(
        Exported(
            boot=BOOT,
            seq=7,
            time=t.format(7),
            object_key=f"runs/{run_id}/adapter.zip",
            sha256=hashlib.sha256(data).hexdigest(),
            size_bytes=len(data),
            partial=False,
        )
    )
    return out


def _write_mailbox(objects: FakeObjectStore, run_id: str, reports: list[Any]) -> None:
    bucket = objects.buckets[BUCKET]
    logs = [r for r in reports if isinstance(r, Log)]
    chunk = "".join(json.dumps(r.to_json()) + "\n" for r in logs).encode()
    bucket[log_chunk_key(run_id, BOOT, logs[0].seq)] = chunk
    last = [r for r in reports if isinstance(r, Progress)][-1]
    status = Status(
        run_id=run_id,
        progress=last,
        updated_at=last.time,
        last_activity_at=last.time,
        attempt=1,
    )
    bucket[status_key(run_id)] = json.dumps(status.to_json()).encode()
    final = [r for r in reports if isinstance(r, Exported)]
    if final:
        bucket[result_key(run_id)] = json.dumps(final[0].to_json()).encode()


def _launched(world: Any) -> tuple[Services, FakeObjectStore, str, str, bytes]:
    app, _compute, objects, org, run_id = world
    app.runs.launch(org, run_id, "owner", True, "1.64")
    app.reactor.drive_run(run_id)
    data = adapter_zip()
    objects.buckets[BUCKET][f"runs/{run_id}/adapter.zip"] = data
    return app, objects, org, run_id, data


def _counting_gets(objects: FakeObjectStore) -> list[str]:
    """The keys `objects.get` is asked for from now on, in order."""
    reads: list[str] = []
    get = objects.get

    def counted(loc: Any, creds: Any, key: str) -> bytes:
        reads.append(key)
        return get(loc, creds, key)

    objects.get = counted  # type: ignore[method-assign]
    return reads


def _lines(app: Services, run_id: str) -> list[str]:
    store = app.trainer.reports
    assert isinstance(store, MemoryReportStore)
    return [text for _, text in store.lines.get(run_id, [])]


def test_the_mailbox_alone_carries_a_run_to_a_verified_adapter(world: Any) -> None:
    app, objects, org, run_id, data = _launched(world)
    reports = _reports(run_id, data)
    _write_mailbox(objects, run_id, reports)
    app.reactor.reconcile_org(org, [run_id])  # the reconcile loop reads the mailbox
    app.reactor.drive_run(run_id)  # what the AdapterExported event triggers: verification
    events = _events(app, run_id)
    assert "AdapterExported" in events and "AdapterVerified" in events, events
    assert _lines(app, run_id) == [
        "loading the base model",
        "step 1 loss 2.1",
        "saving the adapter",
    ]
    progress = app.report_reads.shown_progress(run_id)
    assert progress is not None
    assert (progress["phase"], progress["via"]) == ("exporting", VIA_MAILBOX)
    before = _events(app, run_id)
    app.reactor.reconcile_org(org, [run_id])  # level-triggered: reading again changes nothing
    assert _events(app, run_id) == before
    assert len(_lines(app, run_id)) == 3
    assert app.trainer.reports.get_state(run_id, MAILBOX) is not None


def test_every_report_is_applied_once_whichever_channels_bring_it(world: Any) -> None:
    app, objects, org, run_id, data = _launched(world)
    reports = _reports(run_id, data)
    # Pod logs: every report as a TENSORANT-REPORT line, plus lines no trainer code controls.
    stdout = ["pulling image tensorant/trainer:1.0"] + [format_report_line(r) for r in reports]
    half = len(stdout) // 2
    at = app.clock.now()

    def pod_logs(lines: list[str]) -> None:
        app.trainer.apply(run_id, [parse_report_line(x) or (at, x) for x in lines], VIA_POD_LOGS)

    pod_logs(stdout[:half])
    token = app.trainer.token(run_id)
    for r in reports:  # every callback arrives too
        if isinstance(r, Log):
            app.trainer.log_lines(run_id, token, [(r.boot, r.seq, at, r.text)])
        elif isinstance(r, Progress):
            body = {k: v for k, v in r.to_json().items() if k != "phase"}
            app.trainer.progress(run_id, token, r.phase, **body)
        else:
            body = r.to_json()
            app.trainer.exported(
                run_id, token, r.object_key, r.sha256, r.size_bytes, boot=BOOT, seq=body["seq"]
            )
    _write_mailbox(objects, run_id, reports)
    app.reactor.reconcile_org(org, [run_id])
    pod_logs(stdout[half:])  # the rest of the stream, after the other channels brought it
    app.reactor.drive_run(run_id)
    counts = Counter(_events(app, run_id))
    for kind in ("TrainingStarted", "ExportStarted", "AdapterExported", "AdapterVerified"):
        assert counts[kind] == 1, counts
    expected = ["pulling image tensorant/trainer:1.0"]
    expected += [r.text for r in reports if isinstance(r, Log)]
    assert _lines(app, run_id) == expected
    store = app.trainer.reports
    assert isinstance(store, MemoryReportStore)
    by = {seq: via for (rid, _b, seq), via in store.claims.items() if rid == run_id}
    assert by[1] == VIA_POD_LOGS  # the first half came by Pod logs first
    assert by[7] == VIA_CALLBACK  # the rest by callback
    progress = app.report_reads.shown_progress(run_id)
    assert progress is not None and progress["via"] == VIA_CALLBACK


def test_a_run_that_reports_nothing_while_its_pod_runs_shows_stalled_since(world: Any) -> None:
    app, objects, org, run_id, data = _launched(world)
    clock = app.clock
    assert isinstance(clock, FixedClock)
    doc = {"id": run_id, "state": "running", "cleanup": {"pod_status": "running"}}
    doc["started_at"] = clock.now().isoformat()
    assert app.report_reads.stalled_since(doc, clock.now()) is None
    reports = _reports(run_id, data)
    _write_mailbox(objects, run_id, reports[:3])
    app.reactor.reconcile_org(org, [run_id])
    seen = app.report_reads.seen(run_id)
    assert seen is not None and seen["via"] == VIA_MAILBOX
    clock.advance(app.trainer.settings.stall_after_s - 1)
    assert app.report_reads.stalled_since(doc, clock.now()) is None
    app.reactor.reconcile_org(org, [run_id])  # the same status.json: no heartbeat
    clock.advance(2)
    assert app.report_reads.stalled_since(doc, clock.now()) == seen["at"]
    # the run's view keeps the report that started training (its event's)
    doc["started_by"] = app.log.repository.get(UUID(run_id)).started_by
    status = app.report_reads.report_status(doc, clock.now())
    assert status["stalled_since"] == seen["at"]
    assert status["progress"]["via"] == VIA_MAILBOX
    # A fresh heartbeat (status.json rewritten) ends the stall.
    bucket = objects.buckets[BUCKET]
    body = json.loads(bucket[status_key(run_id)])
    body["updated_at"] = "2026-12-01T10:09:00.000Z"
    bucket[status_key(run_id)] = json.dumps(body).encode()
    app.reactor.reconcile_org(org, [run_id])
    assert app.report_reads.stalled_since(doc, clock.now()) is None
    # Not while the Pod is stopped: that is another state with its own page.
    stopped = {**doc, "cleanup": {"pod_status": "stopped"}}
    clock.advance(10 * app.trainer.settings.stall_after_s)
    assert app.report_reads.stalled_since(stopped, clock.now()) is None
    assert app.report_reads.stalled_since(doc, clock.now()) is not None


def test_a_late_copy_of_an_older_progress_report_does_not_replace_the_newer_one(
    world: Any,
) -> None:
    app, _objects, _org, run_id, _data = _launched(world)
    token = app.trainer.token(run_id)
    t = "2026-12-01T10:0{}:00.000Z"
    app.trainer.progress(run_id, token, "training", boot="b1", seq=5, step=50, time=t.format(5))
    app.trainer.progress(run_id, token, "training", boot="b1", seq=3, step=30, time=t.format(3))
    progress = app.report_reads.shown_progress(run_id)
    assert progress is not None and (progress["seq"], progress["step"]) == (5, 50)
    # a new boot's report is newer by its time, not by its seq
    app.trainer.progress(run_id, token, "training", boot="b2", seq=1, step=60, time=t.format(7))
    app.trainer.progress(run_id, token, "training", boot="b0", seq=9, step=10, time=t.format(1))
    progress = app.report_reads.shown_progress(run_id)
    assert progress is not None and (progress["boot"], progress["step"]) == ("b2", 60)
    seen = app.report_reads.seen(run_id)
    assert seen is not None and seen["via"] == VIA_CALLBACK


def test_a_callback_whose_run_changed_after_its_token_check_decides_again_on_the_saved_run(
    world: Any,
) -> None:
    """The token check's load is reused; when another channel saved the run in between, the
    save conflicts and the command loads the run and decides again (no error, no repeat)."""
    app, _objects, _org, run_id, _data = _launched(world)
    token = app.trainer.token(run_id)
    stale = app.trainer.authenticate(run_id, token)
    t = "2026-12-01T10:0{}:00.000Z"
    first = Progress(boot=BOOT, seq=2, time=t.format(2), phase="training", step=1, total_steps=3)
    assert app.trainer.apply(run_id, [first], VIA_POD_LOGS) > 0  # TrainingStarted, by Pod logs
    later = Progress(boot=BOOT, seq=4, time=t.format(4), phase="training", step=3, total_steps=3)
    assert app.trainer.apply(run_id, [later], VIA_CALLBACK, loaded=stale) == 0
    assert Counter(_events(app, run_id))["TrainingStarted"] == 1
    progress = app.report_reads.shown_progress(run_id)
    assert progress is not None and (progress["step"], progress["via"]) == (3, VIA_CALLBACK)


def test_the_in_memory_report_store_claims_and_changes_state_together_or_not_at_all() -> None:
    store = MemoryReportStore()

    def broken(_last: dict[str, Any] | None) -> dict[str, Any] | None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        store.claim("r1", "b", 1, VIA_CALLBACK, {"seen": {"at": "t0"}, "progress": broken})
    assert store.get_state("r1", "seen") is None
    assert store.claim("r1", "b", 1, VIA_CALLBACK, {"seen": {"at": "t1"}}) is True
    assert store.claim("r1", "b", 1, VIA_MAILBOX, {"seen": {"at": "t2"}}) is False
    assert store.get_state("r1", "seen") == {"at": "t1"}


def test_a_run_ended_elsewhere_voids_its_token_though_this_process_kept_the_run(
    world: Any,
) -> None:
    """Reports reuse the run this process kept only while the log holds nothing newer: a run
    another process ended is read again, and its Pod's token no longer works."""
    app, _objects, _org, run_id, _data = _launched(world)
    token = app.trainer.token(run_id)
    t = "2026-12-01T10:0{}:00.000Z"
    app.trainer.progress(run_id, token, "training", boot=BOOT, seq=1, step=1, time=t.format(1))
    held = app.trainer.kept_runs.take(run_id)
    assert app.trainer.kept_runs.take(run_id) is not held  # the report left it kept
    app.trainer.kept_runs.give_back(held)
    elsewhere = app.log.load(Run, run_id)  # another process: not through these kept runs
    elsewhere.record_pod_vanished("system", elsewhere.modified_on)
    app.log.save_all(elsewhere)
    assert elsewhere.state in TERMINAL and held.state not in TERMINAL
    with pytest.raises(TrainerTokenExpired):
        app.trainer.progress(run_id, token, "training", boot=BOOT, seq=2, step=2, time=t.format(2))


def test_a_runs_token_is_the_hmac_sha256_of_its_id_under_the_trainer_secret(world: Any) -> None:
    """A Pod's token must verify in every process and after an upgrade, whatever a process kept
    of its key: HMAC-SHA256 of `trainer:<run id>` under the trainer secret, and nothing else."""
    app, _objects, _org, run_id, _data = _launched(world)
    other = dataclasses.replace(
        app.trainer, settings=dataclasses.replace(app.trainer.settings, trainer_secret=b"k2" * 16)
    )
    for trainer in (app.trainer, other, app.trainer):
        secret = trainer.settings.trainer_secret or b"tensorant-dev-only"
        for rid in (run_id, str(uuid4())):
            mac = hmac.new(secret, f"trainer:{rid}".encode(), hashlib.sha256).hexdigest()
            assert trainer.token(rid) == mac
    assert other.token(run_id) != app.trainer.token(run_id)


def test_the_report_that_starts_training_is_claimed_by_its_event_and_a_copy_is_known(
    world: Any,
) -> None:
    """The report that starts training writes only its event (`TrainingStarted` keeps
    its key and progress); a copy of it by another channel is not fresh: no second claim, and
    neither the progress shown nor when the run was last seen moves."""
    app, _objects, _org, run_id, _data = _launched(world)
    store = app.trainer.reports
    assert isinstance(store, MemoryReportStore)
    token = app.trainer.token(run_id)
    t = "2026-12-01T10:0{}:00.000Z"
    body = {"boot": BOOT, "seq": 2, "step": 1, "loss": float("nan"), "time": t.format(2)}
    assert app.trainer.progress(run_id, token, "training", **body) > 0
    run = app.log.repository.get(UUID(run_id))
    assert run.started_by is not None
    assert (run.started_by["seq"], run.started_by["via"]) == (2, VIA_CALLBACK)
    assert run.started_by["loss"] is None  # JSON has no NaN: kept as the store keeps it
    assert not [k for k in store.claims if k[0] == run_id]  # the event was its claim
    assert store.get_state(run_id, "progress") is None
    shown, seen = app.report_reads.shown_progress(run_id), app.report_reads.seen(run_id)
    assert shown is not None and (shown["step"], shown["via"]) == (1, VIA_CALLBACK)
    assert seen == {"at": shown["received_at"], "via": VIA_CALLBACK}

    app.clock.advance(30)  # type: ignore[attr-defined]
    copy = Progress(boot=BOOT, seq=2, time=t.format(2), phase="training", step=1, total_steps=3)
    assert app.trainer.apply(run_id, [copy], VIA_MAILBOX) == 0
    assert app.trainer.apply(run_id, [copy], VIA_POD_LOGS) == 0
    assert app.trainer.progress(run_id, token, "training", **body) == 0  # the trainer's retry
    assert not [k for k in store.claims if k[0] == run_id]
    assert (app.report_reads.shown_progress(run_id), app.report_reads.seen(run_id)) == (shown, seen)
    assert Counter(_events(app, run_id))["TrainingStarted"] == 1

    # the next report is claimed in the store as before, and shown as the newer
    later = Progress(boot=BOOT, seq=4, time=t.format(4), phase="training", step=3, total_steps=3)
    assert app.trainer.apply(run_id, [later], VIA_MAILBOX) == 0
    assert [via for k, via in store.claims.items() if k[0] == run_id] == [VIA_MAILBOX]
    now = app.report_reads.shown_progress(run_id)
    assert now is not None and (now["step"], now["via"]) == (3, VIA_MAILBOX)
    assert app.report_reads.seen(run_id) == {"at": now["received_at"], "via": VIA_MAILBOX}


def test_two_channels_bringing_the_starting_report_at_once_start_training_once(
    world: Any,
) -> None:
    """The callback judged the report on its kept run while Pod logs started training with the
    same report: the callback's save conflicts, it reads the run again and finds its report
    was the one that started it (a copy: nothing recorded twice)."""
    app, _objects, _org, run_id, _data = _launched(world)
    store = app.trainer.reports
    assert isinstance(store, MemoryReportStore)
    token = app.trainer.token(run_id)
    stale = app.trainer.authenticate(run_id, token)  # the callback's kept run, before
    t = "2026-12-01T10:0{}:00.000Z"
    first = Progress(boot=BOOT, seq=2, time=t.format(2), phase="training", step=1, total_steps=3)
    assert app.trainer.apply(run_id, [first], VIA_POD_LOGS) > 0
    saved = app.log.repository.get(UUID(run_id)).version
    assert stale.version < saved
    assert app.trainer.apply(run_id, [first], VIA_CALLBACK, stale, loaded_at_claim=True) == 0
    assert app.log.repository.get(UUID(run_id)).version == saved
    assert Counter(_events(app, run_id))["TrainingStarted"] == 1
    assert not [k for k in store.claims if k[0] == run_id]
    shown = app.report_reads.shown_progress(run_id)
    assert shown is not None and shown["via"] == VIA_POD_LOGS

    # a different report on such a stale run is claimed, on the run read again
    stale = app.log.repository.get(UUID(run_id))
    moved = app.log.repository.get(UUID(run_id))  # another process moves the run on
    moved.start_export("trainer", app.clock.now())
    app.log.save_all(moved)
    later = Progress(boot=BOOT, seq=4, time=t.format(4), phase="exporting", step=3, total_steps=3)
    assert app.trainer.apply(run_id, [later], VIA_CALLBACK, stale, loaded_at_claim=True) == 0
    assert [via for k, via in store.claims.items() if k[0] == run_id] == [VIA_CALLBACK]
    assert Counter(_events(app, run_id))["ExportStarted"] == 1


def test_each_training_report_is_one_metric_point_whichever_channels_bring_it(
    world: Any,
) -> None:
    """R17: a training report after an optimizer step keeps its measures in the run's series
    once, though Pod logs and callbacks both bring it; the first report (step 0) and the
    export's repeat nothing."""
    app, _objects, _org, run_id, _data = _launched(world)
    t = "2026-12-01T10:00:{:02d}.000Z"
    reports = [
        Progress(boot=BOOT, seq=1, time=t.format(1), phase="training", step=0, total_steps=2),
        Progress(
            boot=BOOT,
            seq=2,
            time=t.format(2),
            phase="training",
            step=1,
            total_steps=2,
            loss=2.5,
            learning_rate=1e-4,
            tokens_per_s=900.0,
            epoch=0.5,
            grad_norm=1.7,
        ),
        Progress(
            boot=BOOT,
            seq=3,
            time=t.format(3),
            phase="training",
            step=2,
            total_steps=2,
            loss=2.0,
            learning_rate=5e-5,
            epoch=1.0,
            grad_norm=0.9,
            eval_loss=2.2,
        ),
        Progress(
            boot=BOOT, seq=4, time=t.format(4), phase="exporting", step=2, total_steps=2, loss=2.0
        ),
    ]
    lines = [parse_report_line(format_report_line(r)) for r in reports]
    assert all(line is not None for line in lines)
    app.trainer.apply(run_id, [x for x in lines if x is not None], VIA_POD_LOGS)
    token = app.trainer.token(run_id)
    for r in reports:
        body = {k: v for k, v in r.to_json().items() if k != "phase"}
        app.trainer.progress(run_id, token, r.phase, **body)
    store = app.trainer.reports
    assert isinstance(store, MemoryReportStore)
    series = store.metrics[run_id]
    assert sorted(series) == [(BOOT, 2), (BOOT, 3)]
    assert series[(BOOT, 2)] == {
        "step": 1,
        "epoch": 0.5,
        "loss": 2.5,
        "learning_rate": 1e-4,
        "grad_norm": 1.7,
        "tokens_per_s": 900.0,
        "eval_loss": None,
        "time": "2026-12-01T10:00:02Z",
    }
    assert series[(BOOT, 3)]["eval_loss"] == 2.2


def test_a_pass_reads_a_pod_log_fed_runs_mailbox_only_at_the_sweep_and_drains_it_at_the_end(
    world: Any,
) -> None:
    """K2 at scale, shared polls: a run whose reports arrive on its Pod log has its mailbox read
    by a pass only every `mailbox_sweep_s` (or when that channel is quiet), and once more
    when it leaves training, so a line only the mailbox holds still reaches the run page."""
    app, objects, org, run_id, data = _launched(world)
    reports = _reports(run_id, data)
    settings = app.reactor.settings
    reads = _counting_gets(objects)
    app.trainer.apply(run_id, reports[:2], VIA_POD_LOGS)
    _write_mailbox(objects, run_id, reports[:3])
    app.reactor.reconcile_org(org, [run_id])
    assert reads, "a mailbox never read is read by the pass"
    assert _lines(app, run_id) == ["loading the base model", "step 1 loss 2.1"]

    # The Pod log keeps bringing reports; a line reaches the mailbox only (the log dropped it).
    reads.clear()
    app.clock.advance(settings.reconcile_interval_s)
    app.trainer.apply(run_id, reports[3:4], VIA_POD_LOGS)
    saving = [r for r in reports if isinstance(r, Log) and r.seq == 5]
    objects.buckets[BUCKET][log_chunk_key(run_id, BOOT, 5)] = (
        json.dumps(saving[0].to_json()).encode() + b"\n"
    )
    app.reactor.reconcile_org(org, [run_id])
    assert reads == []
    assert "saving the adapter" not in _lines(app, run_id)

    # The sweep: read again once `mailbox_sweep_s` passed, however lively the Pod log is.
    app.clock.advance(settings.mailbox_sweep_s)
    app.trainer.mark_seen(run_id, VIA_POD_LOGS)
    app.reactor.reconcile_org(org, [run_id])
    assert reads and _lines(app, run_id)[-1] == "saving the adapter"

    # A line the pass has not read yet is read when the run leaves training.
    reads.clear()
    app.clock.advance(settings.reconcile_interval_s)
    late = Log(boot=BOOT, seq=8, time="2026-12-01T10:00:09.000Z", text="adapter written")
    objects.buckets[BUCKET][log_chunk_key(run_id, BOOT, 8)] = (
        json.dumps(late.to_json()).encode() + b"\n"
    )
    app.trainer.apply(run_id, reports[5:], VIA_POD_LOGS)  # the export, by the Pod log
    app.reactor.drive_run(run_id)
    assert "AdapterVerified" in _events(app, run_id)
    assert _lines(app, run_id)[-1] == "adapter written"
    assert log_chunk_key(run_id, BOOT, 8) in reads


def test_a_drain_fetches_only_the_chunks_holding_a_report_no_other_channel_brought(
    world: Any,
) -> None:
    """K2 at scale: a chunk (`<boot>-<first seq>.jsonl`) holds its boot's reports up to the
    next chunk's first seq; when every one of those came by the Pod log it is not fetched.
    A chunk with a report the Pod log dropped is, and a boot's last chunk always is."""
    app, objects, _org, run_id, data = _launched(world)
    reports = _reports(run_id, data)
    reads = _counting_gets(objects)
    late = Log(boot=BOOT, seq=8, time="2026-12-01T10:00:09.000Z", text="adapter written")
    for log_report in [*(r for r in reports if isinstance(r, Log)), late]:
        key = log_chunk_key(run_id, BOOT, log_report.seq)
        objects.buckets[BUCKET][key] = json.dumps(log_report.to_json()).encode() + b"\n"
    dropped = [r for r in reports if isinstance(r, Log) and r.seq == 5]
    app.trainer.apply(run_id, [r for r in reports if r not in dropped], VIA_POD_LOGS)
    app.reactor.drive_run(run_id)  # verified: it left training, its mailbox is drained
    assert "AdapterVerified" in _events(app, run_id)
    chunks = sorted(k for k in reads if k.endswith(".jsonl"))
    assert chunks == [log_chunk_key(run_id, BOOT, 5), log_chunk_key(run_id, BOOT, 8)]
    assert _lines(app, run_id) == [
        "loading the base model",
        "step 1 loss 2.1",
        "saving the adapter",
        "adapter written",
    ]
