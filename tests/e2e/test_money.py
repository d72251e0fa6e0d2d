"""Money to the cent (B1, B2, B3, K1).

Every expected amount here is computed from RunPod's documented rates and the durations this
module itself makes on the sandbox's frozen clock, never by our billing code:
- compute per second at the Pod's costPerHr;
- running Pods: container + volume disk at $0.10/GB-month; stopped Pods: volume disk at
  $0.20/GB-month;
- network volumes: $0.07/GB-month for the first 1,000 GB, $0.05 above; 730 hours a month.
The sandbox's own ledger (RunPod's per-second bill) must agree with the same figures.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import pytest

from tests.e2e.conftest import Api, Org, connect, custom_spec
from tests.e2e.flows import (
    HOURS_PER_MONTH,
    RunPodConsole,
    draft,
    launch,
    private_stack,
    ready,
    until,
    wait_state,
)

RUNNING_DISK = Decimal("0.10")  # $/GB-month, container and volume disk of a running Pod
STOPPED_DISK = Decimal("0.20")  # $/GB-month, volume disk of a stopped Pod
VOLUME_TIER1, VOLUME_TIER2 = Decimal("0.07"), Decimal("0.05")  # $/GB-month, <= / > 1,000 GB
SEEDED_VOLUME_GB = 100  # nv7eu1ro4k, the volume `volume_spec` binds
CENT = Decimal("0.01")
NANO = Decimal("1e-11")


def cents(amount: Decimal) -> Decimal:
    return amount.quantize(CENT, rounding=ROUND_HALF_UP)


def per_hour(gb: int, per_gb_month: Decimal) -> Decimal:
    return gb * per_gb_month / HOURS_PER_MONTH


def volume_per_hour(gb: int) -> Decimal:
    return (min(gb, 1000) * VOLUME_TIER1 + max(gb - 1000, 0) * VOLUME_TIER2) / HOURS_PER_MONTH


def seconds(start: str, end: str) -> int:
    parse = datetime.fromisoformat
    return int(
        (parse(end.replace("Z", "+00:00")) - parse(start.replace("Z", "+00:00"))).total_seconds()
    )


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Api, RunPodConsole]]:
    # A hung trainer keeps its Pod running for the hours measured here: neither the stall
    # (R8) nor the boot deadline (R5) stops it in this module.
    quiet = {"stall_after": 86400.0, "boot_deadline_minutes": 1440.0}
    with private_stack(tmp_path_factory, "money", **quiet) as (api, console):
        console.freeze()  # only this module's advances move time: durations are exact
        yield api, console
        console.freeze(False)


@pytest.fixture(autouse=True)
def _success(stack: tuple[Api, RunPodConsole]) -> None:
    stack[1].scenario("success", 0)


def pod_facts(console: RunPodConsole, pod_id: str) -> tuple[Decimal, int, int]:
    """(costPerHr, container disk GB, volume disk GB) as RunPod shows the Pod."""
    listed = console.pod(pod_id)
    shown = console.rest_pod(pod_id)
    volume_gb = int(shown["mounts"].get("persistent", {}).get("size", 0))
    return Decimal(listed["cost_per_hr"]), int(shown["disk"]), volume_gb


def ledger_pod(console: RunPodConsole, pod_id: str) -> Decimal:
    """What RunPod billed the Pod so far (its ledger), to a billionth of a cent."""
    pods = {p["pod_id"]: p for p in console.ledger()["pods"]}
    return Decimal(pods[pod_id]["total"]["exact"]).quantize(NANO)


def exactly(shown: str, expected: Decimal, places: str, what: str) -> None:
    """`shown` is `expected` rounded to its own precision, and the same to the cent."""
    assert Decimal(shown) == expected.quantize(Decimal(places)), f"{what}: {shown} != {expected}"
    assert cents(Decimal(shown)) == cents(expected), what


def item(org: Org, pod_id: str) -> dict[str, Any]:
    items = org.member.get("/v1/cleanup").json()["items"]
    return next(i for i in items if i["pod_id"] == pod_id)


def costs(org: Org, start: str, end: str, group_by: str = "run") -> dict[str, Any]:
    r = org.finance.get(
        "/v1/billing/costs", params={"from": start, "to": end, "group_by": group_by}
    )
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def test_b1_b2_b3_a_running_pod_and_the_network_volume_to_the_cent(
    stack: tuple[Api, RunPodConsole],
) -> None:
    api, console = stack
    bound_at = console.clock()
    org, config = ready(api, api.sandbox.credentials())  # binds the 100 GB volume now
    card = org.member.get("/v1/connections").json()["storage"]
    assert Decimal(card["cost_per_month"]) == SEEDED_VOLUME_GB * VOLUME_TIER1  # $7.00 a month
    run = draft(org, config, max_runtime_minutes=240)
    console.scenario("hang", 1)
    launch(org, run["id"])
    pod_id = until(lambda: org.member.get(f"/v1/runs/{run['id']}").json()["pod_id"], what="Pod")
    price, container_gb, volume_gb = pod_facts(console, pod_id)
    assert (price, container_gb, volume_gb) == (Decimal("1.64"), 20, 0)

    console.advance(1800)  # half an hour running
    compute = price * 1800 / 3600
    disk = per_hour(container_gb + volume_gb, RUNNING_DISK) * 1800 / 3600
    expected_pod = compute + disk  # 0.82 + 0.00136986...
    shown = org.member.get(f"/v1/runs/{run['id']}").json()
    assert shown["runtime_seconds"] == 1800
    exactly(shown["cost_so_far"], expected_pod, "0.0001", "the run's cost so far")
    assert ledger_pod(console, pod_id) == expected_pod.quantize(NANO)  # RunPod bills the same
    running = item(org, pod_id)
    assert running["kind"] == "running"
    exactly(running["cost_so_far"], expected_pod, "0.0001", "the cleanup item's cost")
    exactly(
        running["storage_cost_per_hour"],
        per_hour(container_gb + volume_gb, RUNNING_DISK),
        "0.000001",
        "the running Pod's storage per hour",
    )

    # The volume grows past 1,000 GB: the GBs above bill at the second tier from now on.
    resized_at = console.clock()
    card = org.owner.post("/v1/storage/resize", json={"size_gb": 1500})
    assert card.status_code == 200, card.text
    assert Decimal(card.json()["cost_per_month"]) == 1000 * VOLUME_TIER1 + 500 * VOLUME_TIER2
    console.advance(1800)
    now = console.clock()
    expected_pod = price * 3600 / 3600 + per_hour(container_gb, RUNNING_DISK)
    expected_volume = volume_per_hour(SEEDED_VOLUME_GB) * seconds(bound_at, resized_at) / 3600
    expected_volume += volume_per_hour(1500) * seconds(resized_at, now) / 3600
    assert seconds(bound_at, now) == 3600
    body = costs(org, bound_at, now)
    assert body["currency"] == "USD"
    assert Decimal(body["total"]) == cents(expected_pod + expected_volume), body
    lines = {line["run_id"]: line for line in body["lines"]}
    assert cents(Decimal(lines[run["id"]]["billed_cost"])) == cents(expected_pod), lines
    assert ledger_pod(console, pod_id) == expected_pod.quantize(NANO)


def test_b1_k1_a_retained_pod_bills_its_volume_disk_at_the_stopped_rate(
    stack: tuple[Api, RunPodConsole],
) -> None:
    """Custom S3: the Pod has local working storage (a volume disk) that keeps billing when
    the Pod is stopped and retained."""
    api, console = stack
    creds = api.sandbox.credentials()
    start = console.clock()
    org, config = ready(api, creds, storage=custom_spec(creds))
    run = draft(org, config)
    console.scenario("export_fails", 1)
    launch(org, run["id"])
    pod_id = until(lambda: org.member.get(f"/v1/runs/{run['id']}").json()["pod_id"], what="Pod")
    price, container_gb, volume_gb = pod_facts(console, pod_id)
    assert volume_gb > 0 and container_gb > 0
    console.advance(600)  # the trainer starts, trains and fails within these ten minutes
    wait_state(org, run["id"], "needs_recovery")
    assert console.pod(pod_id)["status"] == "EXITED"
    console.advance(7200)  # two hours stopped
    running = (price + per_hour(container_gb + volume_gb, RUNNING_DISK)) * 600 / 3600
    stopped = per_hour(volume_gb, STOPPED_DISK) * 2
    retained = item(org, pod_id)
    assert retained["kind"] == "retained"
    exactly(retained["cost_so_far"], running + stopped, "0.0001", "the retained Pod's cost")
    exactly(
        retained["storage_cost_per_hour"],
        per_hour(volume_gb, STOPPED_DISK),
        "0.000001",
        "the retained Pod's storage per hour",
    )
    shown = org.member.get(f"/v1/runs/{run['id']}").json()
    exactly(shown["cost_so_far"], running + stopped, "0.0001", "the run's cost so far")
    assert ledger_pod(console, pod_id) == (running + stopped).quantize(NANO)
    # No network volume here. The billing view may apply PodStopped a moment after the run view.
    end = console.clock()
    until(
        lambda: Decimal(costs(org, start, end)["total"]) == cents(running + stopped),
        timeout=5,
        what=f"billing total ${cents(running + stopped)}",
    )


def test_k1_an_orphans_cost_is_its_price_and_disks_since_runpod_started_it(
    stack: tuple[Api, RunPodConsole],
) -> None:
    api, console = stack
    org = api.new_org()
    connect(org, api.sandbox.credentials())
    made = console.create_pod(
        name="tensorant-run-00000000-0000-4000-8000-00000000fade",
        gpu_type_id="NVIDIA A40",
        container_disk_in_gb=20,
        volume_in_gb=30,
    )
    price, container_gb, volume_gb = pod_facts(console, made["id"])
    assert (container_gb, volume_gb) == (20, 30)
    console.advance(900)
    until(
        lambda: any(
            i["pod_id"] == made["id"] for i in org.member.get("/v1/cleanup").json()["items"]
        ),
        what="the orphan",
    )
    console.advance(2700)  # an hour since RunPod started billing it
    expected = price + per_hour(container_gb + volume_gb, RUNNING_DISK)
    orphan = item(org, made["id"])
    assert orphan["kind"] == "orphan" and Decimal(orphan["price_per_hour"]) == price
    exactly(orphan["cost_so_far"], expected, "0.0001", "the orphan's cost so far")
    exactly(
        orphan["storage_cost_per_hour"],
        per_hour(container_gb + volume_gb, RUNNING_DISK),
        "0.000001",
        "the orphan's storage per hour",
    )
    assert ledger_pod(console, made["id"]) == expected.quantize(NANO)
