"""P1: a dataset version's token counts for the base model a run is drafted with.

The tokens are counted by the trainer's own encoder (the same numbers as its "dataset tokens"
log line), in a child process (`python -m trainer.count --serve`, behind the `TokenCounter`
port): the control plane never imports tokenizers or transformers. A draft of the run is driven
by the worker (the relay sends every Run event); the reactor hands a draft here, and the count
runs on this service's own thread, so no run's drive waits for it. The result is a
`DatasetTokensCounted` event of the Project, cached per (base model, max_seq_len): a second
draft counts nothing again.

A storage model's tokenizer files are read from the organization's storage (its weights are
not); a catalogue model's tokenizer comes from the Hub (`hf_endpoint`). A tokenizer that cannot
be had or loaded is recorded as "unavailable" with why; a storage that cannot be read records
nothing (the next drive of the draft tries again)."""

from __future__ import annotations

import logging
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from application.conflicts import retry_on_conflict
from application.log import TensorantLog
from application.ports import Clock, ObjectStore
from application.storage import StorageService
from domain.base_models import storage_folder
from domain.memory import DEFAULT_SEQ_LEN
from domain.run import DRAFT, Run

log = logging.getLogger("tensorant.token_counts")
ACTOR = "tensorant"  # the server records the count, not a member
# what a tokenizer is read from; a model's weights are never downloaded to count tokens
_WEIGHTS = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack", ".onnx")
MAX_TOKENIZER_FILE = 64 * 1024 * 1024

Key = tuple[str, str, str, str, int]  # (org, project, dataset version, base model, max_seq_len)


class TokenCounter(Protocol):
    def count(
        self, dataset: Path, tokenizer: str, max_seq_len: int, sha256: str, fmt: str
    ) -> dict[str, Any]:
        """`{"tokens", "trained_tokens", "examples"}` or `{"unavailable": why}`; `tokenizer`
        is a folder, or a Hub model id."""
        ...

    def close(self) -> None:
        """Release what counting holds (a child process)."""
        ...


@dataclass
class TokenCounts:
    log: TensorantLog
    objects: ObjectStore
    storage: StorageService
    clock: Clock
    counter: TokenCounter
    _pending: set[Key] = field(default_factory=set, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _closed: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _pool: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="token-counts"),
        init=False,
        repr=False,
    )

    def after_draft(self, run: Run) -> None:
        """A draft's dataset is counted for its base model unless it is already (idempotent:
        a repeated drive, or a second draft, queues nothing)."""
        if run.state != DRAFT or self._closed.is_set():
            return
        c = run.config
        max_seq_len = int((c.hyperparameters or {}).get("max_seq_len", DEFAULT_SEQ_LEN))
        key: Key = (
            run.org_id,
            str(c.project_id),
            str(c.dataset_version_id),
            str(c.base_model),
            max_seq_len,
        )
        project = self.log.project(run.org_id, key[1])
        if not project.token_count_needed(key[2], key[3], max_seq_len):
            return
        with self._lock:
            if key in self._pending:
                return
            self._pending.add(key)
        self._pool.submit(self._count, key)

    def _count(self, key: Key) -> None:
        try:
            result = self._measure(key)
            if result is not None and not self._closed.is_set():
                self._record(key, result)
        except Exception:  # the next drive of a draft tries again
            if self._closed.is_set():  # the log closed under it: the process is ending
                return
            log.exception("counting the tokens of dataset %s for %s failed", key[2], key[3])
        finally:
            with self._lock:
                self._pending.discard(key)

    def _measure(self, key: Key) -> dict[str, Any] | None:
        org_id, project_id, dv_id, base_model, max_seq_len = key
        dataset = self.log.project(org_id, project_id).datasets[dv_id]
        loc, creds = self.storage.location(org_id)
        with tempfile.TemporaryDirectory(prefix="tensorant-tokens-") as tmp:
            path = Path(tmp) / "dataset.jsonl"
            with path.open("wb") as f:
                if not self.objects.download(loc, creds, dataset["object_key"], f):
                    return {"unavailable": "the dataset's object is not in the storage"}
            folder = storage_folder(base_model)
            tokenizer = base_model
            if folder is not None:
                where = Path(tmp) / "tokenizer"
                where.mkdir()
                files = [
                    o
                    for o in self.objects.list(loc, creds, f"{folder}/")
                    if "/" not in o.key.removeprefix(f"{folder}/")
                    and not o.key.endswith(_WEIGHTS)
                    and o.size <= MAX_TOKENIZER_FILE
                ]
                if not files:
                    return {"unavailable": f"no tokenizer files in the storage under {folder}/"}
                for o in files:
                    with (where / o.key.rsplit("/", 1)[-1]).open("wb") as f:
                        self.objects.download(loc, creds, o.key, f)
                tokenizer = str(where)
            return self.counter.count(
                path, tokenizer, max_seq_len, dataset["sha256"], dataset["format"]
            )

    @retry_on_conflict
    def _record(self, key: Key, result: dict[str, Any]) -> None:
        org_id, project_id, dv_id, base_model, max_seq_len = key
        project = self.log.project(org_id, project_id)
        unavailable = result.get("unavailable")
        counts = None if unavailable is not None else result
        if project.record_token_count(
            dv_id,
            base_model,
            max_seq_len,
            counts,
            None if unavailable is None else str(unavailable)[:500],
            ACTOR,
            self.clock.now(),
        ):
            self.log.save_all(project)

    def close(self) -> None:
        self._closed.set()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.counter.close()
