"""The run page says what a booting Pod is doing (R14): installing the trainer's
environment, or downloading the base model with the bytes done, before any training step."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from api.console.web import TEMPLATES


def _status(progress: dict[str, Any]) -> str:
    run = SimpleNamespace(
        id="r1",
        state="running",
        state_reason=None,
        gpu_count=1,
        gpu_type_id="NVIDIA A100 80GB PCIe",
        datacenter_id="EU-RO-1",
        price_per_hour="1.64",
        price_limit_per_hour="2.00",
        cost_so_far="0.10",
        runtime_seconds=120,
        max_runtime_minutes=30,
        pod_id="p1",
        cleanup={"pod_status": "running", "last_error": None},
        progress=progress,
        adapter=None,
        ssh_command=None,
    )
    page = TEMPLATES.get_template("_run_status.html")
    return str(
        page.render(
            run=run,
            terminal=False,
            can=lambda _action: False,  # an auditor's view: the same words, no actions
            history=[],
            errors={},
            people={},
            confirm=None,
            polling=True,
            csrf="",
            storage=None,
        )
    )


def test_the_boot_phases_read_as_what_the_pod_does() -> None:
    installing = _status({"phase": "installing", "step": 0, "total_steps": 1})
    assert "installing the trainer's environment on the Pod" in installing
    downloading = _status(
        {"phase": "downloading_model", "step": 0, "total_steps": 0, "bytes_done": 7340032}
    )
    assert "downloading the base model: 7,340,032 bytes" in downloading
    done = _status(
        {
            "phase": "downloading_model",
            "step": 0,
            "total_steps": 0,
            "bytes_done": 16_100_000_000,
            "bytes_total": 16_100_000_000,
        }
    )
    assert "16,100,000,000 bytes of 16,100,000,000" in done
    training = _status({"phase": "training", "step": 3, "total_steps": 25, "loss": 1.5})
    assert "training step 3/25, loss 1.5" in training
