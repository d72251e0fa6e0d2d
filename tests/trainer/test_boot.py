"""The Pod's boot (trainer/boot.py): what the image already has at the locked version is reused,
and only the rest is installed; torch comes from PyTorch's cu130 index when it must be."""

from __future__ import annotations

import importlib.metadata as md
import subprocess
import sys
from pathlib import Path

from trainer.boot import _MISSING, TORCH_INDEX, lock_hash


def _missing(lock: str, tmp_path: Path) -> list[str]:
    path = tmp_path / "requirements.lock"
    path.write_text(lock)
    done = subprocess.run(
        [sys.executable, "-c", _MISSING, str(path)], capture_output=True, text=True, check=True
    )
    return done.stdout.splitlines()


def test_only_what_the_image_lacks_at_the_locked_version_is_installed(tmp_path: Path) -> None:
    torch = md.version("torch")  # this environment stands in for the image's Python
    peft = md.version("peft")
    lock = (
        "# a comment line\n"
        f"torch=={torch.split('+')[0]}\n"  # the image's torch, whatever its local label: reused
        f"peft=={peft}\n"
        "safetensors==0.0.1\n"  # another version than the image's: installed
        "not-a-real-package-xyz==1.0\n"  # absent: installed
        "colorama==0.0.1 ; sys_platform == 'win32'\n"  # not for this platform: skipped
    )
    assert _missing(lock, tmp_path) == ["safetensors==0.0.1", "not-a-real-package-xyz==1.0"]
    assert _missing(f"torch==0.0.{len(torch)}\n", tmp_path) == [f"torch==0.0.{len(torch)}"]
    assert TORCH_INDEX.endswith("/whl/cu130")


def test_the_environment_is_keyed_by_the_lock() -> None:
    assert lock_hash(b"torch==1\n") == lock_hash(b"torch==1\n") != lock_hash(b"torch==2\n")
    assert len(lock_hash(b"x")) == 16
