"""The billing usage view (B1): what each Pod and network volume did, and what RunPod billed.

Documents per organization:
  `pod:<pod id>`        the Pod's run, project, GPU, datacenter, disks and its segments
                        (`running` at the Pod's actual costPerHr from PodLaunched/PodResumed,
                        `stopped` with only volume disk billing), end exclusive;
  `volume:<volume id>`  a bound network volume's segments with their size (resizes split them);
  `bill:<kind>:<id>:<day>`  RunPod's amounts for that resource on that UTC day (B4), as
                        stretches of consecutive hours billed the same amount (`bill_hours`
                        gives the hours back); the day is the first 10 characters of the
                        hours' starts (`ProviderBill` is per day).
Index documents (org `_`) map ids that later events do not repeat to their organization:
`run:<run id>` (org, project, config, Pod id) and `storage:<aggregate id>` (org, bound volume).
Charges are computed from these documents at read time (`projections.reports.charges`).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from functools import lru_cache
from typing import Any

import domain.run as r
from domain.billing import ProviderBillOpened, ProviderChargesRecorded
from domain.ids import id_text
from domain.storage import CustomS3Bound, StorageCreated, VolumeBound, VolumeResized
from domain.times import iso, parse_iso
from projections.store.base import INDEX, Doc, DocKey, ViewBatch
from projections.store.engine import topics_of

BILLING = "billing"

_RUN_EVENTS = (
    r.RunDrafted,
    r.RunDraftUpdated,
    r.PodLaunched,
    r.PodStopped,
    r.PodResumed,
    r.PodTerminated,
    r.PodVanished,
)
_STORAGE_EVENTS = (StorageCreated, VolumeBound, VolumeResized, CustomS3Bound)
_BILL_EVENTS = (ProviderBillOpened, ProviderChargesRecorded)


def _index_key(event: Any) -> DocKey:
    if isinstance(event, r.Run.Event):
        return INDEX, f"run:{id_text(event.originator_id)}"
    if isinstance(event, _BILL_EVENTS):
        return INDEX, f"bill:{id_text(event.originator_id)}"
    return INDEX, f"storage:{id_text(event.originator_id)}"


class BillingView:
    """Usage segments per Pod and per network volume, plus RunPod's recorded hourly bills."""

    name = BILLING
    # see `AuditView.rebuild_weight`
    rebuild_weight = 9.5
    topics = topics_of(*_RUN_EVENTS, *_STORAGE_EVENTS, *_BILL_EVENTS)

    def keys(self, event: Any) -> Iterable[DocKey]:
        return [_index_key(event)]

    def apply(self, batch: ViewBatch, event: Any, position: int) -> None:
        if isinstance(event, r.Run.Event):
            self._run(batch, event)
        elif isinstance(event, _BILL_EVENTS):
            self._bill(batch, event)
        else:
            self._storage(batch, event)

    # ------------------------------------------------------------------ Pods
    def _run(self, batch: ViewBatch, e: Any) -> None:
        ikey = _index_key(e)
        if isinstance(e, r.RunDrafted):
            batch.put(*ikey, {"org_id": e.org_id, "config": _config(e.config), "pod_id": None})
            return
        index = batch.get(*ikey)
        if index is None:
            return
        if isinstance(e, r.RunDraftUpdated):
            batch.put(*ikey, {**index, "config": _config(e.config)})
            return
        org_id = index["org_id"]
        at = iso(e.timestamp)
        if isinstance(e, r.PodLaunched):
            batch.put(*ikey, {**index, "pod_id": e.pod_id})
            cfg = index["config"]
            doc: Doc = {
                "pod_id": e.pod_id,
                "pod_name": e.pod_name,
                "run_id": id_text(e.originator_id),
                "project_id": cfg["project_id"],
                "gpu_type_id": cfg["gpu_type_id"],
                "gpu_count": cfg["gpu_count"],
                "datacenter_id": e.datacenter_id,
                "container_gb": e.container_disk_gb,
                "volume_gb": e.volume_gb,
                "segments": [_segment("running", at, str(e.cost_per_hour))],
            }
            batch.put(org_id, f"pod:{e.pod_id}", doc)
            return
        pod_id = index.get("pod_id")
        found = batch.get(org_id, f"pod:{pod_id}") if pod_id else None
        if found is None:
            return
        pod = dict(found)
        segments = [dict(s) for s in pod["segments"]]
        if segments and segments[-1]["end"] is None:
            segments[-1]["end"] = at
        if isinstance(e, r.PodStopped):
            segments.append(_segment("stopped", at, "0"))
        elif isinstance(e, r.PodResumed):
            segments.append(_segment("running", at, str(e.cost_per_hour)))
        pod["segments"] = segments
        batch.put(org_id, f"pod:{pod_id}", pod)

    # ------------------------------------------------------------------ network volumes
    def _storage(self, batch: ViewBatch, e: Any) -> None:
        ikey = _index_key(e)
        if isinstance(e, StorageCreated):
            batch.put(*ikey, {"org_id": e.org_id, "volume_id": None})
            return
        index = batch.get(*ikey)
        if index is None:
            return
        org_id, at = index["org_id"], iso(e.timestamp)
        current = index.get("volume_id")
        if current and not (isinstance(e, VolumeBound) and e.volume_id == current):
            self._close_volume(batch, org_id, current, at)
        if isinstance(e, VolumeBound | VolumeResized):
            volume_id = e.volume_id if isinstance(e, VolumeBound) else current
            if volume_id is None:
                return
            size = e.size_gb if isinstance(e, VolumeBound) else e.new_size_gb
            doc = dict(
                batch.get(org_id, f"volume:{volume_id}")
                or {"volume_id": volume_id, "datacenter_id": None, "segments": []}
            )
            segments = [dict(s) for s in doc["segments"]]
            if segments and segments[-1]["end"] is None:
                segments[-1]["end"] = at
            segments.append({"start": at, "end": None, "size_gb": size})
            if isinstance(e, VolumeBound):
                doc["datacenter_id"] = e.datacenter_id
            doc["segments"] = segments
            batch.put(org_id, f"volume:{volume_id}", doc)
            batch.put(*ikey, {**index, "volume_id": volume_id})
        else:  # CustomS3Bound: the volume is no longer this organization's storage
            batch.put(*ikey, {**index, "volume_id": None})

    @staticmethod
    def _close_volume(batch: ViewBatch, org_id: str, volume_id: str, at: str) -> None:
        found = batch.get(org_id, f"volume:{volume_id}")
        if found is None:
            return
        doc = dict(found)
        segments = [dict(s) for s in doc["segments"]]
        if segments and segments[-1]["end"] is None:
            segments[-1]["end"] = at
        doc["segments"] = segments
        batch.put(org_id, f"volume:{volume_id}", doc)

    # ------------------------------------------------------------------ provider bills (B4)
    def _bill(self, batch: ViewBatch, e: Any) -> None:
        ikey = _index_key(e)
        if isinstance(e, ProviderBillOpened):
            batch.put(*ikey, {"org_id": e.org_id})
            return
        index = batch.get(*ikey)
        if index is None:
            return
        org_id, at = index["org_id"], iso(e.timestamp)
        for c in e.charges:
            key = bill_key(c["kind"], c["resource_id"], c["start"])
            batch.put(org_id, key, with_charge(batch.get(org_id, key), c, at))
            # A view kept from before day documents holds that hour on its own: the newer
            # amount is the day document's (the two would otherwise both bill that hour).
            legacy = f"bill:{c['kind']}:{c['resource_id']}:{c['start']}"
            if legacy != key and batch.get(org_id, legacy) is not None:
                batch.delete(org_id, legacy)


def _config(config: dict[str, Any]) -> Doc:
    return {k: config.get(k) for k in ("project_id", "gpu_type_id", "gpu_count", "kind")}


def _segment(state: str, start: str, cost_per_hour: str) -> Doc:
    return {"state": state, "start": start, "end": None, "cost_per_hour": cost_per_hour}


# ---------------------------------------------------------------- bill documents (B4)
# A bill document holds a resource's hours of one UTC day, in the order of their start texts
# (the order the documents of one hour each had before), as stretches {start, end, hours,
# amount}. A stretch of several hours is consecutive whole UTC hours whose texts are what `iso`
# writes (hour k starts at `start` + k h and ends an hour later; `end` is the last hour's end),
# billed the same amount (same JSON type and value: "1.7" and "1.70" are two amounts, as
# written). Any other hour is a stretch of its own with its texts as recorded.

HOUR = timedelta(hours=1)
BillHour = tuple[str, Any, Any]  # (start, end, amount) as recorded


def bill_key(kind: str, resource_id: str, start: str) -> str:
    return f"bill:{kind}:{resource_id}:{start[:10]}"


def bill_hours(doc: Doc) -> list[BillHour]:
    """A bill document's hours as recorded, in order. A document of one hour (the shape before
    stretches, in a view not rebuilt since) is that hour."""
    if "stretches" not in doc:
        return [(doc["start"], doc.get("end"), doc["amount"])]
    out: list[BillHour] = []
    for s in doc["stretches"]:
        if s["hours"] == 1:
            out.append((s["start"], s["end"], s["amount"]))
            continue
        first = parse_iso(s["start"])
        out += [
            (iso(first + k * HOUR), iso(first + (k + 1) * HOUR), s["amount"])
            for k in range(s["hours"])
        ]
    return out


def with_charge(doc: Doc | None, charge: dict[str, Any], recorded_at: str) -> Doc:
    """A resource's bill document of the charge's day with the charge's hour recorded (a new
    amount for a start already there replaces it). `recorded_at`: when the document changed."""
    hour = (charge["start"], charge.get("end"), charge["amount"])
    appended = _appended(doc, *hour)
    if appended is not None:
        return {
            "kind": charge["kind"],
            "resource_id": charge["resource_id"],
            "stretches": appended,
            "recorded_at": recorded_at,
        }
    return bill_document(
        charge["kind"],
        charge["resource_id"],
        [*(bill_hours(doc) if doc else []), hour],
        recorded_at,
    )


def _appended(doc: Doc | None, start: Any, end: Any, amount: Any) -> list[Doc] | None:
    """The stretches of `doc` with an hour that starts after all of its hours (RunPod's hours
    arrive in order), as `bill_document` would make them; None when the hour is not such."""
    stretches = doc.get("stretches") if doc else None
    if not stretches or not isinstance(start, str):
        return None
    last = stretches[-1]
    if last["hours"] > 1:  # whole canonical hours: the last one starts an hour before `end`
        if not start >= last["end"]:
            return None
        joinable = True
    else:
        if not (isinstance(last["start"], str) and start > last["start"]):
            return None
        joinable = _whole_hour(last["start"], last["end"])
    out = list(stretches)
    if joinable and _continues(last, start, amount) and _whole_hour(start, end):
        out[-1] = {**last, "hours": last["hours"] + 1, "end": end}
    else:
        out.append({"start": start, "end": end, "hours": 1, "amount": amount})
    return out


def bill_document(kind: str, resource_id: str, hours: Iterable[BillHour], recorded_at: str) -> Doc:
    """The bill document of these hours of one resource and day; of two hours with the same
    start, the later one is kept."""
    by_start = {start: (end, amount) for start, end, amount in hours}
    return {
        "kind": kind,
        "resource_id": resource_id,
        "stretches": _stretches(sorted(by_start.items())),
        "recorded_at": recorded_at,
    }


def _stretches(hours: list[tuple[str, tuple[Any, Any]]]) -> list[Doc]:
    out: list[Doc] = []
    joinable = False  # whether the last stretch may go on
    for start, (end, amount) in hours:
        whole = _whole_hour(start, end)
        last = out[-1] if out else None
        if whole and joinable and last is not None and _continues(last, start, amount):
            last["hours"] += 1
            last["end"] = end
        else:
            out.append({"start": start, "end": end, "hours": 1, "amount": amount})
            joinable = whole
    return out


def _continues(last: Doc, start: Any, amount: Any) -> bool:
    """Whether an hour from `start` billed `amount` goes on stretch `last` (given both are whole
    hours and `last` may go on): it starts where `last` ends, at the same amount as written."""
    return (
        last["end"] == start and type(last["amount"]) is type(amount) and last["amount"] == amount
    )


def _whole_hour(start: Any, end: Any) -> bool:
    """Whether [start, end) is one whole UTC hour written as `iso` writes it."""
    if type(start) is str and type(end) is str:
        return _whole_hour_text(start, end)
    return _whole_hour_of(start, end)


# The answers for the hours met lately, by their texts: RunPod bills every resource for the
# same hours, so a log holds each (start, end) many times (266,400 charges in
# bench/projection_rebuild.py's log), and each answer parsed one text and wrote two.
@lru_cache(maxsize=65_536)
def _whole_hour_text(start: str, end: str) -> bool:
    return _whole_hour_of(start, end)


def _whole_hour_of(start: Any, end: Any) -> bool:
    if not isinstance(start, str):
        return False
    try:
        t = parse_iso(start)
    except (ValueError, OverflowError):
        return False
    return t.minute == t.second == t.microsecond == 0 and iso(t) == start and end == iso(t + HOUR)
