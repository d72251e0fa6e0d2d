"""How runs are launched and cleaned up: the operator's choices the service layer is given."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class RunSettings:
    trainer_image: str = "tensorant/trainer:1.0"
    public_url: str = "http://127.0.0.1:8000"
    trainer_secret: bytes = field(default=b"", repr=False)
    container_disk_gb: int = 20
    local_volume_gb: int = 50  # custom S3: local working storage on the Pod
    max_termination_attempts: int = 5
    termination_backoff_s: float = 5.0
    max_backoff_s: float = 300.0
    account_refresh_interval_s: float = 60.0  # C1: how often the reconciler re-reads balances
    max_dataset_bytes: int = 1024**3  # P1: the largest dataset an upload or registration takes
    stall_after_s: float = 600.0  # issue 13: no report on any channel this long -> stalled

    def termination_backoff(self, attempts: int) -> float:
        """K3: seconds to wait after `attempts` failed terminations (doubling, capped)."""
        if not attempts:
            return 0.0
        return float(min(self.max_backoff_s, self.termination_backoff_s * 2 ** (attempts - 1)))
