"""What vLLM's filesystem LoRA resolver checks before it loads an adapter (no torch here: the
sandbox's server imports this, only the worker process imports the training stack)."""

from __future__ import annotations

import json
from pathlib import Path


class WorkerError(Exception):
    """A request the worker refuses (vLLM answers these 400 or 404 with an OpenAI error body)."""

    def __init__(self, status: int, message: str, kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind


def check_adapter(folder: Path, served_model: str, max_rank: int) -> None:
    """The folder holds a LoRA for the served model, within the endpoint's maximum rank."""
    config_path = folder / "adapter_config.json"
    if not config_path.is_file() or not (folder / "adapter_model.safetensors").is_file():
        raise WorkerError(404, f"The model `{folder.name}` does not exist.", "NotFoundError")
    try:
        config = json.loads(config_path.read_text())
    except ValueError:
        raise WorkerError(400, f"{folder.name}: adapter_config.json is not JSON") from None
    if config.get("peft_type") != "LORA":
        raise WorkerError(400, f"{folder.name}: peft_type must be LORA")
    if config.get("base_model_name_or_path") != served_model:
        raise WorkerError(
            400,
            f"{folder.name} was made for {config.get('base_model_name_or_path')!r}, "
            f"this worker serves {served_model!r}",
        )
    rank = config.get("r")
    if not isinstance(rank, int) or rank > max_rank:
        raise WorkerError(400, f"LoRA rank {rank} is greater than max_lora_rank {max_rank}")
