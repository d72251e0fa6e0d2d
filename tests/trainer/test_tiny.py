"""T2: the tiny base model the demo and the sandbox train on, made on the spot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from domain.lora import Architecture
from trainer.protocol import check_dataset, read_chunks
from trainer.tiny import main


@pytest.mark.parametrize("architecture", ["llama", "qwen2"])
def test_the_tiny_builder_writes_a_model_folder_and_a_valid_demo_dataset(
    architecture: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "models" / "tiny"
    assert main([str(out), "--architecture", architecture, "--rows", "12"]) == 0
    summary = json.loads(capsys.readouterr().out)
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == architecture
    assert {"model.safetensors", "tokenizer.json", "chat_template.jinja"} <= {
        p.name for p in out.iterdir()
    }
    arch = Architecture.from_config(config)
    assert (arch.hidden_size, arch.num_layers, arch.kv_out) == (128, 4, 64)
    with Path(summary["dataset"]).open("rb") as f:
        check = check_dataset(read_chunks(f))
    assert (
        check.ok and check.row_count == summary["rows"] == 12 and check.sha256 == summary["sha256"]
    )
