"""The trainer's view of its Pod: the four contract variables plus where the disks are."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from trainer.protocol import (
    ENV_CALLBACK_URL,
    ENV_CONTAINER_DISK,
    ENV_MANIFEST,
    ENV_RUN_ID,
    ENV_RUN_TOKEN,
    ENV_WORKSPACE,
    VOLUME_MOUNT,
    check_run_id,
)


class SettingsError(ValueError):
    pass


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "")
    try:
        return float(raw) if raw else default
    except ValueError:
        raise SettingsError(f"{name} must be a number") from None


@dataclass(frozen=True)
class Tunables:
    """Timings, from TENSORANT_* variables the control plane never needs to set (tests do)."""

    heartbeat_s: float = 30.0  # status.json is rewritten at least this often
    progress_s: float = 5.0  # at most one progress report per interval (plus first and last)
    # R17: and one at least every this many optimizer steps, whichever comes first (0: a
    # twentieth of the run's steps, so a short trial draws its curve from many points)
    progress_steps: int = 0
    log_flush_s: float = 5.0  # a log chunk is written at least this often while lines wait
    checkpoint_s: float = 600.0  # a complete checkpoint at least this often
    checkpoint_steps: int = 0  # and/or every this many optimizer steps (0: off)
    callback_timeout_s: float = 3.0
    idle_after_final: bool = True  # RunPod restarts an exited container, so the trainer idles

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Tunables:
        d = cls()
        return cls(
            heartbeat_s=_float(env, "TENSORANT_HEARTBEAT_SECONDS", d.heartbeat_s),
            progress_s=_float(env, "TENSORANT_PROGRESS_SECONDS", d.progress_s),
            progress_steps=int(_float(env, "TENSORANT_PROGRESS_STEPS", d.progress_steps)),
            log_flush_s=_float(env, "TENSORANT_LOG_FLUSH_SECONDS", d.log_flush_s),
            checkpoint_s=_float(env, "TENSORANT_CHECKPOINT_SECONDS", d.checkpoint_s),
            checkpoint_steps=int(_float(env, "TENSORANT_CHECKPOINT_STEPS", d.checkpoint_steps)),
            callback_timeout_s=_float(env, "TENSORANT_CALLBACK_TIMEOUT_SECONDS", 3.0),
            idle_after_final=env.get("TENSORANT_EXIT_AFTER_FINAL", "") not in ("1", "true"),
        )


@dataclass(frozen=True)
class Settings:
    run_id: str
    token: str = field(repr=False)  # never printed, logged or stored
    callback_url: str
    manifest_url: str
    workspace: Path  # RunPod's volume mount (/workspace), or the sandbox's folder standing in
    container_disk: Path  # outside the volume: gone when the container restarts
    tunables: Tunables = field(default_factory=Tunables)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        missing = [n for n in (ENV_RUN_ID, ENV_MANIFEST) if not env.get(n)]
        if missing:
            raise SettingsError(f"missing environment: {', '.join(missing)}")
        try:
            run_id = check_run_id(env[ENV_RUN_ID])
        except ValueError as e:
            raise SettingsError(str(e)) from None
        workspace = Path(env.get(ENV_WORKSPACE) or VOLUME_MOUNT).absolute()
        disk = env.get(ENV_CONTAINER_DISK) or str(Path(tempfile.gettempdir()) / "tensorant")
        return cls(
            run_id=run_id,
            token=env.get(ENV_RUN_TOKEN, ""),
            callback_url=env.get(ENV_CALLBACK_URL, "").strip().rstrip("/"),
            manifest_url=env[ENV_MANIFEST],
            workspace=workspace,
            container_disk=Path(disk).absolute(),
            tunables=Tunables.from_env(env),
        )

    def on_volume(self, path: str) -> Path:
        """A `/workspace/...` path as seen by this process (the sandbox maps the mount); a path
        already inside TENSORANT_WORKSPACE is taken as it is."""
        p = PurePosixPath(path)
        mount = PurePosixPath(VOLUME_MOUNT)
        local = PurePosixPath(self.workspace.as_posix())
        if p.is_absolute() and local != mount and p.is_relative_to(local):
            p = mount / p.relative_to(local)
        if p.is_absolute():
            if p != mount and mount not in p.parents:
                raise SettingsError(f"{path} is not under {VOLUME_MOUNT}")
            p = p.relative_to(mount)
        return self.object_path(str(p))

    def object_path(self, key: str) -> Path:
        """A storage key as a file under the volume mount (`/workspace/a/b` is key `a/b`)."""
        parts = PurePosixPath(key).parts
        if not parts or PurePosixPath(key).is_absolute() or ".." in parts:
            raise SettingsError(f"unsafe storage key {key!r}")
        return self.workspace.joinpath(*parts)

    @property
    def work_dir(self) -> Path:
        """The trainer's own state for this run (checkpoints, final report) on the volume, so a
        restarted container finds it; not under runs/<id>/, which the control plane reads."""
        return self.workspace / ".tensorant-trainer" / self.run_id

    @property
    def hf_cache(self) -> Path:
        """Hub downloads cached on the volume: later runs on the same volume skip them (T1)."""
        return self.workspace / ".cache" / "huggingface"
