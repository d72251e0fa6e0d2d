"""Training runs (R1–R13): drafts, confirmed launch, cancel, recovery, resume, release, history."""

from __future__ import annotations

import time
from dataclasses import replace
from decimal import Decimal
from typing import Any, BinaryIO

import orjson

from api.deps import Backend, Caller, settler
from api.run_list import presented_runs
from api.schemas.runs import (
    Accepted,
    LaunchIn,
    ReleaseIn,
    ResumeIn,
    RunCreate,
    RunEvent,
    RunEvents,
    RunPublic,
)
from domain import estimate as est
from domain.errors import NotFound
from domain.hyperparameters import HYPERPARAMETERS
from domain.run_config import RunConfig
from domain.times import iso
from projections.store.base import ViewStore, dumps
from projections.store.lru import Lru
from projections.views.projects import PROJECTS
from projections.views.runs import RUNS, present_run

# What the 202 of each command says the worker does next.
RESUMED = (
    "Pod resumed: GPU billing has resumed. Reach it with basic SSH "
    "(ssh <podHostId>@ssh.runpod.io; no SCP/SFTP)"
)


def run_doc(views: ViewStore, org_id: str, run_id: str) -> dict[str, Any]:
    doc = views.get(RUNS, org_id, f"run:{run_id}")
    if doc is None:  # another organization's run looks exactly like a missing one (A4)
        raise NotFound(f"run {run_id} not found")
    return doc


def _accepted(
    backend: Backend, caller: Caller, run_id: str, position: int, detail: str
) -> Accepted:
    """202: the command was recorded (and the views reflect it); the worker does the rest."""
    settler(backend)(position)
    state = run_doc(backend.views, caller.org_id, run_id)["state"]
    return Accepted(id=run_id, state=state, detail=detail)


def runs(*, backend: Backend, caller: Caller) -> list[RunPublic]:
    """The organization's runs as `GET /v1/runs` shows them; shared models (api.run_list):
    read them, never change them."""
    now = backend.clock.now()
    found = presented_runs(backend.views, caller.org_id, now, backend.services.report_reads)
    return [run for run, _ in found]


def run(*, backend: Backend, caller: Caller, run_id: str) -> RunPublic:
    """The run as `GET /v1/runs/{id}` shows it. Its reports are asked for first, so that they
    travel with the document's read (`report_status_later`); a run of another organization is
    not found before they are looked at."""
    status = backend.services.report_reads.report_status_later(run_id)
    doc, now = run_doc(backend.views, caller.org_id, run_id), backend.clock.now()
    shown = present_run(doc, now)
    tokens = dataset_tokens(backend.views, caller.org_id, doc)
    return RunPublic(
        **shown,
        **status(doc, now),
        **_estimated(backend, caller, doc, shown),
        dataset_tokens=tokens,
    )


def dataset_tokens(views: ViewStore, org_id: str, doc: dict[str, Any]) -> dict[str, Any] | None:
    """P1: the run's dataset counted with its base model's tokenizer at its max_seq_len (the
    projects view's dataset document), None until counted."""
    dataset = views.get(
        PROJECTS, org_id, f"dataset:{doc['project_id']}:{doc['dataset_version_id']}"
    )
    seq_len = (doc.get("hyperparameters") or {}).get("max_seq_len")
    for count in (dataset or {}).get("token_counts", []):
        if count["base_model"] == doc["base_model"] and count["max_seq_len"] == seq_len:
            return dict(count)
    return None


def _draft(backend: Backend, caller: Caller, run_id: str) -> RunPublic:
    doc = run_doc(backend.views, caller.org_id, run_id)
    shown = present_run(doc, backend.clock.now())
    tokens = dataset_tokens(backend.views, caller.org_id, doc)
    return RunPublic(**shown, **_estimated(backend, caller, doc, shown), dataset_tokens=tokens)


# How many of the organization's earlier runs on the same GPU and base model are looked at for a
# measured throughput (newest first), so that reading one run stays cheap.
_EARLIER_RUNS_LOOKED_AT = 5
# The console polls a live run's status every second: its throughput is looked up again at most
# this often (the metric points it reads change by the minute, not the second).
_THROUGHPUT_FRESH_S = 30.0
_THROUGHPUTS: Lru[tuple[str, ...], tuple[float, est.Throughput]] = Lru(1024)


def _measured(backend: Backend, run_id: str, doc: dict[str, Any] | None) -> est.Throughput | None:
    """A run's measured throughput: its adapter's record (training tokens/s apart from its
    evaluations, R18) when it has one, else the median of its metric points (source and run
    id filled in by the caller)."""
    record = (doc or {}).get("training") or {}
    if record.get("tokens_per_s"):
        return est.Throughput(
            float(record["tokens_per_s"]), "", run_id, record.get("eval_tokens_per_s")
        )
    points, _ = backend.logs.read_metrics(run_id, 0, 500)
    tps = est.measured([p.get("tokens_per_s") for p in points])
    return None if tps is None else est.Throughput(tps, "", run_id)


def _throughput(backend: Backend, caller: Caller, doc: dict[str, Any]) -> est.Throughput:
    # an edited draft (another GPU, base model or baseline) is looked up afresh
    key = (caller.org_id, doc["id"], doc["gpu_type_id"], doc["base_model"], doc["baseline_run_id"])
    now = time.monotonic()
    kept = _THROUGHPUTS.get(key)
    if kept is not None and now - kept[0] < _THROUGHPUT_FRESH_S:
        return kept[1]
    found = _looked_up(backend, caller, doc)
    _THROUGHPUTS.put(key, (now, found))
    return found


def _looked_up(backend: Backend, caller: Caller, doc: dict[str, Any]) -> est.Throughput:
    """R18: a full run trains at its trial's measured speed; otherwise at the newest measured
    speed of this organization's runs of the same base model on the same GPU; else the table."""
    baseline = doc.get("baseline_run_id")
    if baseline:
        found = _measured(
            backend, baseline, backend.views.get(RUNS, caller.org_id, f"run:{baseline}")
        )
        if found is not None:
            return replace(found, source="baseline")
    earlier = [
        d
        for _, d in backend.views.list(RUNS, caller.org_id, "run:")
        if d["id"] != doc["id"]
        and d["started_at"]
        and d["gpu_type_id"] == doc["gpu_type_id"]
        and d["base_model"] == doc["base_model"]
    ]
    earlier.sort(key=lambda d: d["started_at"], reverse=True)
    for d in earlier[:_EARLIER_RUNS_LOOKED_AT]:
        found = _measured(backend, d["id"], d)
        if found is not None:
            return replace(found, source="earlier_run")
    return est.table_throughput(doc["gpu_type_id"])


def _estimated(
    backend: Backend, caller: Caller, doc: dict[str, Any], shown: dict[str, Any]
) -> dict[str, Any]:
    """R18: the run's `estimate` (from its dataset version, hyperparameters and throughput) and,
    once it ended, its `actual` minutes and cost beside it; R19: a succeeded run's `lineage`."""
    hp = doc.get("hyperparameters")
    dataset = backend.views.get(
        PROJECTS, caller.org_id, f"dataset:{doc['project_id']}:{doc['dataset_version_id']}"
    )
    out: dict[str, Any] = {"estimate": None, "actual": None}
    base = _baseline(backend, caller, doc)
    if hp and dataset:
        price = doc["accepted_price_per_hour"] or doc["price_limit_per_hour"]
        out["estimate"] = est.estimate(
            rows=dataset.get("row_count"),
            size_bytes=int(dataset["size_bytes"]),
            epochs=int(hp["epochs"]),
            max_seq_len=int(hp["max_seq_len"]),
            validation_fraction=float(hp["validation_fraction"]),
            gpu_count=int(doc["gpu_count"]),
            throughput=_throughput(backend, caller, doc),
            price_per_hour=Decimal(price),
            tokens_per_row=_tokens_per_row(backend, caller, doc, base),
        )
    if doc["ended_at"]:
        out["actual"] = {
            "minutes": round(shown["runtime_seconds"] / 60, 1),
            "cost": shown["cost_so_far"],
            "training_seconds": (doc.get("training") or {}).get("training_seconds"),
        }
    out["lineage"] = _lineage(doc, dataset)
    out["baseline"] = _baseline_figures(backend, doc["baseline_run_id"], base)
    return out


def _baseline(backend: Backend, caller: Caller, doc: dict[str, Any]) -> dict[str, Any] | None:
    """A full run's trial (its run document), when it has one."""
    baseline = doc.get("baseline_run_id")
    return backend.views.get(RUNS, caller.org_id, f"run:{baseline}") if baseline else None


def _tokens_per_row(
    backend: Backend, caller: Caller, doc: dict[str, Any], base: dict[str, Any] | None
) -> tuple[float, str] | None:
    """R18: a row's tokens as the base model's tokenizer counted them (P1), else as the full
    run's trial measured them on its sample of the same dataset version."""
    counted = dataset_tokens(backend.views, caller.org_id, doc)
    if counted and counted.get("examples"):
        return counted["tokens"] / counted["examples"], "counted"
    record = (base or {}).get("training") or {}
    encoded = (record.get("examples") or 0) + (record.get("held_out") or 0)
    if record.get("dataset_tokens") and encoded:
        return record["dataset_tokens"] / encoded, "baseline"
    return None


def _baseline_figures(
    backend: Backend, run_id: str | None, base: dict[str, Any] | None
) -> dict[str, Any] | None:
    """R17: a full run's trial baseline's figures, shown beside its own: its final train and
    eval loss and tokens/s, from its adapter's record, else from its metric points."""
    if not run_id or base is None:
        return None
    record = base.get("training") or {}
    figures = {
        "run_id": run_id,
        "state": base["state"],
        "train_loss": record.get("train_loss"),
        "eval_loss": record.get("eval_loss"),
        "best_eval_loss": record.get("best_eval_loss"),
        "tokens_per_s": record.get("tokens_per_s"),
    }
    if not record:
        points, _ = backend.logs.read_metrics(run_id, 0, 500)
        losses = [p["loss"] for p in points if p.get("loss") is not None]
        evals = [p["eval_loss"] for p in points if p.get("eval_loss") is not None]
        figures["train_loss"] = losses[-1] if losses else None
        figures["eval_loss"] = evals[-1] if evals else None
        figures["best_eval_loss"] = min(evals) if evals else None
        figures["tokens_per_s"] = est.measured([p.get("tokens_per_s") for p in points])
    return figures


def _lineage(doc: dict[str, Any], dataset: dict[str, Any] | None) -> dict[str, Any] | None:
    """R19: what a succeeded run's adapter was made from."""
    if doc["state"] != "succeeded" or not doc["adapter"]:
        return None
    trainer = doc.get("trainer") or {}
    return {
        "base_model": doc["base_model"],
        "dataset_version_id": doc["dataset_version_id"],
        "dataset_sha256": dataset["sha256"] if dataset else None,
        "hyperparameters": doc.get("hyperparameters"),
        "trainer_version": trainer.get("version"),
        "image": trainer.get("image"),
        "baseline_run_id": doc["baseline_run_id"],
        "adapter_sha256": doc["adapter"]["sha256"],
        "base_model_revision": _revision(doc),
    }


def _revision(doc: dict[str, Any]) -> str | None:
    """R19: the Hub commit the run's base model was pinned to at launch, else the one its
    trainer recorded reading (a storage model has none)."""
    pinned = (doc.get("trainer") or {}).get("base_model_revision")
    return pinned or (doc.get("training") or {}).get("base_model_revision")


def _config(body: RunCreate) -> RunConfig:
    """The draft's configuration; of the hyperparameters (R16) only those given, which the
    service completes with the base model's defaults."""
    values = body.model_dump()
    chosen = {name: values.pop(name) for name in HYPERPARAMETERS}
    given = {name: value for name, value in chosen.items() if value is not None}
    return RunConfig(**values, hyperparameters=given)


def default_hyperparameters(*, backend: Backend, caller: Caller, base_model: str) -> dict[str, Any]:
    """R16: what a run of `base_model` trains with unless chosen (the console's Advanced)."""
    return backend.services.runs.default_hyperparameters(caller.org_id, base_model)


def create(*, backend: Backend, caller: Caller, body: RunCreate) -> RunPublic:
    """R1–R3: save a draft; nothing is rented."""
    config = _config(body)
    run_id, position = backend.services.runs.draft(caller.org_id, caller.actor, config)
    settler(backend)(position)
    return _draft(backend, caller, run_id)


def update(*, backend: Backend, caller: Caller, run_id: str, body: RunCreate) -> RunPublic:
    """R3: drafts only."""
    config = _config(body)
    settler(backend)(
        backend.services.runs.update_draft(caller.org_id, run_id, caller.actor, config)
    )
    return _draft(backend, caller, run_id)


def discard(*, backend: Backend, caller: Caller, run_id: str) -> None:
    """R3: drafts only."""
    settler(backend)(backend.services.runs.discard_draft(caller.org_id, run_id, caller.actor))


def launch(*, backend: Backend, caller: Caller, run_id: str, body: LaunchIn) -> Accepted:
    """R4: re-checks availability, price and balance now; the worker then creates one Pod."""
    position = backend.services.runs.launch(
        caller.org_id, run_id, caller.actor, body.confirm, body.accepted_price_per_hour
    )
    return _accepted(
        backend, caller, run_id, position, "launch confirmed; the Pod is being created"
    )


def cancel(*, backend: Backend, caller: Caller, run_id: str) -> Accepted:
    """R12."""
    position = backend.services.runs.cancel(caller.org_id, run_id, caller.actor)
    return _accepted(backend, caller, run_id, position, "cancel requested")


def recover_from_volume(*, backend: Backend, caller: Caller, run_id: str) -> Accepted:
    """R9: verify the adapter saved on the network volume."""
    position = backend.services.runs.recover_from_volume(caller.org_id, run_id, caller.actor)
    return _accepted(backend, caller, run_id, position, "verifying the saved adapter")


def recover_from_upload(
    *, backend: Backend, caller: Caller, run_id: str, adapter_zip: BinaryIO
) -> Accepted:
    """R10: custom S3 — the adapter.zip retrieved from the Pod is stored, then verified."""
    position = backend.services.runs.recover_from_upload(
        caller.org_id, run_id, caller.actor, adapter_zip
    )
    return _accepted(backend, caller, run_id, position, "uploaded; verifying the adapter")


def resume(*, backend: Backend, caller: Caller, run_id: str, body: ResumeIn) -> Accepted:
    """R11: GPU billing resumes; may fail for lack of capacity (the Pod then stays stopped)."""
    position = backend.services.runs.resume_pod(
        caller.org_id, run_id, caller.actor, body.confirm_billing
    )
    return _accepted(backend, caller, run_id, position, RESUMED)


def release(*, backend: Backend, caller: Caller, run_id: str, body: ReleaseIn) -> Accepted:
    """R13: releasing an unverified Pod deletes the only copy of its files: confirm it."""
    position = backend.services.runs.release_pod(
        caller.org_id, run_id, caller.actor, body.confirm_delete_unverified
    )
    return _accepted(backend, caller, run_id, position, "release requested")


def history(*, backend: Backend, caller: Caller, run_id: str, after: int, limit: int) -> RunEvents:
    """The run's own events in order (its stream in the log), after the run view said the run
    is the caller's organization's."""
    run_doc(backend.views, caller.org_id, run_id)
    items = [history_line(e) for e in backend.services.runs.history(run_id, after, limit)]
    return RunEvents(events=items, next_after=items[-1].version if items else after)


HISTORY_SKIP = {"originator_id", "originator_version", "timestamp", "actor", "originator_topic"}


def history_line(e: Any) -> RunEvent:
    """One line of a run's history: what happened, when, by whom. Its values are the JSON the
    run view kept when it copied them (`dumps`: Decimals, UUIDs and times as text)."""
    data = {
        k: (str(v) if isinstance(v, Decimal) else v)
        for k, v in vars(e).items()
        if k not in HISTORY_SKIP
    }
    line = {
        "version": e.originator_version,
        "type": type(e).__name__,
        "time": iso(e.timestamp),
        "actor": e.actor,
        "data": data,
    }
    return RunEvent(**orjson.loads(dumps(line)))
