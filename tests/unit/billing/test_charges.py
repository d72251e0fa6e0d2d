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


def _subsecond_pod(start: str, end: str) -> dict[str, object]:
    return {
        **POD,
        "segments": [{"state": "running", "start": start, "end": end, "cost_per_hour": "3.60"}],
    }


def same(a: Decimal, b: Decimal) -> bool:
    """Equal to 20 decimal places (Decimal's 28 digits round a third of an hour's last digit)."""
    return abs(a - b) < Decimal("1e-20")


def test_b1_billing_with_sub_second_start_and_stop_is_exact() -> None:
    """RunPod bills per second; our clocks record microseconds. 1.25 s plus 0.5 s across an
    hour boundary (12:59:59.750 to 13:00:00.250) is 1.75 s: 1.75 x $3.60/3600 = $0.00175."""
    pod = {
        **POD,
        "segments": [
            {
                "state": "running",
                "start": "2026-11-01T10:00:00.500000Z",
                "end": "2026-11-01T10:00:01.750000Z",
                "cost_per_hour": "3.60",
            },
            {
                "state": "running",
                "start": "2026-11-01T12:59:59.750000Z",
                "end": "2026-11-01T13:00:00.250000Z",
                "cost_per_hour": "3.60",
            },
        ],
    }
    rows = merge_hours(pod_rows("o", pod, LO, HI, parse_iso("2026-11-01T14:00:00Z")))
    gpu = sorted((r for r in rows if r.charge == GPU), key=lambda r: r.start)
    assert [r.start.hour for r in gpu] == [10, 12, 13]
    for row, secs in zip(gpu, ["1.25", "0.25", "0.25"], strict=True):
        assert same(row.quantity, Decimal(secs) / 3600), (row.start, row.quantity)
    assert same(sum((r.list_cost for r in gpu), Decimal(0)), Decimal("0.00175"))
    container = sum((r.list_cost for r in rows if r.charge == CONTAINER_DISK), Decimal(0))
    assert same(container, Decimal(20) * Decimal("0.10") * Decimal("1.75") / 730 / 3600)


def test_b1_a_sub_second_segment_is_billed_not_dropped() -> None:
    pod = _subsecond_pod("2026-11-01T10:00:00.100000Z", "2026-11-01T10:00:00.900000Z")
    rows = pod_rows("o", pod, LO, HI, parse_iso("2026-11-01T14:00:00Z"))
    [gpu] = [r for r in rows if r.charge == GPU]
    assert same(gpu.quantity, Decimal("0.8") / 3600)
    assert same(gpu.list_cost, Decimal("0.0008"))  # 0.8 s at $3.60 an hour
