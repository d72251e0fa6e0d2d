"""Billing read-outs: the sandbox ledger (/_sandbox/ledger) and RunPod REST v2 /v2/billing/*."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from . import seed
from .billing import BUCKET_SIZES, buckets, cents, next_boundary, snap_down, snap_up
from .model import SandboxModel
from .tenants import account_key


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    t = datetime.fromisoformat(value.replace(" ", "+"))  # a bare '+' in a query string is a space
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


def iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _money(amount: Decimal) -> dict[str, str]:
    return {"amount": str(cents(amount)), "exact": str(amount)}


def ledger_report(
    model: SandboxModel, start: datetime | None, end: datetime | None
) -> dict[str, Any]:
    """Per Pod (by category) and per volume, what RunPod charged within [start, end)."""
    with model.lock:
        now = model.settle()
        start = start or model.started_at
        end = min(end or now, now)
        amounts = model.ledger.amounts(start, end)
        pods, volumes, endpoints = [], [], []
        total = Decimal(0)
        for (kind, rid), by_cat in sorted(amounts.items()):
            subtotal = sum(by_cat.values(), Decimal(0))
            total += subtotal
            if kind == "pod":
                pod = model.pods[rid]
                pods.append(
                    {
                        "pod_id": rid,
                        "name": pod.name,
                        "gpu_type_id": pod.gpu_type_id,
                        "status": pod.desired_status,
                        "compute": _money(
                            by_cat.get("gpu", Decimal(0)) + by_cat.get("cpu", Decimal(0))
                        ),
                        "container_disk": _money(by_cat.get("container_disk", Decimal(0))),
                        "volume_disk": _money(by_cat.get("volume_disk", Decimal(0))),
                        "total": _money(subtotal),
                    }
                )
            elif kind == "serverless":
                endpoints.append({"endpoint_id": rid, "total": _money(subtotal)})
            else:
                vol = model.volumes[rid]
                volumes.append(
                    {
                        "network_volume_id": rid,
                        "name": vol.name,
                        "size_gb": vol.size_gb,
                        "datacenter_id": vol.datacenter_id,
                        "total": _money(subtotal),
                    }
                )
        return {
            "from": iso(start),
            "to": iso(end),
            "currency": "USD",
            "total": _money(total),
            "balance": _money(model.balance),
            "pods": pods,
            "network_volumes": volumes,
            "serverless": endpoints,
        }


async def ledger_endpoint(request: Request) -> Response:
    q = request.query_params
    try:
        body = ledger_report(
            request.app.state.model, parse_time(q.get("from")), parse_time(q.get("to"))
        )
    except ValueError as exc:
        return JSONResponse({"detail": str(exc)}, status_code=400)
    return JSONResponse(body)


def _problem(status: int, title: str, detail: str) -> JSONResponse:
    return JSONResponse(
        {"title": title, "status": status, "detail": detail},
        status_code=status,
        media_type="application/problem+json",
    )


def _window(params: Any, now: datetime) -> tuple[datetime, datetime, str]:
    bucket = params.get("bucketSize") or "day"
    if bucket not in BUCKET_SIZES:
        raise ValueError(f"bucketSize must be one of {', '.join(BUCKET_SIZES)}")
    last_n = params.get("lastN")
    if last_n is not None:
        if params.get("startTime") or params.get("endTime"):
            raise ValueError("lastN is mutually exclusive with startTime/endTime")
        n = int(last_n)
        if n < 1:
            raise ValueError("lastN must be >= 1")
        end = next_boundary(snap_down(now, bucket), bucket)  # ends with the in-progress bucket
        start = snap_down(now, bucket)
        for _ in range(n - 1):
            start = snap_down(start - timedelta(microseconds=1), bucket)
        return start, end, bucket
    start = snap_down(parse_time(params.get("startTime")) or now - timedelta(days=30), bucket)
    end = snap_up(parse_time(params.get("endTime")) or now, bucket)
    if end <= start:
        raise ValueError("endTime must be after startTime")
    return start, end, bucket


def v2_billing(model: SandboxModel, kind: str, params: Any) -> dict[str, Any]:
    """GET /v2/billing/pods | /v2/billing/network-volumes: one record per resource per bucket."""
    id_param = {"pod": "podId", "serverless": "serverlessId"}.get(kind, "networkVolumeId")
    wanted = params.get(id_param)
    with model.lock:
        now = model.settle()
        start, end, bucket = _window(params, now)
        window = buckets(start, end, bucket)
        ids = sorted(
            {
                rid
                for (k, rid) in model.ledger.amounts(start, end)
                if k == kind and (not wanted or rid == wanted)
            }
        )
        records: list[dict[str, Any]] = []
        per_bucket = model.ledger.amounts_per_bucket(window, kind)  # type: ignore[arg-type]
        for (b0, b1), per in zip(window, per_bucket, strict=True):
            for rid in ids:
                cat = per.get((kind, rid), {})  # type: ignore[arg-type]
                records.append(_record(kind, rid, b0, b1, cat))
    amount_keys = [
        k
        for k in (records[0] if records else _record(kind, "", start, end, {}))
        if k.endswith("Amount")
    ]
    totals = {k: sum((r[k] for r in records), 0.0) for k in amount_keys}
    query = {"startTime": iso(start), "endTime": iso(end), "bucketSize": bucket, id_param: wanted}
    metadata: dict[str, Any] = {"query": query, "recordCount": len(records), "totals": totals}
    unique = {"pod": "uniquePodCount", "serverless": "uniqueServerlessCount"}
    metadata[unique.get(kind, "uniqueNetworkVolumeCount")] = len(ids)
    return {"records": records, "metadata": metadata}


def _record(kind: str, rid: str, b0: datetime, b1: datetime, cat: Any) -> dict[str, Any]:
    def f(*names: str) -> float:
        return float(sum((cat.get(n, Decimal(0)) for n in names), Decimal(0)))

    if kind == "pod":
        return {
            "startTime": iso(b0),
            "endTime": iso(b1),
            "podId": rid,
            "totalAmount": f("gpu", "cpu", "container_disk", "volume_disk"),
            "gpuAmount": f("gpu"),
            "cpuAmount": f("cpu"),
            "diskAmount": f("container_disk", "volume_disk"),
        }
    if kind == "serverless":
        return {
            "startTime": iso(b0),
            "endTime": iso(b1),
            "serverlessId": rid,
            "totalAmount": f("gpu", "cpu"),
            "gpuAmount": f("gpu"),
            "cpuAmount": f("cpu"),
            "diskAmount": 0.0,
            "feeAmount": 0.0,
        }
    # The sandbox's volumes are all the STANDARD tier.
    return {
        "startTime": iso(b0),
        "endTime": iso(b1),
        "networkVolumeId": rid,
        "totalAmount": f("network_volume"),
        "standardAmount": f("network_volume"),
        "highPerformanceAmount": 0.0,
    }


def _bearer_ok(request: Request) -> bool:
    header = request.headers.get("authorization", "")
    key = header[7:].strip() if header.lower().startswith("bearer ") else ""
    return account_key(key) in (seed.API_KEY, seed.READ_ONLY_API_KEY)


async def v2_billing_pods(request: Request) -> Response:
    return _v2(request, "pod")


async def v2_billing_volumes(request: Request) -> Response:
    return _v2(request, "network_volume")


async def v2_billing_serverless(request: Request) -> Response:
    return _v2(request, "serverless")


def _v2(request: Request, kind: str) -> Response:
    if not _bearer_ok(request):
        return _problem(401, "Unauthorized", "missing or invalid bearer token")
    try:
        return JSONResponse(v2_billing(request.app.state.model, kind, request.query_params))
    except ValueError as exc:
        return _problem(400, "Bad Request", str(exc))
