"""The run manifest (T1), written to the organization's storage at launch.

Everything the trainer needs beyond its four environment variables: the base model's location,
the dataset's key and sha256, hyperparameters with the architecture's defaults, the trial caps
and where the adapter goes. For custom S3 it carries presigned GETs and PUTs instead: a trainer
never holds a storage key pair. A network volume's manifest holds no URL, so a retried launch
writes the very same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from application.adapter_check import read_model_config
from application.ports import ObjectStore, S3Credentials, StorageLocation
from application.run_settings import RunSettings
from domain.base_models import CATALOGUE, gated_model, storage_folder, storage_model
from domain.gpus import gpu_type
from domain.hyperparameters import HYPERPARAMETERS
from domain.lora import CATALOGUE_ARCHITECTURES
from domain.memory import ModelShape, catalogue_shape, micro_batch_tokens
from domain.times import iso
from trainer.protocol import (
    AdapterSpec,
    BaseModelSpec,
    DatasetSpec,
    Hyperparameters,
    MailboxUrls,
    Manifest,
    TrialCaps,
    adapter_key,
    default_hyperparameters,
    manifest_key,
    pooled_log_key,
    result_key,
    status_key,
    volume_manifest_url,
)

if TYPE_CHECKING:
    from application.log import TensorantLog
    from application.storage import StorageService
    from domain.run import Run

LOG_URL_POOL = 64  # custom S3: presigned log chunk PUTs; fixed at launch
S3 = "s3"
# N1: each presigned URL lives as long as its use. Downloads (dataset, base model files) are
# started while the Pod boots: the boot deadline and half an hour more. Uploads (the adapter,
# the mailbox) while the Pod may run: its runtime limit and the grace before RunPod stops it.
# The manifest's own GET (in the Pod's env, which a resumed Pod keeps) lives S3's longest, 7
# days: what it reads is rewritten with fresh URLs when the Pod is resumed, and without any
# once the adapter is verified.
DOWNLOAD_WINDOW_S = 30 * 60
MANIFEST_URL_S = 7 * 24 * 3600


@dataclass(frozen=True)
class UrlLifetimes:
    get_s: int  # presigned GETs: downloads at boot
    put_s: int  # presigned PUTs: the adapter and the mailbox

    @classmethod
    def of(cls, max_runtime_minutes: int, settings: RunSettings) -> UrlLifetimes:
        return cls(
            get_s=int(settings.boot_deadline_s) + DOWNLOAD_WINDOW_S,
            put_s=int(max_runtime_minutes) * 60 + int(settings.stop_after_grace_s),
        )


def issue_manifest(
    log: TensorantLog,
    objects: ObjectStore,
    storage: StorageService,
    run: Run,
    lifetimes: UrlLifetimes,
    hub_endpoint: str | None = None,
    deadline: str | None = None,
    revision: str | None = None,
) -> str:
    """Write the run's manifest with URLs valid from now (at launch, and again for a resumed
    Pod); returns the Pod's TENSORANT_MANIFEST. `deadline`: when the runtime limit ends (R5);
    a manifest issued again keeps the one its launch set."""
    if deadline is None and run.started_at is not None:
        deadline = iso(run.started_at + timedelta(minutes=int(run.config.max_runtime_minutes)))
    st = log.storage(run.org_id)
    cfg = run.config
    loc, creds = storage.location(run.org_id)
    dataset = log.project(run.org_id, str(cfg.project_id)).datasets[str(cfg.dataset_version_id)]
    manifest = build_manifest(
        run_id=str(run.id),
        kind=str(cfg.kind),
        base_model=str(cfg.base_model),
        dataset=dataset,
        storage_kind=st.kind or "",
        objects=objects,
        location=loc,
        creds=creds,
        lifetimes=lifetimes,
        hub_endpoint=hub_endpoint,
        gpu_memory_gb=gpu_type(str(cfg.gpu_type_id)).memory_gb,
        deadline=deadline,
        chosen=chosen_hyperparameters(cfg.hyperparameters, cfg.defaults),
        revision=revision,
    )
    return write_manifest(objects, loc, creds, manifest)


# R16: the API's names of the manifest's fields where they differ
_MANIFEST_NAMES = {"lora_rank": "lora_r"}


def as_api_hyperparameters(hyper: Hyperparameters) -> dict[str, Any]:
    """The hyperparameters a member may choose (`domain.hyperparameters`), as the API names
    them, from the manifest's."""
    return {name: getattr(hyper, _MANIFEST_NAMES.get(name, name)) for name in HYPERPARAMETERS}


def with_chosen(hyper: Hyperparameters, chosen: Mapping[str, Any]) -> Hyperparameters:
    """`hyper` with the member's chosen values (API names) in place of the defaults."""
    return replace(hyper, **{_MANIFEST_NAMES.get(k, k): v for k, v in chosen.items()})


def chosen_hyperparameters(
    values: Mapping[str, Any] | None, defaults: Sequence[str] | None
) -> dict[str, Any]:
    """What the member chose of a run's hyperparameters: every value but the defaulted ones
    (those the manifest takes from the architecture again, as it reads it at launch)."""
    skip = set(defaults or ())
    return {k: v for k, v in (values or {}).items() if k not in skip}


def revoke_manifest_urls(
    objects: ObjectStore, location: StorageLocation, creds: S3Credentials, run_id: str
) -> None:
    """The run's manifest rewritten without a presigned URL (custom S3), once its adapter is
    verified: a reader of the Pod's env finds nothing more to write with. (A URL read before
    stays valid until it expires; the verified adapter is pinned, so it changes nothing.)"""
    key = manifest_key(run_id)
    if objects.head(location, creds, key) is None:
        return
    body = json.loads(objects.get(location, creds, key))
    if not isinstance(body, dict) or body.get("storage") != S3:
        return
    body.pop("mailbox", None)
    for part, field in (
        ("adapter", "upload_url"),
        ("dataset", "url"),
        ("base_model", "url_by_file"),
    ):
        section = body.get(part)
        if isinstance(section, dict):
            section.pop(field, None)
    objects.put(location, creds, key, json.dumps(body, indent=1, sort_keys=True).encode())


def build_manifest(
    *,
    run_id: str,
    kind: str,
    base_model: str,
    dataset: dict[str, Any],
    storage_kind: str,
    objects: ObjectStore,
    location: StorageLocation,
    creds: S3Credentials,
    lifetimes: UrlLifetimes,
    hub_endpoint: str | None = None,
    gpu_memory_gb: int | None = None,
    deadline: str | None = None,
    chosen: Mapping[str, Any] | None = None,
    revision: str | None = None,
) -> Manifest:
    """`hub_endpoint`: the Hub a Hub model is downloaded from (the one the control plane's
    checks ask); a gated model is marked so that the trainer asks for the token (C7).
    `gpu_memory_gb`: the memory of the GPU the run rents, from which the memory model
    (domain/memory.py) sets how many tokens one forward pass may hold. `chosen`: the
    hyperparameters the member chose (R16, API names), over the architecture's defaults."""
    custom = storage_kind == S3

    def get(key: str) -> str | None:
        return objects.presign_get(location, creds, key, lifetimes.get_s) if custom else None

    def put(key: str) -> str:
        return objects.presign_put(location, creds, key, lifetimes.put_s)

    folder = storage_folder(base_model)
    if folder is None:
        base = BaseModelSpec(
            source="hub",
            id=base_model,
            hub_endpoint=hub_endpoint,
            gated=True if gated_model(base_model) else None,
            revision=revision,  # R19: the commit resolved at launch, when the Hub said
        )
        hyper = architecture_defaults(base_model, objects, location, creds)
        shape = catalogue_shape(base_model)
    else:
        urls = None
        if custom:
            urls = {
                o.key.removeprefix(folder + "/"): put_or_get
                for o in objects.list(location, creds, folder + "/")
                if (put_or_get := get(o.key))
            }
        base = BaseModelSpec(source="storage", path=folder, url_by_file=urls or None)
        hyper, shape = _storage_defaults(objects, location, creds, folder)
    hyper = with_chosen(hyper, chosen or {})
    if gpu_memory_gb and shape is not None:
        # one row of max_seq_len always goes through (the draft checked that it fits)
        budget = micro_batch_tokens(shape, gpu_memory_gb, hyper.lora_r)
        hyper = replace(hyper, micro_batch_tokens=max(hyper.max_seq_len, budget))
    mailbox = None
    if custom:
        mailbox = MailboxUrls(
            status_url=put(status_key(run_id)),
            result_url=put(result_key(run_id)),
            log_urls=tuple(put(pooled_log_key(run_id, i)) for i in range(LOG_URL_POOL)),
        )
    return Manifest(
        run_id=run_id,
        kind=kind,
        base_model=base,
        dataset=DatasetSpec(
            object_key=dataset["object_key"],
            sha256=dataset["sha256"],
            format=dataset.get("format", "chat"),
            url=get(dataset["object_key"]),
        ),
        adapter=AdapterSpec(
            object_key=adapter_key(run_id),
            upload_url=put(adapter_key(run_id)) if custom else None,
        ),
        hyperparameters=hyper,
        trial=TrialCaps(),
        storage=storage_kind or "runpod_volume",
        mailbox=mailbox,
        deadline=deadline,
    )


def write_manifest(
    objects: ObjectStore,
    location: StorageLocation,
    creds: S3Credentials,
    manifest: Manifest,
) -> str:
    """Write `runs/<id>/manifest.json` (the same bytes again on a retry); the Pod's
    TENSORANT_MANIFEST: a file under the volume's mount, or a presigned GET for custom S3."""
    key = manifest_key(manifest.run_id)
    objects.put(location, creds, key, manifest.dumps().encode())
    if manifest.storage == S3:
        return objects.presign_get(location, creds, key, MANIFEST_URL_S)
    return volume_manifest_url(manifest.run_id)


def architecture_defaults(
    base_model: str,
    objects: ObjectStore,
    location: StorageLocation | None,
    creds: S3Credentials | None,
) -> Hyperparameters:
    """R16: the defaults of a base model's architecture and size, as the manifest takes them
    (a storage model's from its config.json; `location` None: storage not readable)."""
    folder = storage_folder(base_model)
    if folder is None:
        catalogued = CATALOGUE.get(base_model)
        arch = CATALOGUE_ARCHITECTURES.get(base_model)
        return default_hyperparameters(
            arch.model_type if arch else "llama", catalogued.parameters_b if catalogued else 8.0
        )
    if location is None or creds is None:
        return default_hyperparameters()
    return _storage_defaults(objects, location, creds, folder)[0]


def _storage_defaults(
    objects: ObjectStore, location: StorageLocation, creds: S3Credentials, folder: str
) -> tuple[Hyperparameters, ModelShape | None]:
    """A storage model's defaults by its architecture and size, both read from its config.json
    (as P2 estimates its memory need), and its shape for the memory model; the 1B Llama
    defaults (and no shape) when it cannot be read."""
    config = read_model_config(objects, location, creds, folder)
    if config is None:
        return default_hyperparameters(), None
    try:
        model = storage_model(folder, config)
        shape = ModelShape.from_config(config, round(model.parameters_b * 1e9))
    except ValueError:
        return default_hyperparameters(), None
    return default_hyperparameters(model.model_type or "llama", model.parameters_b), shape
