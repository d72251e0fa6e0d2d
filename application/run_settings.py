"""How runs are launched and cleaned up: the operator's choices the service layer is given."""

from __future__ import annotations

from dataclasses import dataclass, field

# RunPod's official PyTorch image for CUDA 13 (docs/runpod.md, The image: where the tag comes
# from); commonly cached on RunPod's hosts. Its torch is reused where the trainer's lock allows.
PUBLIC_BASE_IMAGE = "runpod/pytorch:1.0.7-cu1300-torch291-ubuntu2404"


@dataclass(frozen=True)
class RunSettings:
    # A baked trainer image (trainer/Dockerfile); empty: `base_image` plus the trainer bundle
    # and its start command (the product's default, entrypoints/settings.py)
    trainer_image: str = "tensorant/trainer:1.0"
    base_image: str = PUBLIC_BASE_IMAGE
    public_url: str = "http://127.0.0.1:8000"
    hf_endpoint: str = "https://huggingface.co"  # the Hub trainers download Hub models from
    trainer_secret: bytes = field(default=b"", repr=False)
    container_disk_gb: int = 20
    local_volume_gb: int = 50  # custom S3: local working storage on the Pod
    max_termination_attempts: int = 5
    termination_backoff_s: float = 5.0
    max_backoff_s: float = 300.0
    account_refresh_interval_s: float = 60.0  # C1: how often the reconciler re-reads balances
    max_dataset_bytes: int = 1024**3  # P1: the largest dataset an upload or registration takes
    stall_after_s: float = 600.0  # no report on any channel this long -> stalled, then stopped
    # R5: a Pod with no report on any channel this long after its creation never ran the
    # trainer and is terminated (docs/runpod.md, A first launch on real RunPod: the arithmetic)
    boot_deadline_s: float = 25 * 60.0
    # How often the clock drives every live run: the boot deadline is acted on at the last
    # tick before it, so that a Pod that never starts bills no longer than the deadline.
    reconcile_interval_s: float = 30.0
    # K2 at scale: organizations reconciled at once within a pass (a pass mostly waits on
    # RunPod and storage); each holds a run-lock connection meanwhile, so more threads need a
    # larger DB_POOL_SIZE. One keeps a small deployment's pool and RunPod quota calm.
    reconcile_threads: int = 1
    # K2 at scale: an organization with nothing live (no run, orphan or deployment) is
    # compared with RunPod once in this many passes, a share of them in each pass (by its id);
    # 1 compares every organization every pass. A Pod of ours that no record knows can only
    # appear on an organization with a run in flight, so a quiet one is swept, not watched.
    reconcile_idle_every: int = 1
    # K2 at scale (application/mailbox.py): a pass reads the mailbox of a run seen on another
    # channel within the last `mailbox_quiet_passes` intervals only once in
    # `mailbox_sweep_passes` intervals (at 30 s: quiet for a minute, swept every five)
    mailbox_quiet_passes: int = 2
    mailbox_sweep_passes: int = 10
    # R5: RunPod stops the Pod itself this long after the runtime limit (stopAfter), should
    # every worker be down then
    stop_after_grace_s: float = 10 * 60.0
    # The operator's own (baked) trainer image: the Pod pulls it with the registry credentials
    # its organization's owner attached, if any; the default public image needs none.
    baked_image: bool = False

    @property
    def mailbox_quiet_s(self) -> float:
        return self.mailbox_quiet_passes * self.reconcile_interval_s

    @property
    def mailbox_sweep_s(self) -> float:
        return self.mailbox_sweep_passes * self.reconcile_interval_s

    def termination_backoff(self, attempts: int) -> float:
        """K3: seconds to wait after `attempts` failed terminations (doubling, capped)."""
        if not attempts:
            return 0.0
        return float(min(self.max_backoff_s, self.termination_backoff_s * 2 ** (attempts - 1)))
