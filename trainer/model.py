"""The base model inside the Pod (T1): found on the Hub (cached on the volume), in a folder on the
organization's storage, or fetched through presigned GETs (custom S3); loaded in bf16 on an
Ampere-or-newer GPU and fp32 on a CPU; wrapped with LoRA."""

from __future__ import annotations

import json
import os
import threading
import warnings
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from trainer import transfer
from trainer.errors import TrainerFailure
from trainer.protocol import HUB_TOKEN_CALLBACK, BaseModelSpec, FailureReason, Hyperparameters
from trainer.settings import Settings, SettingsError

# Only what a transformers model folder needs; never pickles (*.bin, *.pt) or original/ copies.
HUB_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken"]


def _unavailable(detail: str) -> TrainerFailure:
    return TrainerFailure(FailureReason.BASE_MODEL_UNAVAILABLE, detail)


# (bytes done, bytes in all once known: at the end): the download's progress (downloading_model)
OnBytes = Callable[[int, int | None], None]
WATCH_S = 5.0


def resolve_base_model(
    settings: Settings, spec: BaseModelSpec, on_bytes: OnBytes | None = None
) -> Path:
    """The local folder holding the base model's config, weights and tokenizer."""
    report = on_bytes or (lambda _done, _total: None)
    if spec.source == "hub":
        assert spec.id is not None
        return _from_hub(settings, spec, report)
    if spec.url_by_file:
        return _from_urls(settings, spec.url_by_file, report)
    assert spec.path is not None
    try:
        folder = settings.object_path(spec.path)
    except SettingsError as e:
        raise _unavailable(str(e)) from None
    if not (folder / "config.json").is_file():
        raise _unavailable(f"storage:{spec.path} has no config.json")
    return folder


def hub_token(settings: Settings) -> str:
    """C7: the organization's Hugging Face token, asked of the control plane with the run
    token for a gated model; kept in memory for the download only, never logged or written."""
    if not settings.callback_url:
        raise _unavailable(
            "the base model is gated and TENSORANT_CALLBACK_URL is empty: the Hugging Face "
            "token is given only through the control plane (set TENSORANT_PUBLIC_URL to an "
            "address Pods reach)"
        )
    url = f"{settings.callback_url}/v1/trainer/runs/{settings.run_id}/{HUB_TOKEN_CALLBACK}"
    try:
        body = json.loads(transfer.get_with_token(url, settings.token, limit=64 * 1024))
        token = body["token"]
    except transfer.TransferError as e:
        raise _unavailable(f"the Hugging Face token could not be fetched: {e}") from None
    except (ValueError, KeyError, TypeError):
        raise _unavailable("the control plane's answer held no Hugging Face token") from None
    if not isinstance(token, str) or not token:
        raise _unavailable("the control plane's answer held no Hugging Face token")
    return token


def _folder_bytes(folder: Path) -> int:
    try:
        return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    except OSError:  # a file renamed while walking: the next look counts it
        return 0


def _from_hub(settings: Settings, spec: BaseModelSpec, report: OnBytes) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

    repo_id = str(spec.id)
    token: str | bool = hub_token(settings) if spec.gated else os.environ.get("HF_TOKEN") or False
    # The Hub cache on the volume grows as files arrive: its size is the bytes done, every
    # WATCH_S while the download runs (a second run on the same volume finds it all there).
    repo_cache = settings.hf_cache / ("models--" + repo_id.replace("/", "--"))
    done = threading.Event()

    def watch() -> None:
        while not done.wait(WATCH_S):
            report(_folder_bytes(repo_cache), None)

    watcher = threading.Thread(target=watch, name="tensorant-download", daemon=True)
    watcher.start()
    try:
        path = snapshot_download(
            repo_id=repo_id,
            revision=spec.revision,  # R19: the commit the control plane pinned (None: main)
            cache_dir=settings.hf_cache,  # on the volume: a later run downloads nothing
            allow_patterns=HUB_PATTERNS,
            ignore_patterns=["original/*"],
            token=token,
            endpoint=spec.hub_endpoint,
        )
    except GatedRepoError:
        raise _unavailable(
            f"{repo_id} is gated on the Hugging Face Hub and the token's account has no access "
            "(accept the model's licence on the Hub)"
        ) from None
    except RepositoryNotFoundError:
        raise _unavailable(f"{repo_id} was not found on the Hugging Face Hub") from None
    except (HfHubHTTPError, OSError, ValueError) as e:
        raise _unavailable(f"{repo_id} could not be downloaded: {type(e).__name__}: {e}") from None
    finally:
        done.set()
    size = _folder_bytes(repo_cache)
    report(size, size)
    return Path(path)


def _from_urls(settings: Settings, url_by_file: dict[str, str], report: OnBytes) -> Path:
    folder = settings.container_disk / "base-model" / settings.run_id
    fetched = 0
    for name, url in sorted(url_by_file.items()):
        parts = PurePosixPath(name).parts
        if not parts or PurePosixPath(name).is_absolute() or ".." in parts:
            raise _unavailable(f"unsafe model file name {name!r}")
        try:
            transfer.get_to_file(url, folder.joinpath(*parts))
        except transfer.TransferError as e:
            raise _unavailable(f"model file {name}: {e}") from None
        fetched += folder.joinpath(*parts).stat().st_size
        report(fetched, None)
    report(fetched, fetched)
    if not (folder / "config.json").is_file():
        raise _unavailable("the model's files have no config.json")
    return folder


def pick_device() -> tuple[Any, Any]:
    """(device, dtype): bf16 on a GPU that supports it (Ampere+), else fp32."""
    import torch

    if torch.cuda.is_available():
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
        return torch.device("cuda"), dtype
    # Several threads lose badly to other processes on a shared CPU; one is steady.
    torch.set_num_threads(1)
    return torch.device("cpu"), torch.float32


def load_model(folder: Path, device: Any, dtype: Any) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # progress bars are noise in a Pod's log
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
    except (OSError, ValueError, KeyError) as e:
        raise _unavailable(f"the base model does not load: {type(e).__name__}: {e}") from None
    if tokenizer.pad_token_id is None:
        # Padding is masked out of the loss and attention; any id will do.
        tokenizer.pad_token = tokenizer.eos_token
    model.config.use_cache = False
    return tokenizer, model.to(device)


def add_lora(model: Any, hp: Hyperparameters, *, checkpointing: bool) -> Any:
    from peft import LoraConfig, get_peft_model

    present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    targets = [m for m in hp.target_modules if m in present]
    if not targets:
        raise _unavailable(
            f"the model has none of the target modules {', '.join(hp.target_modules)}"
        )
    if checkpointing:
        # Transformers 5 renamed gradient checkpointing (the old name warns, and goes in v6).
        kwargs = {"use_reentrant": False}
        if hasattr(model, "activation_checkpointing_enable"):
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    config = LoraConfig(
        r=hp.lora_r,
        lora_alpha=int(hp.lora_alpha) if hp.lora_alpha == int(hp.lora_alpha) else hp.lora_alpha,
        lora_dropout=hp.lora_dropout,
        target_modules=targets,
        bias="none",
        task_type="CAUSAL_LM",
    )
    with warnings.catch_warnings():
        # peft asks transformers `is_gradient_checkpointing`, which 5.x deprecates noisily.
        warnings.filterwarnings(
            "ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning
        )
        return get_peft_model(model, config)
