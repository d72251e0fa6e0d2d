"""The run-status view (what /v1/runs reads) and how a run is shown (R6, B2).

A run document keeps the Pod's billing segments (running at the Pod's actual costPerHr, or
stopped with only volume disk billing), so cost so far and runtime are computed at read time.

A run's history (GET /v1/runs/{id}/events) is not copied here: it is the run's own stream in
the log, read by its id (`RunService.history`). Copying it made a document per run event, half
of the documents a rebuild writes besides the audit view's.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

import domain.run as r
from domain.base import event_topics
from domain.ids import id_text
from domain.rates import running_disk_per_hour, stopped_disk_per_hour
from domain.times import iso, parse_iso
from projections.store.base import INDEX, Doc, ViewBatch

RUNS = "runs"  # (INDEX, "run:<id>") -> {"org_id"}: later Run events do not repeat the org


class RunsView:
    name = RUNS
    # see `AuditView.rebuild_weight`
    rebuild_weight = 11.7

    @property
    def topics(self) -> list[str]:
        """Run events only (read when the projector starts, after every module is imported):
        its live batches and a rebuild of it with other such views decode nothing else."""
        return event_topics(r.Run.Event)

    def apply(self, batch: ViewBatch, event: Any, position: int) -> None:
        if not isinstance(event, r.Run.Event):
            return
        run_id = id_text(event.originator_id)
        if isinstance(event, r.RunDrafted):
            batch.put(INDEX, f"run:{run_id}", {"org_id": event.org_id})
            batch.put(event.org_id, f"run:{run_id}", new_doc(run_id, event))
            return
        index = batch.get(INDEX, f"run:{run_id}")
        if index is None:
            return
        org_id = index["org_id"]
        doc = batch.get(org_id, f"run:{run_id}")
        if doc is None:
            return
        if isinstance(event, r.RunDiscarded):
            batch.delete(org_id, f"run:{run_id}")
            return
        apply_event(doc, event)
        doc["updated_at"] = iso(event.timestamp)
        doc["version"] = event.originator_version
        batch.put(org_id, f"run:{run_id}", doc)


def new_doc(run_id: str, e: r.RunDrafted) -> Doc:
    c = e.config
    doc: Doc = {
        "id": run_id,
        "organization_id": e.org_id,
        "state": r.DRAFT,
        "state_reason": None,
        "kind": c["kind"],
        "project_id": c["project_id"],
        "dataset_version_id": c["dataset_version_id"],
        "baseline_run_id": c.get("baseline_run_id"),
        "base_model": c["base_model"],
        "gpu_type_id": c["gpu_type_id"],
        "gpu_count": c["gpu_count"],
        "price_limit_per_hour": str(c["price_limit_per_hour"]),
        "max_runtime_minutes": c["max_runtime_minutes"],
        "datacenter_id": None,
        "pod_id": None,
        "pod_host_id": None,
        "price_per_hour": None,
        "accepted_price_per_hour": None,
        "started_at": None,
        "ended_at": None,
        "adapter": None,
        "exported": None,
        "cleanup": {"pod_status": r.POD_NONE, "attempts": 0, "last_error": None, "since": None},
        "segments": [],
        "disk": {"container_gb": 0, "volume_gb": 0},
        "created_at": iso(e.timestamp),
        "updated_at": iso(e.timestamp),
        "version": 1,
    }
    if c.get("hyperparameters") is not None:  # R16; a run drafted before has neither key
        doc["hyperparameters"] = c["hyperparameters"]
        doc["defaults"] = c.get("defaults")
    return doc


def _close_segment(doc: Doc, at: datetime) -> None:
    if doc["segments"] and doc["segments"][-1]["end"] is None:
        doc["segments"][-1]["end"] = iso(at)


def _open_segment(doc: Doc, state: str, rate: Decimal | None, at: datetime) -> None:
    _close_segment(doc, at)
    doc["segments"].append(
        {"state": state, "start": iso(at), "end": None, "cost_per_hour": str(rate or 0)}
    )


def lifecycle(doc: Doc) -> r.Lifecycle:
    """Where the run of `doc` is in its life cycle, as far as the document keeps it (the
    aggregate alone keeps a pending stop and the termination's intent, which no transition
    reads)."""
    return r.Lifecycle(
        doc["state"],
        doc["state_reason"],
        doc["cleanup"]["pod_status"],
        has_pod=doc["pod_id"] is not None,
    )


def apply_event(doc: Doc, e: Any) -> None:  # noqa: PLR0912 - one branch per event
    """What `e` changes in the run's document: its state, reason and Pod status as the run's
    one life cycle decides them (`domain.run.advance`), then what the event carries."""
    life = r.advance(lifecycle(doc), e)
    at = e.timestamp
    cleanup = doc["cleanup"]
    if isinstance(e, r.RunDraftUpdated):
        doc.update(
            new_doc(doc["id"], _as_drafted(doc, e))
            | {k: doc[k] for k in ("created_at", "organization_id")}
        )
    elif isinstance(e, r.LaunchConfirmed):
        doc["accepted_price_per_hour"] = str(e.accepted_price)
        doc["datacenter_id"] = e.datacenter_id
        doc["quoted_price_per_hour"] = str(e.quoted_price)
    elif isinstance(e, r.PodLaunched):
        doc.update(
            pod_id=e.pod_id,
            pod_name=e.pod_name,
            pod_host_id=e.pod_host_id,
            price_per_hour=str(e.cost_per_hour),
            started_at=iso(at),
        )
        doc["datacenter_id"] = e.datacenter_id or doc["datacenter_id"]
        doc["disk"] = {"container_gb": e.container_disk_gb, "volume_gb": e.volume_gb}
        if (
            e.image or e.trainer_version
        ):  # R19 lineage; a legacy event leaves the document as it was
            doc["trainer"] = {"image": e.image, "version": e.trainer_version}
            if e.base_model_revision:  # the same: absent unless a Hub commit was pinned
                doc["trainer"]["base_model_revision"] = e.base_model_revision
        cleanup["since"] = iso(at)
        _open_segment(doc, "running", e.cost_per_hour, at)
    elif isinstance(e, r.TrainingStarted):
        if e.report is not None:  # the report that started it: its progress, until a newer
            doc["started_by"] = e.report
    elif isinstance(e, r.AdapterExported):
        doc["exported"] = {
            "object_key": e.object_key,
            "sha256": e.sha256,
            "size_bytes": e.size_bytes,
        }
    elif isinstance(e, r.AdapterVerified):
        doc["adapter"] = {
            "object_key": e.object_key,
            "sha256": e.sha256,
            "size_bytes": e.size_bytes,
            "verified_at": iso(at),
        }
        if e.training is not None:  # R17–R19; a legacy event leaves the document as it was
            doc["training"] = e.training
    elif isinstance(e, r.PodStopped):
        cleanup["since"] = iso(at)
        _open_segment(doc, "stopped", Decimal(0), at)
    elif isinstance(e, r.PodResumed):
        doc["price_per_hour"] = str(e.cost_per_hour)
        doc["pod_host_id"] = e.pod_host_id or doc["pod_host_id"]
        cleanup["since"] = iso(at)
        _open_segment(doc, "running", e.cost_per_hour, at)
    elif isinstance(e, r.PodTerminationRequested):
        if doc["pod_id"]:
            cleanup["since"] = iso(at)
    elif isinstance(e, r.PodTerminationFailed):
        cleanup.update(attempts=e.attempt, last_error=e.error)
    elif isinstance(e, r.PodTerminated | r.PodVanished):
        cleanup["since"] = iso(at)
        _close_segment(doc, at)
    elif isinstance(e, r.RunSucceeded | r.RunFailed | r.RunCancelled):
        doc["ended_at"] = iso(at)
    doc["state"], doc["state_reason"] = life.state, life.reason
    doc["cleanup"]["pod_status"] = life.pod_status


def _as_drafted(doc: Doc, e: r.RunDraftUpdated) -> Any:
    class _Drafted:
        org_id = doc["organization_id"]
        config = e.config
        timestamp = e.timestamp

    return _Drafted


# ---------------------------------------------------------------- read-time presentation


def costs(doc: Doc, now: datetime) -> tuple[int, Decimal, Decimal]:
    """(seconds running, cost so far, storage cost per hour now) from the Pod's segments."""
    seconds_running = 0
    total = Decimal(0)
    disk = doc["disk"]
    for seg in doc["segments"]:
        start = parse_iso(seg["start"])
        end = parse_iso(seg["end"]) if seg["end"] else now
        secs = max((end - start).total_seconds(), 0)
        if seg["state"] == "running":
            seconds_running += int(secs)
            rate = Decimal(seg["cost_per_hour"]) + running_disk_per_hour(
                disk["container_gb"], disk["volume_gb"], start
            )
        else:
            rate = stopped_disk_per_hour(disk["volume_gb"], start)
        total += rate * Decimal(str(secs)) / 3600
    status = doc["cleanup"]["pod_status"]
    storage_per_hour = Decimal(0)
    if status == r.POD_STOPPED:
        storage_per_hour = stopped_disk_per_hour(disk["volume_gb"], now)
    elif status in (r.POD_RUNNING, r.POD_TERMINATING, r.POD_NEEDS_MANUAL):
        storage_per_hour = running_disk_per_hour(disk["container_gb"], disk["volume_gb"], now)
    return seconds_running, total, storage_per_hour


# kept for reads, not shown as they are (`started_by`: the progress it carries is shown as the
# run's `progress` until a newer report's, `TrainerCallbacks.report_statuses`)
_UNSHOWN = frozenset({"segments", "disk", "version", "started_by", "trainer"})


def present_run(doc: Doc, now: datetime) -> Doc:
    """The run as `GET /v1/runs/{id}` shows it, with runtime and cost so far at `now` (B2)."""
    seconds, cost, _ = costs(doc, now)
    out = {k: v for k, v in doc.items() if k not in _UNSHOWN}
    out["runtime_seconds"] = seconds
    out["cost_so_far"] = str(cost.quantize(Decimal("0.0001")))
    running = doc["cleanup"]["pod_status"] == r.POD_RUNNING and doc["pod_host_id"]
    out["ssh_command"] = f"ssh {doc['pod_host_id']}@ssh.runpod.io" if running else None
    out["ssh_note"] = (
        "basic SSH (no SCP/SFTP); register your public key in RunPod's SSH Public Keys first"
        if running
        else None
    )
    out["stopped_storage_bills"] = doc["cleanup"]["pod_status"] == r.POD_STOPPED
    allowed = r.allowed_actions(doc["state"], doc["cleanup"]["pod_status"])
    out["actions"] = {action: action in allowed for action in r.ACTIONS}
    return out


def is_live(doc: Doc) -> bool:
    terminal = doc["state"] in r.TERMINAL
    live_pod = doc["cleanup"]["pod_status"] in r.POD_LIVE
    return (not terminal and doc["state"] != r.DRAFT) or live_pod
