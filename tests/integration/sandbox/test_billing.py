"""RunPod's ledger in the sandbox, checked against figures computed by hand (730-hour month)."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
import requests
from runpod.error import QueryError

from runpod_sandbox import Sandbox

MONTH_H = Decimal(730)


def _ledger(sandbox: Sandbox, **params: str) -> dict[str, Any]:
    return requests.get(f"{sandbox.base_url}/_sandbox/ledger", params=params, timeout=5).json()  # type: ignore[no-any-return]


def _v2(sandbox: Sandbox, path: str, **params: str) -> requests.Response:
    return requests.get(
        f"{sandbox.base_url}/v2/billing/{path}",
        params=params,
        timeout=5,
        headers={"Authorization": f"Bearer {sandbox.credentials()['api_key']}"},
    )


def _next_hour(sandbox: Sandbox) -> datetime:
    now = sandbox.clock.now()
    boundary = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    sandbox.clock.advance_to(boundary)
    return boundary


def test_a_pod_run_stopped_resumed_and_terminated_is_billed_per_second(
    sdk: Any, sandbox: Sandbox
) -> None:
    sandbox.clock.freeze()
    pod_id = sdk.create_pod("bill-1", "img", "NVIDIA A100 80GB PCIe", volume_in_gb=20)["id"]
    sandbox.advance_clock(3600)  # 1 h running
    sdk.stop_pod(pod_id)
    sandbox.advance_clock(7200)  # 2 h stopped: only the volume disk, at $0.20/GB-month
    sdk.resume_pod(pod_id, 1)
    sandbox.advance_clock(1800)  # 30 min running
    sdk.terminate_pod(pod_id)
    sandbox.advance_clock(3600)  # terminated: nothing more

    compute = Decimal("1.64") * Decimal("1.5")
    container = 10 * Decimal("0.10") / MONTH_H * Decimal("1.5")
    volume = 20 * Decimal("0.10") / MONTH_H * Decimal("1.5") + 20 * Decimal("0.20") / MONTH_H * 2
    line = next(p for p in _ledger(sandbox)["pods"] if p["pod_id"] == pod_id)
    assert line["compute"]["amount"] == "2.46"
    assert line["container_disk"]["amount"] == "0.00"
    assert line["volume_disk"]["amount"] == "0.02"
    assert line["total"]["amount"] == "2.48"
    assert Decimal(line["total"]["exact"]) == pytest.approx(
        compute + container + volume, abs=Decimal("1e-12")
    )
    assert line["status"] == "TERMINATED"


def test_network_volumes_accrue_hourly_whether_or_not_pods_run(sandbox: Sandbox) -> None:
    sandbox.clock.freeze()
    sandbox.advance_clock(86400)
    volumes = {v["network_volume_id"]: v for v in _ledger(sandbox)["network_volumes"]}
    day = Decimal(24) / MONTH_H
    assert Decimal(volumes["nv7eu1ro4k"]["total"]["exact"]) == pytest.approx(
        100 * Decimal("0.07") * day, abs=Decimal("1e-12")
    )
    assert volumes["nv7eu1ro4k"]["total"]["amount"] == "0.23"
    assert volumes["nv2usks8m3"]["total"]["amount"] == "0.12"
    assert volumes["nv5camtl9p"]["total"]["amount"] == "0.05"
    balance = Decimal(_ledger(sandbox)["balance"]["exact"])
    assert balance == pytest.approx(Decimal(250) - 170 * Decimal("0.07") * day, abs=Decimal("1e-9"))


def test_rest_v2_pod_billing_has_hourly_buckets_and_runpods_shape(
    sdk: Any, sandbox: Sandbox
) -> None:
    sandbox.clock.freeze()
    h0 = _next_hour(sandbox)
    pod_id = sdk.create_pod("bill-2", "img", "NVIDIA GeForce RTX 4090")["id"]
    sandbox.advance_clock(5400)
    sdk.terminate_pod(pod_id)
    sandbox.advance_clock(7200)
    answer = _v2(
        sandbox,
        "pods",
        bucketSize="hour",
        podId=pod_id,
        startTime=(h0 + timedelta(minutes=10)).isoformat().replace("+00:00", "Z"),
        endTime=(h0 + timedelta(hours=2, minutes=5)).isoformat().replace("+00:00", "Z"),
    )
    assert answer.status_code == 200
    body = answer.json()
    z = "%Y-%m-%dT%H:%M:%SZ"
    assert body["metadata"]["query"] == {
        "startTime": h0.strftime(z),
        "endTime": (h0 + timedelta(hours=3)).strftime(z),
        "bucketSize": "hour",
        "podId": pod_id,
    }
    assert body["metadata"]["recordCount"] == 3
    assert body["metadata"]["uniquePodCount"] == 1
    records = body["records"]
    assert [r["startTime"] for r in records] == [
        (h0 + timedelta(hours=i)).strftime(z) for i in range(3)
    ]
    assert set(records[0]) == {
        "startTime",
        "endTime",
        "podId",
        "totalAmount",
        "gpuAmount",
        "cpuAmount",
        "diskAmount",
    }
    assert [round(r["gpuAmount"], 2) for r in records] == [0.60, 0.30, 0.0]
    assert records[0]["diskAmount"] == pytest.approx(10 * 0.10 / 730)
    assert body["metadata"]["totals"]["gpuAmount"] == pytest.approx(0.90)


def test_rest_v2_network_volume_billing_defaults_to_day_buckets(sandbox: Sandbox) -> None:
    sandbox.clock.freeze()
    sandbox.advance_clock(3 * 86400)
    body = _v2(sandbox, "network-volumes", networkVolumeId="nv2usks8m3", lastN="2").json()
    assert body["metadata"]["query"]["bucketSize"] == "day"
    assert body["metadata"]["uniqueNetworkVolumeCount"] == 1
    assert body["metadata"]["recordCount"] == 2
    record = body["records"][0]
    assert set(record) == {
        "startTime",
        "endTime",
        "networkVolumeId",
        "totalAmount",
        "standardAmount",
        "highPerformanceAmount",
    }
    assert record["totalAmount"] == pytest.approx(50 * 0.07 * 24 / 730)


def test_rest_v2_billing_wants_a_bearer_key_and_valid_parameters(sandbox: Sandbox) -> None:
    assert requests.get(f"{sandbox.base_url}/v2/billing/pods", timeout=5).status_code == 401
    bad = _v2(sandbox, "pods", bucketSize="fortnight")
    assert bad.status_code == 400
    assert bad.headers["content-type"].startswith("application/problem+json")
    assert _v2(sandbox, "pods", lastN="1", startTime="2026-01-01T00:00:00Z").status_code == 400


def test_create_needs_an_hour_of_credit(sdk: Any, sandbox: Sandbox) -> None:
    sandbox.model.set_balance("1.00")
    with pytest.raises(QueryError, match="balance is too low"):
        sdk.create_pod("poor", "img", "NVIDIA A100 80GB PCIe")
    assert sdk.create_pod("cheap", "img", "NVIDIA GeForce RTX 4090")["id"]


def test_at_zero_balance_pods_with_a_volume_stop_and_the_rest_are_terminated(
    sdk: Any, sandbox: Sandbox
) -> None:
    sandbox.clock.freeze()
    sandbox.model.set_balance("2.00")
    bare = sdk.create_pod("bare", "img", "NVIDIA A100 80GB PCIe")["id"]
    kept = sdk.create_pod("kept", "img", "NVIDIA GeForce RTX 4090", network_volume_id="nv7eu1ro4k")[
        "id"
    ]
    sandbox.advance_clock(2 * 3600)
    assert sdk.get_pod(bare) is None
    assert sdk.get_pod(kept)["desiredStatus"] == "EXITED"
    pods = {
        p["id"]: p
        for p in requests.get(f"{sandbox.base_url}/_sandbox/pods", timeout=5).json()["pods"]
    }
    assert pods[bare]["end_reason"] == "balance_zero"
    # Pods stop at the instant the money ran out; only network volumes keep charging after.
    ledger = _ledger(sandbox)
    pod_total = sum(Decimal(p["total"]["exact"]) for p in ledger["pods"])
    assert pod_total == pytest.approx(Decimal("2.00"), abs=Decimal("1e-6"))  # microsecond rounding
    assert Decimal(ledger["balance"]["exact"]) < 0


def test_a_sandbox_booking_at_most_every_minute_bills_the_same_totals(
    sdk: Any, sandbox: Sandbox
) -> None:
    """`settle_every_s` (the scale bench's): charges are booked later, never different."""
    sandbox.clock.freeze()
    sandbox.model.settle_every_s = 60.0
    pod_id = sdk.create_pod("bill-lazy", "img", "NVIDIA A100 80GB PCIe", volume_in_gb=20)["id"]
    sandbox.clock.advance(30)
    assert pod_id not in [p["pod_id"] for p in _ledger(sandbox)["pods"]], "booked in the minute"
    sandbox.clock.advance(3570)  # an hour since the create
    sdk.terminate_pod(pod_id)
    line = next(p for p in _ledger(sandbox)["pods"] if p["pod_id"] == pod_id)
    assert line["compute"]["amount"] == "1.64"  # the hour to the second, as when booked each call


def test_amounts_per_bucket_equal_amounts_asked_bucket_by_bucket() -> None:
    """The bill's buckets in one pass over the charges (a thousand organizations' bills asked
    hour by hour were most of the sandbox's CPU) say what `amounts` says of each bucket."""
    from datetime import UTC, datetime, timedelta
    from decimal import Decimal

    from runpod_sandbox.billing import Ledger, buckets

    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    ledger = Ledger()
    for i in range(40):  # charges of three kinds, across bucket edges, some merged
        start = t0 + timedelta(minutes=17 * i)
        kind = ("pod", "network_volume", "serverless")[i % 3]
        ledger.add(
            kind,  # type: ignore[arg-type]
            f"r{i % 7}",
            "gpu" if kind != "network_volume" else "network_volume",
            start=start,
            end=start + timedelta(minutes=5 + 11 * (i % 9)),
            rate_per_second=Decimal("0.0001") * (1 + i % 4),
        )
    window = buckets(t0 - timedelta(hours=1), t0 + timedelta(hours=14), "hour")
    whole = ledger.amounts_per_bucket(window)
    pods = ledger.amounts_per_bucket(window, "pod")
    for (b0, b1), got, got_pods in zip(window, whole, pods, strict=True):
        want = ledger.amounts(b0, b1)
        assert {k: dict(v) for k, v in got.items()} == {k: dict(v) for k, v in want.items()}
        assert {k: dict(v) for k, v in got_pods.items()} == {
            k: dict(v) for k, v in want.items() if k[0] == "pod"
        }
    assert any(got for got in whole)
