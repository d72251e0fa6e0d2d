"""The billing view keeps RunPod's bill (B4) as one document per resource and UTC day: stretches
of consecutive hours billed the same amount, from which `bill_hours` gives back every hour as
recorded (start and end texts, amount), in the order of their start texts."""

from __future__ import annotations

import random
from datetime import UTC, date, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

from domain.billing import ProviderBill
from domain.times import iso
from projections.store.base import Doc, ViewStore
from projections.store.sqlite import SQLiteViewStore
from projections.views.billing import (
    BILLING,
    BillingView,
    bill_document,
    bill_hours,
    bill_key,
    with_charge,
)

DAY = date(2026, 11, 1)
T0 = datetime(2026, 11, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)


def _charge(h: int, amount: Any, rid: str = "pod1", kind: str = "pod") -> dict[str, Any]:
    start = T0 + h * HOUR
    return {
        "kind": kind,
        "resource_id": rid,
        "start": iso(start),
        "end": iso(start + HOUR),
        "amount": amount,
    }


def _record(
    store: ViewStore, *recordings: tuple[datetime, list[dict[str, Any]]], day: date = DAY
) -> None:
    """The charges recorded on the organization's bill of `day`, one event per recording."""
    bill = ProviderBill.open("org", day, "system", T0)
    for at, charges in recordings:
        bill.record(charges, "system", at)
    view = BillingView()
    with store.batch(BILLING) as batch:
        for i, e in enumerate(bill.collect_events(), start=batch.position + 1):
            view.apply(batch, e, i)
            batch.set_position(i)


def _stretches(doc: Doc | None) -> list[tuple[str, int, Any]]:
    assert doc is not None
    return [(s["start"][11:13], s["hours"], s["amount"]) for s in doc["stretches"]]


def test_b4_a_day_billed_the_same_amount_is_one_document_of_one_stretch(tmp_path: Path) -> None:
    store = SQLiteViewStore(str(tmp_path / "v.db"))
    later = T0 + timedelta(hours=30)
    _record(
        store,
        (T0 + 13 * HOUR, [_charge(h, "1.64") for h in range(12)]),
        (later, [_charge(h, "1.64") for h in range(12, 24)]),
    )
    assert [key for key, _ in store.list(BILLING, "org", "bill:")] == ["bill:pod:pod1:2026-11-01"]
    doc = store.get(BILLING, "org", "bill:pod:pod1:2026-11-01")
    assert doc == {
        "kind": "pod",
        "resource_id": "pod1",
        "stretches": [
            {
                "start": "2026-11-01T00:00:00Z",
                "end": "2026-11-02T00:00:00Z",
                "hours": 24,
                "amount": "1.64",
            }
        ],
        "recorded_at": iso(later),
    }
    assert bill_hours(doc) == [
        (c["start"], c["end"], "1.64") for c in map(_charge, range(24), ["1.64"] * 24)
    ]


def test_b4_an_amount_changing_mid_day_or_re_recorded_splits_the_stretch(tmp_path: Path) -> None:
    store = SQLiteViewStore(str(tmp_path / "v.db"))
    day = [_charge(h, "1.64" if h < 10 else "1.70") for h in range(24)]
    _record(store, (T0, day))
    key = bill_key("pod", "pod1", "2026-11-01")
    assert _stretches(store.get(BILLING, "org", key)) == [("00", 10, "1.64"), ("10", 14, "1.70")]
    _record(store, (T0 + HOUR, [_charge(5, "2.00"), _charge(12, "1.7")]))  # 1.7 is not 1.70
    assert _stretches(store.get(BILLING, "org", key)) == [
        ("00", 5, "1.64"),
        ("05", 1, "2.00"),
        ("06", 4, "1.64"),
        ("10", 2, "1.70"),
        ("12", 1, "1.7"),
        ("13", 11, "1.70"),
    ]
    _record(store, (T0 + 2 * HOUR, [_charge(5, "1.64"), _charge(12, "1.70")]))  # back as before
    assert _stretches(store.get(BILLING, "org", key)) == [("00", 10, "1.64"), ("10", 14, "1.70")]


def test_b4_partial_days_gaps_days_and_resources_are_apart(tmp_path: Path) -> None:
    store = SQLiteViewStore(str(tmp_path / "v.db"))
    _record(
        store,
        (
            T0,
            [_charge(h, "0.5") for h in (3, 4, 5, 8, 23)]
            + [_charge(2, "0.1", "vol1", "network_volume")],
        ),
    )
    _record(store, (T0, [_charge(24, "0.5"), _charge(25, "0.5")]), day=date(2026, 11, 2))
    docs = dict(store.list(BILLING, "org", "bill:"))
    assert list(docs) == [
        "bill:network_volume:vol1:2026-11-01",
        "bill:pod:pod1:2026-11-01",
        "bill:pod:pod1:2026-11-02",
    ]
    assert _stretches(docs["bill:pod:pod1:2026-11-01"]) == [
        ("03", 3, "0.5"),
        ("08", 1, "0.5"),
        ("23", 1, "0.5"),
    ]
    assert _stretches(docs["bill:pod:pod1:2026-11-02"]) == [("00", 2, "0.5")]
    assert _stretches(docs["bill:network_volume:vol1:2026-11-01"]) == [("02", 1, "0.1")]


def test_b4_hours_not_written_as_iso_writes_them_are_kept_as_recorded() -> None:
    odd = [
        ("2026-11-01T05:00:00+00:00", "2026-11-01T06:00:00+00:00", "1.0"),  # another zone text
        ("2026-11-01T06:00:00Z", "2026-11-01T07:00:00Z", 1.0),  # a JSON number
        ("2026-11-01T07:00:00", "2026-11-01T08:00:00Z", "1.0"),  # no zone
        ("2026-11-01T08:30:00Z", "2026-11-01T09:30:00Z", "1.0"),  # not on the hour
        ("2026-11-01T10:00:00Z", "2026-11-01T12:00:00Z", "1.0"),  # two hours long
        ("2026-11-01T12:00:00Z", None, "1.0"),  # no end
        ("2026-11-01Tnot a time", "?", "1.0"),
        ("2026-11-01T01:00:00+00:00", "2026-11-01T02:00:00Z", "1.0"),  # ends as iso writes
        ("2026-11-01T13:00:00Z", "2026-11-01T14:00:00Z", 1),  # 1 and 1.0: two JSON texts
        ("2026-11-01T14:00:00Z", "2026-11-01T15:00:00Z", 1.0),
        ("2026-11-01T19:30:00Z", "2026-11-01T20:30:00Z", "1.0"),  # hours on the half hour
        ("2026-11-01T20:30:00Z", "2026-11-01T21:30:00Z", "1.0"),
    ]
    normal = [("2026-11-01T04:00:00Z", "2026-11-01T05:00:00Z", "1.0")]
    normal += [("2026-11-01T05:00:00Z", "2026-11-01T06:00:00Z", "1.0")]
    normal += [("2026-11-01T02:00:00Z", "2026-11-01T03:00:00Z", "1.0")]
    doc = bill_document("pod", "pod1", [*odd, *normal], iso(T0))
    assert bill_hours(doc) == sorted([*odd, *normal])
    assert [s["hours"] for s in doc["stretches"]] == [1] * 15  # nothing joins an odd hour


def test_b4_any_order_of_recording_gives_the_same_document() -> None:
    """Live batches and a rebuild apply the same events in the same order; whatever that order,
    a document holds the last amount recorded for each start, in start order."""
    rnd = random.Random(7)
    for _ in range(200):
        charges = [
            _charge(rnd.randrange(24), rnd.choice(["1.64", "1.640", "0", "2.5"]))
            for _ in range(rnd.randrange(1, 60))
        ]
        doc: Doc | None = None
        for c in charges:
            doc = with_charge(doc, c, iso(T0))
        last = {c["start"]: (c["start"], c["end"], c["amount"]) for c in charges}
        assert doc is not None and bill_hours(doc) == sorted(last.values())
        assert doc == bill_document("pod", "pod1", sorted(last.values()), iso(T0))
        assert all(
            s["amount"] != t["amount"] or s["end"] != t["start"]
            for s, t in pairwise(doc["stretches"])
        )


def test_b4_a_one_hour_document_of_a_view_not_rebuilt_reads_as_its_hour() -> None:
    doc = {
        "kind": "pod",
        "resource_id": "pod1",
        "start": "2026-11-01T05:00:00Z",
        "end": "2026-11-01T06:00:00Z",
        "amount": "1.64",
        "recorded_at": iso(T0),
    }
    assert bill_hours(doc) == [("2026-11-01T05:00:00Z", "2026-11-01T06:00:00Z", "1.64")]


def test_b4_an_hour_recorded_again_replaces_its_one_hour_document_of_a_view_not_rebuilt(
    tmp_path: Path,
) -> None:
    store = SQLiteViewStore(str(tmp_path / "v.db"))
    old = _charge(5, "1.64")
    legacy_key = f"bill:pod:pod1:{old['start']}"
    with store.batch(BILLING) as batch:
        batch.put("org", legacy_key, {**old, "recorded_at": iso(T0)})
        batch.put("org", "bill:pod:pod1:2026-10-31T23:00:00Z", {**_charge(-1, "1.5")})
    _record(store, (T0 + 30 * HOUR, [_charge(5, "1.70"), _charge(6, "1.70")]))
    keys = [key for key, _ in store.list(BILLING, "org", "bill:")]
    assert legacy_key not in keys
    assert "bill:pod:pod1:2026-10-31T23:00:00Z" in keys  # an hour not recorded again stays
    doc = store.get(BILLING, "org", "bill:pod:pod1:2026-11-01")
    assert doc is not None
    assert [(start[11:13], amount) for start, _, amount in bill_hours(doc)] == [
        ("05", "1.70"),
        ("06", "1.70"),
    ]


def test_b4_hours_recorded_in_order_give_the_document_of_all_of_them() -> None:
    """RunPod's hours mostly arrive in order, which `with_charge` appends without rebuilding the
    document: the result is what `bill_document` makes of all the hours, odd texts included."""
    rnd = random.Random(11)
    odd = ["2026-11-01T{:02d}:30:00Z", "2026-11-01T{:02d}:00:00+00:00"]
    for _ in range(300):
        doc: Doc | None = None
        hours: list[tuple[str, Any, Any]] = []
        for h in sorted(rnd.sample(range(24), rnd.randrange(1, 24))):
            c = _charge(h, rnd.choice(["1.64", "1.640", 1.64, "0"]))
            if rnd.random() < 0.15:
                c["start"] = rnd.choice(odd).format(h)
            if rnd.random() < 0.1:
                c["end"] = c["start"]
            doc = with_charge(doc, c, iso(T0))
            hours.append((c["start"], c["end"], c["amount"]))
            assert doc == bill_document("pod", "pod1", hours, iso(T0))
