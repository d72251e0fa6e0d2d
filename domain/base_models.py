"""Base models (P2): the catalogue of Hugging Face Hub models and `storage:models/<folder>` ones.

A storage model's numbers come from its config.json (`Architecture.from_config` and
`parameters_from_config`); its LoRA memory need comes from the memory model
(`domain/memory.py`) as the catalogue's does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from domain.errors import DomainError
from domain.gpus import BASE_MODELS
from domain.lora import CATALOGUE_ARCHITECTURES
from domain.memory import ModelShape, need_gb

STORAGE_PREFIX = "storage:"
MODELS_PREFIX = "models/"


@dataclass(frozen=True)
class BaseModel:
    id: str
    source: str  # hub | storage
    parameters_b: float
    lora_memory_gb: int
    context_length: int
    license: str
    gated: bool
    model_type: str

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "source": self.source,
            "parameters_b": self.parameters_b,
            "lora_memory_gb": self.lora_memory_gb,
            "context_length": self.context_length,
            "license": self.license,
            "gated": self.gated,
        }


def _hub(model_id: str, parameters_b: float, context: int, license: str, gated: bool) -> BaseModel:
    arch = CATALOGUE_ARCHITECTURES[model_id]
    return BaseModel(
        model_id,
        "hub",
        parameters_b,
        BASE_MODELS[model_id],
        context,
        license,
        gated,
        arch.model_type,
    )


# From each model's card and config.json on the Hugging Face Hub. Gated: the Hub asks the
# account to accept the license first, so a trainer without a Hugging Face token cannot load it.
CATALOGUE: dict[str, BaseModel] = {
    m.id: m
    for m in (
        _hub("Qwen/Qwen2.5-0.5B-Instruct", 0.49, 32768, "apache-2.0", False),
        _hub("Qwen/Qwen2.5-7B-Instruct", 7.6, 32768, "apache-2.0", False),
        _hub("meta-llama/Llama-3.2-3B-Instruct", 3.2, 131072, "llama3.2", True),
        _hub("meta-llama/Llama-3.1-8B-Instruct", 8.0, 131072, "llama3.1", True),
        _hub("mistralai/Mistral-7B-Instruct-v0.3", 7.2, 32768, "apache-2.0", True),
        _hub("google/gemma-2-27b-it", 27.2, 8192, "gemma", True),
        _hub("meta-llama/Llama-3.3-70B-Instruct", 70.6, 131072, "llama3.3", True),
    )
}


def lora_memory_gb(config: Mapping[str, Any], parameters_b: float) -> int:
    """The memory model's need (domain/memory.py) at the default sequence length and rank."""
    return need_gb(ModelShape.from_config(config, round(parameters_b * 1e9)))


def parameters_from_config(config: Mapping[str, Any]) -> float:
    """Billions of parameters of a decoder from its config.json (embeddings included)."""
    hidden = int(config["hidden_size"])
    inter = int(config["intermediate_size"])
    layers = int(config["num_hidden_layers"])
    heads = int(config["num_attention_heads"])
    kv = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    vocab = int(config.get("vocab_size") or 32000)
    attention = hidden * heads * head_dim * 2 + hidden * kv * head_dim * 2
    per_layer = attention + 3 * hidden * inter + 2 * hidden
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings") else 2)
    return round((layers * per_layer + embeddings) / 1e9, 6)


def storage_model(folder: str, config: Mapping[str, Any]) -> BaseModel:
    """A `save_pretrained` folder on the organization's storage, described by its config.json."""
    try:
        parameters = parameters_from_config(config)
        context = int(config.get("max_position_embeddings") or 0)
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
        raise ValueError(f"config.json lacks a decoder's dimensions: {e}") from None
    return BaseModel(
        id=f"{STORAGE_PREFIX}{folder.strip('/')}",
        source="storage",
        parameters_b=parameters,
        lora_memory_gb=lora_memory_gb(config, parameters),
        context_length=context,
        license="",
        gated=False,
        model_type=str(config.get("model_type", "")),
    )


def storage_folder(base_model: str) -> str | None:
    """`models/<folder>` of a `storage:models/<folder>` base model; None for a Hub id."""
    if not base_model.startswith(STORAGE_PREFIX):
        return None
    folder = base_model.removeprefix(STORAGE_PREFIX).strip("/")
    parts = folder.split("/")
    if not folder.startswith(MODELS_PREFIX) or len(parts) != 2 or ".." in parts or not parts[1]:
        raise InvalidBaseModel(
            f"{base_model!r}: a storage base model is storage:models/<folder>", rule="base_model"
        )
    return folder


def gated_model(base_model: str) -> BaseModel | None:
    """The catalogue model when it is gated on the Hub (its licence must be accepted first)."""
    model = CATALOGUE.get(base_model)
    return model if model is not None and model.gated else None


def no_token(model: BaseModel) -> BaseModelGated:
    """C7: a gated model needs the organization's Hugging Face token."""
    return BaseModelGated(
        f"{model.id} is gated on the Hugging Face Hub (licence {model.license}): connect a "
        "Hugging Face token whose account accepted its licence (Settings → Connections, or "
        "PUT /v1/connections/huggingface), choose an open model ("
        + ", ".join(m.id for m in CATALOGUE.values() if not m.gated)
        + "), or put the model on your storage as storage:models/<folder>",
        rule="base_model",
    )


def access_denied(model: BaseModel, username: str | None, page: str) -> BaseModelAccessDenied:
    """C7: the connected token's account has not been granted the gated model."""
    who = f"the Hugging Face account {username}" if username else "the connected token's account"
    return BaseModelAccessDenied(
        f"{who} cannot read {model.id}: it is gated (licence {model.license}) and this "
        f"account has not been granted access. Sign in to the Hub as that account, open "
        f"{page}, accept the licence and wait for the approval (the page says when it is "
        "granted), then draft again; or connect a token of an account that has access",
        rule="base_model",
        repository=model.id,
        licence_page=page,
    )


class BaseModelGated(DomainError):
    problem = "base-model-gated"
    title = "The base model is gated"


class BaseModelAccessDenied(DomainError):
    problem = "base-model-access-denied"
    title = "The Hugging Face token cannot read the gated base model"


class InvalidBaseModel(DomainError):
    problem = "invalid-base-model"
    title = "Not a base model this service can train"
