"""What the training container reports (R6–R8), authenticated by a per-run token."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from application.conflicts import retry_on_conflict
from application.log import TensorantLog
from application.ports import Clock
from application.run_settings import RunSettings
from domain.errors import NotFound
from domain.run import TRAINING, Run

TRAINER = "trainer"  # the actor of every event a trainer's report causes


class InvalidTrainerToken(NotFound):
    """A token for another run, or none: the run is 'not found' (never confirm it exists)."""

    problem = "not-found"


@dataclass(frozen=True)
class TrainerCallbacks:
    log: TensorantLog
    clock: Clock
    settings: RunSettings

    def token(self, run_id: str) -> str:
        """A per-run token: an HMAC of the run id, useless for any other run or endpoint."""
        secret = self.settings.trainer_secret or b"tensorant-dev-only"
        return hmac.new(secret, f"trainer:{run_id}".encode(), hashlib.sha256).hexdigest()

    def authenticate(self, run_id: str, token: str) -> Run:
        """The run the token was minted for; any other token finds nothing."""
        if not hmac.compare_digest(self.token(run_id), token or ""):
            raise InvalidTrainerToken(f"run {run_id} not found")
        return self.log.load(Run, run_id)

    @retry_on_conflict
    def progress(self, run_id: str, token: str, phase: str) -> int:
        run = self.authenticate(run_id, token)
        at = self.clock.now()
        run.start_training(TRAINER, at)
        if phase == "exporting":
            run.start_export(TRAINER, at)
        return self.log.save_all(run) if run.pending_events else 0

    @retry_on_conflict
    def exported(
        self, run_id: str, token: str, object_key: str, sha256: str, size_bytes: int
    ) -> int:
        run = self.authenticate(run_id, token)
        run.record_adapter_exported(object_key, sha256, size_bytes, TRAINER, self.clock.now())
        return self.log.save_all(run) if run.pending_events else 0

    @retry_on_conflict
    def failed(self, run_id: str, token: str, reason: str, detail: str) -> int:
        run = self.authenticate(run_id, token)
        if run.state not in TRAINING:
            return 0
        run.record_export_failed(reason or "export_failed", detail[:500], TRAINER, self.clock.now())
        return self.log.save_all(run) if run.pending_events else 0
