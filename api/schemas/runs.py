"""`/v1/runs`: drafts, launch, recovery, Pod actions, history and logs (R1–R13)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from api.schemas.common import Confirmation, Count, Input, PlainDecimal, example
from api.schemas.projects import TokenCountPublic
from domain.hyperparameters import HYPERPARAMETERS


def _hyper(name: str) -> Any:
    """A hyperparameter's field with its domain bounds (`domain.hyperparameters`)."""
    bound = HYPERPARAMETERS[name]
    if bound.kind is int:
        return Field(
            default=None, ge=int(bound.low), le=int(bound.high), description=bound.description
        )
    return Field(
        default=None,
        ge=bound.low,
        le=bound.high,
        allow_inf_nan=False,
        description=bound.description,
    )


class RunCreate(Input):
    model_config = example(
        project_id="5b1e…",
        dataset_version_id="9a7c…",
        kind="trial",
        base_model="Qwen/Qwen2.5-7B-Instruct",
        gpu_type_id="NVIDIA A100 80GB PCIe",
        gpu_count=1,
        price_limit_per_hour="2.00",
        max_runtime_minutes=60,
    )
    project_id: str = Field(min_length=1, max_length=100)
    dataset_version_id: str = Field(min_length=1, max_length=100)
    kind: Literal["trial", "full"]
    baseline_run_id: str | None = Field(default=None, max_length=100)
    base_model: str = Field(min_length=1, max_length=200)
    gpu_type_id: str = Field(min_length=1, max_length=200)
    gpu_count: Count = Field(ge=1, le=8)
    price_limit_per_hour: PlainDecimal = Field(gt=0, le=1000, max_digits=12, decimal_places=6)
    max_runtime_minutes: Count = Field(ge=1, le=4320)
    # R16: each optional; left out, the base model's architecture's default is used
    epochs: int | None = _hyper("epochs")
    learning_rate: float | None = _hyper("learning_rate")
    lora_rank: int | None = _hyper("lora_rank")
    lora_alpha: float | None = _hyper("lora_alpha")
    lora_dropout: float | None = _hyper("lora_dropout")
    max_seq_len: int | None = _hyper("max_seq_len")
    warmup_ratio: float | None = _hyper("warmup_ratio")
    validation_fraction: float | None = _hyper("validation_fraction")
    seed: int | None = _hyper("seed")


class Adapter(BaseModel):
    object_key: str
    sha256: str
    size_bytes: int
    verified_at: str | None = None


class CleanupState(BaseModel):
    pod_status: str
    attempts: int
    last_error: str | None = None


class Estimate(BaseModel):
    """R18: what the run will take, from its dataset version's size, its hyperparameters and a
    throughput (docs/estimate.md)."""

    steps: int = Field(description="Optimizer steps (16 examples each) over all epochs.")
    tokens: int = Field(description="Training tokens over all epochs (rows cut at max_seq_len).")
    tokens_source: Literal["counted", "baseline", "bytes"] = Field(
        default="bytes",
        description="A row's tokens: counted by the base model's tokenizer (P1), measured by "
        "the full run's trial, or its bytes / 4.",
    )
    training_seconds: float = Field(
        default=0.0,
        description="The training loop: tokens at `tokens_per_s`, plus the evaluations of the "
        "validation split (what `actual.training_seconds` measures).",
    )
    minutes: int = Field(description="Boot + training + export, rounded up.")
    cost: str = Field(description="`minutes` at `price_per_hour`, rounded up to the cent.")
    price_per_hour: str = Field(
        description="The accepted price once launched, else the draft's price limit."
    )
    tokens_per_s: float
    throughput_source: Literal["baseline", "earlier_run", "table"] = Field(
        description="baseline: the full run's trial measured it; earlier_run: this "
        "organization's newest run of the same base model on the same GPU; table: docs/estimate.md."
    )
    throughput_run_id: str | None = None


class Actual(BaseModel):
    minutes: float
    cost: str
    training_seconds: float | None = Field(
        default=None,
        description="R18: seconds in the training loop (evaluations included), as the "
        "trainer measured them; null until its adapter is verified.",
    )


class TrainingRecord(BaseModel):
    """R17/R18: what the run's verified adapter records of its training (its tensorant.json)."""

    steps: int | None = None
    train_loss: float | None = Field(default=None, description="The last step's train loss.")
    eval_loss: float | None = Field(
        default=None, description="The last evaluation's loss on the validation split."
    )
    best_step: int | None = Field(
        default=None, description="The step whose weights were exported: lowest eval loss."
    )
    best_eval_loss: float | None = None
    tokens: int | None = None
    examples: int | None = None
    held_out: int | None = Field(default=None, description="Rows held out for evaluation.")
    dataset_tokens: int | None = None
    rows: int | None = None
    training_seconds: float | None = None
    eval_seconds: float | None = None
    tokens_per_s: float | None = Field(
        default=None, description="Training tokens per second, evaluations apart."
    )
    eval_tokens_per_s: float | None = None
    base_model_revision: str | None = None


class BaselineFigures(BaseModel):
    """R17: a full run's trial baseline's figures, beside the run's own."""

    run_id: str
    state: str
    train_loss: float | None = None
    eval_loss: float | None = None
    best_eval_loss: float | None = None
    tokens_per_s: float | None = None


class Lineage(BaseModel):
    """R19: what a succeeded run's adapter was made from."""

    base_model: str
    dataset_version_id: str
    dataset_sha256: str | None = None
    hyperparameters: dict[str, Any] | None = None
    trainer_version: str | None = Field(
        default=None, description="The trainer bundle's version, or a baked image's tag."
    )
    image: str | None = Field(default=None, description="The image the run's Pod ran.")
    baseline_run_id: str | None = Field(default=None, description="A full run's trial.")
    adapter_sha256: str
    base_model_revision: str | None = Field(
        default=None,
        description="The Hub commit sha of a Hub base model (resolved at launch and pinned in "
        "the manifest); null for a storage model.",
    )


class RunActions(BaseModel):
    """What a member may ask of the run now (the domain's rules, `domain.run.allowed_actions`);
    an owner or member may act, an auditor or finance member only reads."""

    edit: bool = Field(description="PATCH /v1/runs/{id} (drafts).")
    delete: bool = Field(description="DELETE /v1/runs/{id} (drafts).")
    launch: bool = Field(description="POST /v1/runs/{id}/launch (drafts).")
    cancel: bool = Field(description="POST /v1/runs/{id}/cancel.")
    resume: bool = Field(description="POST /v1/runs/{id}/pod/resume (a stopped Pod).")
    release: bool = Field(description="POST /v1/runs/{id}/pod/release.")
    recover_verify: bool = Field(
        description="POST /v1/runs/{id}/recovery/verify (needs a network volume)."
    )
    recover_upload: bool = Field(description="POST /v1/runs/{id}/recovery/upload.")


class RunPublic(BaseModel):
    model_config = example(
        id="c0ffee…",
        state="running",
        state_reason=None,
        kind="trial",
        gpu_type_id="NVIDIA A100 80GB PCIe",
        datacenter_id="EU-RO-1",
        pod_id="x1y2z3",
        price_per_hour="1.64",
        started_at="2026-11-30T10:00:00Z",
        runtime_seconds=600,
        cost_so_far="0.2733",
        adapter=None,
        cleanup={"pod_status": "running", "attempts": 0, "last_error": None},
        ssh_command="ssh x1y2z3-64410065@ssh.runpod.io",
    )
    id: str
    state: str
    state_reason: str | None = None
    kind: str
    project_id: str
    dataset_version_id: str
    baseline_run_id: str | None = None
    base_model: str
    gpu_type_id: str
    gpu_count: int
    price_limit_per_hour: str
    max_runtime_minutes: int
    datacenter_id: str | None = None
    pod_id: str | None = None
    price_per_hour: str | None = None
    accepted_price_per_hour: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    runtime_seconds: int
    cost_so_far: str
    adapter: Adapter | None = None
    exported: dict[str, Any] | None = None
    cleanup: CleanupState
    ssh_command: str | None = None
    ssh_note: str | None = None
    stopped_storage_bills: bool = False
    dataset_tokens: TokenCountPublic | None = Field(
        default=None,
        description="P1: the dataset's token counts for this run's base model and max_seq_len, "
        "once counted (in the background, after the draft).",
    )
    actions: RunActions
    progress: dict[str, Any] | None = Field(
        default=None,
        description="The latest progress report (phase, step, total_steps, loss, ...) and "
        "`via`: the channel that brought it (callback, mailbox or pod_logs).",
    )
    hyperparameters: dict[str, Any] | None = Field(
        default=None,
        description="R16: every hyperparameter the run trains with (epochs, learning_rate, "
        "lora_rank, lora_alpha, lora_dropout, max_seq_len, warmup_ratio, validation_fraction, "
        "seed); null for a run drafted before they could be chosen.",
    )
    defaults: list[str] | None = Field(
        default=None,
        description="Which of `hyperparameters` were defaulted from the base model's "
        "architecture rather than chosen.",
    )
    stalled_since: str | None = Field(
        default=None,
        description="When the last report arrived, once nothing has arrived on any channel for "
        "TENSORANT_STALL_AFTER seconds while RunPod says the Pod runs; the next reconcile then "
        "stops and retains a run that trained (trainer_stalled).",
    )
    estimate: Estimate | None = Field(
        default=None,
        description="R18: on `GET /v1/runs/{id}` (not in the list); null for a run drafted "
        "before hyperparameters were kept.",
    )
    actual: Actual | None = Field(
        default=None, description="R18: once the run ended, its minutes and cost."
    )
    lineage: Lineage | None = Field(
        default=None,
        description="R19: on `GET /v1/runs/{id}` once the run succeeded (docs/estimate.md).",
    )
    training: TrainingRecord | None = Field(
        default=None,
        description="R17/R18: once its adapter is verified, the run's final train and eval "
        "loss, the best step kept, and its measured throughput and training time.",
    )
    baseline: BaselineFigures | None = Field(
        default=None,
        description="R17: on `GET /v1/runs/{id}` of a full run, its trial's figures.",
    )
    created_at: str
    updated_at: str


class Accepted(BaseModel):
    id: str
    state: str
    detail: str


class LaunchIn(Input):
    model_config = example(confirm=True, accepted_price_per_hour="1.64")
    confirm: Confirmation = False
    accepted_price_per_hour: PlainDecimal | None = Field(
        default=None, gt=0, le=1000, max_digits=12, decimal_places=6
    )


class ResumeIn(Input):
    model_config = example(confirm_billing=True)
    confirm_billing: Confirmation = False


class ReleaseIn(Input):
    model_config = example(confirm_delete_unverified=False)
    confirm_delete_unverified: Confirmation = False


class RunEvent(BaseModel):
    version: int
    type: str
    time: str
    actor: str
    data: dict[str, Any]


class RunEvents(BaseModel):
    events: list[RunEvent]
    next_after: int


class LogLine(BaseModel):
    seq: int
    time: str
    text: str


class LogPage(BaseModel):
    lines: list[LogLine]
    next_after: int


class MetricPoint(BaseModel):
    """One progress report's measures (R17); a measure the trainer did not report is null."""

    step: int
    epoch: float | None = None
    loss: float | None = None
    eval_loss: float | None = None
    learning_rate: float | None = None
    grad_norm: float | None = None
    tokens_per_s: float | None = None
    time: str


class MetricPage(BaseModel):
    points: list[MetricPoint]
    next_after: int  # pass as `after` for the points kept since
