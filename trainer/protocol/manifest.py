"""The run manifest (T1): everything the trainer needs beyond its four environment variables.

Written by the control plane to storage at launch (`runs/<id>/manifest.json`); on custom S3 it
carries presigned URLs instead of keys the trainer could read (a trainer never holds a key pair).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Any

from trainer.protocol.layout import RECOVERY_PATH, check_run_id

MANIFEST_VERSION = 1
KINDS = ("trial", "full")
STORAGE_KINDS = ("runpod_volume", "s3")
DATASET_FORMATS = ("chat", "prompt_completion")
# The linear projections of the decoder layers LoRA may target (Llama, Qwen2, Mistral, Gemma 2).
LORA_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
MAX_LORA_R = 256


class ManifestError(ValueError):
    """A manifest that does not have the contract's shape; the trainer fails `manifest_invalid`."""


@dataclass(frozen=True)
class BaseModelSpec:
    source: str  # hub | storage
    id: str | None = None  # the Hub id, or for storage the run's name for it
    path: str | None = None  # storage: the folder's key, e.g. models/my-model
    url_by_file: dict[str, str] | None = None  # storage on custom S3: presigned GET per file
    hub_endpoint: str | None = None  # hub: the Hub to download from (default huggingface.co)
    # hub: the model is gated, so the trainer asks the control plane for the organization's
    # Hugging Face token (HUB_TOKEN_CALLBACK); absent for every other model
    gated: bool | None = None
    # hub: the commit to download (R19: resolved by the control plane at launch); absent: main
    revision: str | None = None

    @property
    def name(self) -> str:
        """What the run calls the base model; the adapter's base_model_name_or_path (R7)."""
        if self.id:
            return self.id
        return f"storage:{self.path}"


@dataclass(frozen=True)
class DatasetSpec:
    object_key: str
    sha256: str
    format: str
    url: str | None = None  # custom S3: presigned GET


@dataclass(frozen=True)
class Hyperparameters:
    lora_r: int = 16
    lora_alpha: float = 32
    lora_dropout: float = 0.05
    target_modules: tuple[str, ...] = LORA_MODULES
    learning_rate: float = 2e-4
    epochs: int = 1
    max_steps: int = 0  # > 0 overrides epochs
    batch_size: int = 4
    gradient_accumulation: int = 4
    max_seq_len: int = 2048
    seed: int = 0
    warmup_ratio: float = 0.03  # linear warm-up over this fraction of the steps (R16)
    validation_fraction: float = 0.0  # rows held out for eval_loss (R16, R17); 0: none
    # The most tokens (rows × their padded length) one forward pass holds, from the control
    # plane's memory model for the GPU the run got; 0: the whole micro-batch of batch_size rows.
    micro_batch_tokens: int = 0


@dataclass(frozen=True)
class TrialCaps:
    max_rows: int = 200
    max_steps: int = 30


@dataclass(frozen=True)
class AdapterSpec:
    object_key: str
    upload_url: str | None = None  # custom S3: presigned PUT


@dataclass(frozen=True)
class MailboxUrls:
    """Custom S3: presigned PUTs (reusable until expiry) for the mailbox files."""

    status_url: str
    result_url: str
    log_urls: tuple[str, ...] = ()


@dataclass(frozen=True)
class Manifest:
    run_id: str
    kind: str
    base_model: BaseModelSpec
    dataset: DatasetSpec
    adapter: AdapterSpec
    hyperparameters: Hyperparameters = field(default_factory=Hyperparameters)
    trial: TrialCaps = field(default_factory=TrialCaps)
    recovery_path: str = RECOVERY_PATH
    storage: str = "runpod_volume"
    mailbox: MailboxUrls | None = None
    version: int = MANIFEST_VERSION
    # R5: when RunPod's runtime clock (from the Pod's creation) reaches the run's limit, UTC ISO
    # 8601; the trainer stops training in time to export before it. None: no limit known.
    deadline: str | None = None

    def deadline_at(self) -> datetime | None:
        if self.deadline is None:
            return None
        return datetime.fromisoformat(self.deadline.replace("Z", "+00:00"))

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "version": self.version,
            "run_id": self.run_id,
            "kind": self.kind,
            "storage": self.storage,
            "base_model": _without_none(asdict(self.base_model)),
            "dataset": _without_none(asdict(self.dataset)),
            "hyperparameters": asdict(self.hyperparameters),
            "trial": asdict(self.trial),
            "adapter": _without_none(asdict(self.adapter)),
            "recovery_path": self.recovery_path,
        }
        body["hyperparameters"]["target_modules"] = list(self.hyperparameters.target_modules)
        if self.deadline is not None:
            body["deadline"] = self.deadline
        if self.mailbox is not None:
            body["mailbox"] = asdict(self.mailbox)
            body["mailbox"]["log_urls"] = list(self.mailbox.log_urls)
        return body

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1, sort_keys=True)

    @classmethod
    def loads(cls, text: str | bytes) -> Manifest:
        try:
            body = json.loads(text)
        except (ValueError, UnicodeDecodeError) as e:
            raise ManifestError(f"the manifest is not JSON: {e}") from None
        return cls.from_json(body)

    @classmethod
    def from_json(cls, body: Any) -> Manifest:
        try:
            return _parse(body)
        except ManifestError:
            raise
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            raise ManifestError(f"the manifest is malformed: {type(e).__name__}: {e}") from None


def default_hyperparameters(
    model_type: str = "llama", parameters_b: float = 1.0
) -> Hyperparameters:
    """Per-architecture defaults: the same seven projections everywhere, batch shape and learning
    rate by size so a catalogue GPU (R2 memory table) holds one micro-batch."""
    base = Hyperparameters()
    if model_type == "gemma2":
        # Gemma 2's soft-capped logits train stably at a lower rate.
        base = replace(base, learning_rate=1e-4)
    if parameters_b <= 1.5:
        return replace(base, batch_size=8, gradient_accumulation=2)
    if parameters_b <= 10:
        return replace(base, batch_size=4, gradient_accumulation=4)
    if parameters_b <= 30:
        return replace(base, batch_size=2, gradient_accumulation=8)
    return replace(base, batch_size=1, gradient_accumulation=16, learning_rate=1e-4)


def _without_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def _need(cond: bool, message: str) -> None:
    if not cond:
        raise ManifestError(message)


def _int(v: Any, name: str, lo: int, hi: int) -> int:
    _need(isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi, f"{name} out of range")
    return int(v)


def _num(v: Any, name: str, lo: float, hi: float, *, open_lo: bool = False) -> float:
    ok = isinstance(v, int | float) and not isinstance(v, bool) and v <= hi
    ok = ok and (v > lo if open_lo else v >= lo)
    _need(ok, f"{name} out of range")
    return float(v)


def _str(v: Any, name: str) -> str:
    _need(isinstance(v, str) and bool(v), f"{name} must be a non-empty string")
    return str(v)


def _opt_str(v: Any, name: str) -> str | None:
    return None if v is None else _str(v, name)


def _parse_hyperparameters(h: Mapping[str, Any]) -> Hyperparameters:
    d = Hyperparameters()
    modules = h.get("target_modules", list(d.target_modules))
    _need(
        isinstance(modules, list) and bool(modules) and set(modules) <= set(LORA_MODULES),
        f"target_modules must be a non-empty subset of {', '.join(LORA_MODULES)}",
    )
    return Hyperparameters(
        lora_r=_int(h.get("lora_r", d.lora_r), "lora_r", 1, MAX_LORA_R),
        lora_alpha=_num(h.get("lora_alpha", d.lora_alpha), "lora_alpha", 0, 4096, open_lo=True),
        lora_dropout=_num(h.get("lora_dropout", d.lora_dropout), "lora_dropout", 0, 0.9),
        target_modules=tuple(m for m in LORA_MODULES if m in modules),
        learning_rate=_num(
            h.get("learning_rate", d.learning_rate), "learning_rate", 0, 1, open_lo=True
        ),
        epochs=_int(h.get("epochs", d.epochs), "epochs", 1, 1000),
        max_steps=_int(h.get("max_steps", d.max_steps) or 0, "max_steps", 0, 10_000_000),
        batch_size=_int(h.get("batch_size", d.batch_size), "batch_size", 1, 4096),
        gradient_accumulation=_int(
            h.get("gradient_accumulation", d.gradient_accumulation),
            "gradient_accumulation",
            1,
            4096,
        ),
        max_seq_len=_int(h.get("max_seq_len", d.max_seq_len), "max_seq_len", 8, 1_048_576),
        seed=_int(h.get("seed", d.seed), "seed", 0, 2**32 - 1),
        warmup_ratio=_num(h.get("warmup_ratio", d.warmup_ratio), "warmup_ratio", 0, 0.5),
        validation_fraction=_num(
            h.get("validation_fraction", d.validation_fraction), "validation_fraction", 0, 0.5
        ),
        micro_batch_tokens=_int(
            h.get("micro_batch_tokens", d.micro_batch_tokens), "micro_batch_tokens", 0, 1 << 30
        ),
    )


def _parse(body: Any) -> Manifest:
    _need(isinstance(body, dict), "the manifest is a JSON object")
    _need(body.get("version") == MANIFEST_VERSION, f"manifest version must be {MANIFEST_VERSION}")
    run_id = _str(body.get("run_id"), "run_id")
    try:
        check_run_id(run_id)
    except ValueError as e:
        raise ManifestError(str(e)) from None
    kind = body.get("kind")
    _need(kind in KINDS, f"kind must be one of {', '.join(KINDS)}")
    mailbox = None
    if body.get("mailbox") is not None:
        m = body["mailbox"]
        logs = m.get("log_urls", [])
        _need(isinstance(logs, list), "mailbox.log_urls must be a list")
        mailbox = MailboxUrls(
            status_url=_str(m.get("status_url"), "mailbox.status_url"),
            result_url=_str(m.get("result_url"), "mailbox.result_url"),
            log_urls=tuple(_str(u, "mailbox.log_urls[]") for u in logs),
        )
    storage = body.get("storage", "s3" if mailbox else "runpod_volume")
    _need(storage in STORAGE_KINDS, f"storage must be one of {', '.join(STORAGE_KINDS)}")
    _need(storage == "runpod_volume" or mailbox is not None, "custom S3 needs mailbox URLs")

    b = body["base_model"]
    source = b.get("source")
    _need(source in ("hub", "storage"), "base_model.source must be hub or storage")
    urls = b.get("url_by_file")
    _need(urls is None or isinstance(urls, dict), "base_model.url_by_file must be an object")
    base = BaseModelSpec(
        source=source,
        id=_opt_str(b.get("id"), "base_model.id"),
        path=_opt_str(b.get("path"), "base_model.path"),
        url_by_file={str(k): _str(v, "base_model.url_by_file[]") for k, v in urls.items()}
        if urls
        else None,
        hub_endpoint=_opt_str(b.get("hub_endpoint"), "base_model.hub_endpoint"),
        gated=True if b.get("gated") is True else None,
        revision=_opt_str(b.get("revision"), "base_model.revision"),
    )
    _need(source != "hub" or base.id is not None, "a hub base model needs an id")
    _need(source != "storage" or base.path is not None, "a storage base model needs a path")

    ds = body["dataset"]
    _need(ds.get("format") in DATASET_FORMATS, f"dataset.format must be one of {DATASET_FORMATS}")
    sha = _str(ds.get("sha256"), "dataset.sha256").lower()
    _need(len(sha) == 64 and all(c in "0123456789abcdef" for c in sha), "dataset.sha256 is hex")
    dataset = DatasetSpec(
        object_key=_str(ds.get("object_key"), "dataset.object_key"),
        sha256=sha,
        format=ds["format"],
        url=_opt_str(ds.get("url"), "dataset.url"),
    )
    a = body["adapter"]
    adapter = AdapterSpec(
        object_key=_str(a.get("object_key"), "adapter.object_key"),
        upload_url=_opt_str(a.get("upload_url"), "adapter.upload_url"),
    )
    if storage == "s3":
        _need(dataset.url is not None, "custom S3 needs dataset.url")
        _need(adapter.upload_url is not None, "custom S3 needs adapter.upload_url")
        _need(source != "storage" or bool(base.url_by_file), "custom S3 needs url_by_file")
    t = body.get("trial") or {}
    trial = TrialCaps(
        max_rows=_int(t.get("max_rows", TrialCaps.max_rows), "trial.max_rows", 1, 10_000_000),
        max_steps=_int(t.get("max_steps", TrialCaps.max_steps), "trial.max_steps", 1, 10_000_000),
    )
    return Manifest(
        run_id=run_id,
        kind=kind,
        base_model=base,
        dataset=dataset,
        adapter=adapter,
        hyperparameters=_parse_hyperparameters(body.get("hyperparameters") or {}),
        trial=trial,
        recovery_path=_str(body.get("recovery_path", RECOVERY_PATH), "recovery_path"),
        storage=storage,
        mailbox=mailbox,
        deadline=_deadline(body.get("deadline")),
    )


def _deadline(v: Any) -> str | None:
    if v is None:
        return None
    text = _str(v, "deadline")
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ManifestError("deadline must be an ISO 8601 time") from None
    _need(at.tzinfo is not None, "deadline must carry its time zone")
    return text
