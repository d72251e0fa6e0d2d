"""B1: usage splits at UTC hours (end exclusive) at the Pod's own rate; bills replace estimates."""

from __future__ import annotations

from decimal import Decimal

from domain.times import parse_iso
from projections.reports.charges import (
    CONTAINER_DISK,
    GPU,
    VOLUME_DISK_STOPPED,
    apply_bills,
    merge_hours,
    pod_rows,
    volume_rows,
)

POD = {
    "pod_id": "p1",
    "pod_name": "n",
    "run_id": "r1",
    "project_id": "pr",
    "gpu_count": 1,
    "gpu_type_id": "NVIDIA A100 80GB PCIe",
    "datacenter_id": "EU-RO-1",
    "container_gb": 20,
    "volume_gb": 50,
    "segments": [
        {
            "state": "running",
            "start": "2026-11-01T10:30:00Z",
            "end": "2026-11-01T12:00:00Z",
            "cost_per_hour": "1.64",
        },
        {"state": "stopped", "start": "2026-11-01T12:00:00Z", "end": None, "cost_per_hour": "0"},
    ],
}
LO, HI = parse_iso("2026-11-01T00:00:00Z"), parse_iso("2026-11-02T00:00:00Z")


def test_b1_running_time_splits_at_utc_hours_with_the_end_exclusive() -> None:
    rows = merge_hours(pod_rows("o", POD, LO, HI, parse_iso("2026-11-01T13:00:00Z")))
    gpu = sorted((r for r in rows if r.charge == GPU), key=lambda r: r.start)
    assert [(r.start.hour, r.quantity) for r in gpu] == [(10, Decimal("0.5")), (11, Decimal(1))]
    assert sum(r.list_cost for r in gpu) == Decimal("1.64") * Decimal("1.5")
    stopped = [r for r in rows if r.charge == VOLUME_DISK_STOPPED]
    assert [r.start.hour for r in stopped] == [12]  # 13:00 itself belongs to no row
    container = [r for r in rows if r.charge == CONTAINER_DISK]
    assert (
        sum(r.list_cost for r in container) == Decimal(20) * Decimal("0.10") * Decimal("1.5") / 730
    )


def test_b1_network_volumes_bill_the_second_tier_above_1000_gb() -> None:
    vol = {
        "volume_id": "v",
        "datacenter_id": "EU-RO-1",
        "segments": [
            {"start": "2026-11-01T00:00:00Z", "end": "2026-11-01T01:00:00Z", "size_gb": 1500}
        ],
    }
    rows = volume_rows("o", vol, LO, HI, HI)
    assert sum(r.list_cost for r in rows) == (1000 * Decimal("0.07") + 500 * Decimal("0.05")) / 730


def test_b4_a_bill_replaces_the_estimate_of_its_hour_exactly() -> None:
    rows = merge_hours(pod_rows("o", POD, LO, HI, parse_iso("2026-11-01T13:00:00Z")))
    billed = apply_bills(
        rows, {("pod", "p1", parse_iso("2026-11-01T11:00:00Z")): Decimal("1.70")}, {}
    )
    hour = [r for r in billed if r.start.hour == 11]
    assert sum(r.billed_cost for r in hour) == Decimal("1.70")
    assert not any(r.estimated for r in hour)
    assert all(r.estimated for r in billed if r.start.hour != 11)
