"""The run manifest (T1), written to the organization's storage at launch.

Everything the trainer needs beyond its four environment variables: the base model's location,
the dataset's key and sha256, hyperparameters with the architecture's defaults, the trial caps
and where the adapter goes. For custom S3 it carries presigned GETs and PUTs instead: a trainer
never holds a storage key pair. A network volume's manifest holds no URL, so a retried launch
writes the very same bytes.
"""

from __future__ import annotations

from typing import Any

from application.adapter_check import read_model_config
from application.ports import ObjectStore, S3Credentials, StorageLocation
from domain.base_models import CATALOGUE, storage_folder, storage_model
from domain.lora import CATALOGUE_ARCHITECTURES
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

LOG_URL_POOL = 64  # custom S3: presigned log chunk PUTs; fixed at launch
S3 = "s3"


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
    expires_s: int,
    deadline: str | None = None,
) -> Manifest:
    custom = storage_kind == S3

    def get(key: str) -> str | None:
        return objects.presign_get(location, creds, key, expires_s) if custom else None

    def put(key: str) -> str:
        return objects.presign_put(location, creds, key, expires_s)

    folder = storage_folder(base_model)
    if folder is None:
        base = BaseModelSpec(source="hub", id=base_model)
        catalogued = CATALOGUE.get(base_model)
        arch = CATALOGUE_ARCHITECTURES.get(base_model)
        hyper = default_hyperparameters(
            arch.model_type if arch else "llama", catalogued.parameters_b if catalogued else 8.0
        )
    else:
        urls = None
        if custom:
            urls = {
                o.key.removeprefix(folder + "/"): put_or_get
                for o in objects.list(location, creds, folder + "/")
                if (put_or_get := get(o.key))
            }
        base = BaseModelSpec(source="storage", path=folder, url_by_file=urls or None)
        hyper = _storage_defaults(objects, location, creds, folder)
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
    expires_s: int,
) -> str:
    """Write `runs/<id>/manifest.json` (the same bytes again on a retry); the Pod's
    TENSORANT_MANIFEST: a file under the volume's mount, or a presigned GET for custom S3."""
    key = manifest_key(manifest.run_id)
    objects.put(location, creds, key, manifest.dumps().encode())
    if manifest.storage == S3:
        return objects.presign_get(location, creds, key, expires_s)
    return volume_manifest_url(manifest.run_id)


def _storage_defaults(
    objects: ObjectStore, location: StorageLocation, creds: S3Credentials, folder: str
) -> Hyperparameters:
    """A storage model's defaults by its architecture and size, both read from its config.json
    (as P2 estimates its memory need); the 1B Llama defaults when it cannot be read."""
    config = read_model_config(objects, location, creds, folder)
    if config is None:
        return default_hyperparameters()
    try:
        model = storage_model(folder, config)
    except ValueError:
        return default_hyperparameters()
    return default_hyperparameters(model.model_type or "llama", model.parameters_b)
