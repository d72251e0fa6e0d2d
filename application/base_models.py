"""Base models (P2): the catalogue plus `models/<folder>` folders on the organization's storage
(a `save_pretrained` output with a config.json), described the same way."""

from __future__ import annotations

from dataclasses import dataclass

from application.adapter_check import read_model_config
from application.ports import ObjectStore
from application.storage import StorageService
from domain.base_models import (
    CATALOGUE,
    MODELS_PREFIX,
    BaseModel,
    InvalidBaseModel,
    storage_folder,
    storage_model,
)
from domain.errors import TensorantError
from domain.memory import DEFAULT_LORA_R, DEFAULT_SEQ_LEN, ModelShape, catalogue_shape, need_gb


@dataclass(frozen=True)
class BaseModels:
    objects: ObjectStore
    storage: StorageService

    def list(self, org_id: str) -> list[BaseModel]:
        """The catalogue, then every models/<folder>/config.json found on the storage."""
        found = list(CATALOGUE.values())
        try:
            loc, creds = self.storage.location(org_id)
        except TensorantError:  # no storage connected yet: the catalogue alone
            return found
        folders = sorted(
            {
                o.key.split("/")[1]
                for o in self.objects.list(loc, creds, MODELS_PREFIX)
                if o.key.count("/") == 2 and o.key.endswith("/config.json")
            }
        )
        for name in folders:
            config = read_model_config(self.objects, loc, creds, MODELS_PREFIX + name)
            if config is None:
                continue
            try:
                found.append(storage_model(MODELS_PREFIX + name, config))
            except ValueError:
                continue
        return found

    def need_gb(
        self,
        org_id: str,
        base_model: str,
        seq_len: int = DEFAULT_SEQ_LEN,
        lora_r: int = DEFAULT_LORA_R,
    ) -> int | None:
        """P2 at draft: a storage model must exist on storage (its memory need is estimated
        from config.json); None for a Hub id at the default sequence length and rank (the
        catalogue's need applies). R16: a chosen `seq_len` or `lora_r` is what the memory
        model is asked about, for a catalogue model too."""
        chosen = (seq_len, lora_r) != (DEFAULT_SEQ_LEN, DEFAULT_LORA_R)
        folder = storage_folder(base_model)
        if folder is None:
            shape = catalogue_shape(base_model) if chosen else None
            return None if shape is None else need_gb(shape, seq_len, lora_r)
        loc, creds = self.storage.location(org_id)
        config = read_model_config(self.objects, loc, creds, folder)
        if config is None:
            raise InvalidBaseModel(
                f"{base_model}: no readable {folder}/config.json on the organization's storage",
                rule="base_model",
            )
        try:
            model = storage_model(folder, config)
            if not chosen:
                return model.lora_memory_gb
            shape = ModelShape.from_config(config, round(model.parameters_b * 1e9))
            return need_gb(shape, seq_len, lora_r)
        except ValueError as e:
            raise InvalidBaseModel(f"{base_model}: {e}", rule="base_model") from None
