"""T1/T2: the trainer finds the volume where RunPod mounts it, or where the sandbox says it is,
and never follows a manifest's path out of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.settings import Settings, SettingsError


def _settings(workspace: Path, **env: str) -> Settings:
    return Settings.from_env(
        {
            "TENSORANT_RUN_ID": "run-1",
            "TENSORANT_MANIFEST": "file:///workspace/runs/run-1/manifest.json",
            "TENSORANT_WORKSPACE": str(workspace),
            "TENSORANT_RUN_TOKEN": "secret-token",
            "TENSORANT_HEARTBEAT_SECONDS": "0.5",
            **env,
        }
    )


def test_workspace_paths_map_onto_the_emulated_mount_and_never_escape_it(tmp_path: Path) -> None:
    s = _settings(tmp_path / "vol")
    assert s.on_volume("/workspace/data/adapter.zip") == tmp_path / "vol/data/adapter.zip"
    assert s.on_volume(str(tmp_path / "vol/runs/run-1/manifest.json")) == (
        tmp_path / "vol/runs/run-1/manifest.json"
    )
    assert s.object_path("runs/run-1/status.json") == tmp_path / "vol/runs/run-1/status.json"
    for escape in ("/etc/passwd", "/workspace/../etc/passwd", f"{tmp_path}/vol/../x"):
        with pytest.raises(SettingsError):
            s.on_volume(escape)
    for key in ("../x", "/abs", "a/../../b", ""):
        with pytest.raises(SettingsError):
            s.object_path(key)
    assert s.tunables.heartbeat_s == 0.5 and "secret-token" not in repr(s)


def test_without_the_sandbox_variable_the_volume_is_runpods_mount() -> None:
    s = Settings.from_env({"TENSORANT_RUN_ID": "r", "TENSORANT_MANIFEST": "file:///workspace/m"})
    assert s.workspace == Path("/workspace") and s.hf_cache == Path("/workspace/.cache/huggingface")
    with pytest.raises(SettingsError, match="TENSORANT_MANIFEST"):
        Settings.from_env({"TENSORANT_RUN_ID": "r"})
    with pytest.raises(SettingsError, match="run id"):
        Settings.from_env({"TENSORANT_RUN_ID": "../r", "TENSORANT_MANIFEST": "x"})
