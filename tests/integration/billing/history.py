"""A realistic history driven through the application: organizations, volumes, runs that
launch, stop at their runtime limit, resume, get released or cancelled, over simulated days."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal

from application.services import Services
from application.storage import BindCustomS3, BindVolume
from domain.run_config import RunConfig
from tests.builders import trial, upload_chats

SHA = "a" * 64
Advance = Callable[[float], None]


@dataclass
class OrgHistory:
    org_id: str
    runs: list[str] = field(default_factory=list)


def _config(project: str, dv: str, gpu: str, minutes: int) -> RunConfig:
    return trial(
        project,
        dv,
        gpu_type_id=gpu,
        price_limit_per_hour=Decimal("3.00"),
        max_runtime_minutes=minutes,
    )


def bind(app: Services, org: str, actor: str, storage: BindVolume | BindCustomS3) -> int:
    """Bind either kind of storage."""
    if isinstance(storage, BindVolume):
        return app.storage.bind_volume(org, actor, storage)
    return app.storage.bind_custom_s3(org, actor, storage)


def _drive(app: Services, run_id: str) -> None:
    for _ in range(4):
        app.reactor.drive_run(run_id)


def setup_org(
    app: Services, name: str, api_key: str, storage: BindVolume | BindCustomS3
) -> OrgHistory:
    org = app.organizations.create(name)
    app.organizations.add_member(org, f"owner@{name.lower()}.test", "owner")
    app.connections.connect(org, "user:owner", api_key)
    bind(app, org, "user:owner", storage)
    project, _ = app.projects.create(org, "user:owner", f"{name} bot")
    dv = upload_chats(app, org, project, "user:owner")
    hist = OrgHistory(org)
    hist.runs.append(project)
    hist.runs.append(dv)
    return hist


def run_lifecycle(
    app: Services,
    advance: Advance,
    hist: OrgHistory,
    gpu: str,
    price: str,
    stopped_hours: float,
) -> str:
    """Launch; stop at the runtime limit; stay stopped; resume; release and terminate."""
    project, dv = hist.runs[0], hist.runs[1]
    run_id, _ = app.runs.draft(hist.org_id, "user:member", _config(project, dv, gpu, 90))
    app.runs.launch(hist.org_id, run_id, "user:member", True, price)
    _drive(app, run_id)
    # past the 90-minute limit, mid-hour, and before RunPod's own stop at the limit plus its
    # grace (stopAfter): the worker stops it, as a running worker does
    advance(3600 + 1800 + 234.5)
    _drive(app, run_id)  # RuntimeLimitReached, PodStopped
    assert app.log.run(hist.org_id, run_id).pod_status == "stopped"
    advance(stopped_hours * 3600)
    app.runs.resume_pod(hist.org_id, run_id, "user:member", True)
    advance(3 * 3600 + 777.25)
    app.runs.release_pod(hist.org_id, run_id, "user:member", True)
    _drive(app, run_id)
    assert app.log.run(hist.org_id, run_id).pod_status == "terminated"
    return run_id


def run_cancelled(app: Services, advance: Advance, hist: OrgHistory, gpu: str, price: str) -> str:
    """Launch; run for hours; cancel (terminate)."""
    project, dv = hist.runs[0], hist.runs[1]
    run_id, _ = app.runs.draft(hist.org_id, "user:member", _config(project, dv, gpu, 240))
    app.runs.launch(hist.org_id, run_id, "user:member", True, price)
    _drive(app, run_id)
    advance(1 * 3600 + 59 * 60 + 59.5)
    app.runs.cancel(hist.org_id, run_id, "user:member")
    _drive(app, run_id)
    assert app.log.run(hist.org_id, run_id).pod_status == "terminated"
    return run_id


def drive_history(
    app: Services,
    advance: Advance,
    orgs: list[tuple[str, str, BindVolume | BindCustomS3]],
    gpu: str,
    price: str,
    days: int,
    after_resize: Callable[[], None] | None = None,
) -> list[OrgHistory]:
    """Several organizations over `days` days; ends on an exact UTC hour."""
    start = app.clock.now()
    hists = [setup_org(app, name, key, storage) for name, key, storage in orgs]
    advance(3600 + 321.0)
    for i, h in enumerate(hists):
        run_lifecycle(app, advance, h, gpu, price, stopped_hours=5 + 7 * i)
        advance(600.0)
        run_cancelled(app, advance, h, gpu, price)
        advance(4 * 3600.0)
    if len(hists) > 1 and _is_volume(app, hists[0]):
        app.storage.resize_volume(hists[0].org_id, "user:owner", 150)
        if after_resize is not None:
            after_resize()
    end = start + timedelta(days=days)
    advance((end - app.clock.now()).total_seconds())
    return hists


def _is_volume(app: Services, hist: OrgHistory) -> bool:
    return app.log.storage(hist.org_id).kind == "runpod_volume"
