"""The `TokenCounter` port as a child process: `python -m trainer.count --serve` (the control
plane never imports tokenizers or transformers; the child does).

One child answers every count of this process, one JSON line in, one out (P1 at scale: a child
per draft spent seconds of CPU importing transformers for milliseconds of counting, so a
thousand drafts took many minutes of CPU). It is started on the first count, ended after
`idle_s` without one (it holds hundreds of MiB), ended and replaced after a timeout or a death,
and leaves by itself when this process is gone (its stdin closes)."""

from __future__ import annotations

import collections
import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any


class ChildTokenCounter:
    def __init__(self, hf_endpoint: str, timeout_s: float = 600.0, idle_s: float = 300.0) -> None:
        self.hf_endpoint = hf_endpoint
        self.timeout_s = timeout_s
        self.idle_s = idle_s
        self._lock = threading.Lock()  # one request at a time on the child's pipes
        self._child: subprocess.Popen[str] | None = None
        self._answers: queue.Queue[str | None] = queue.Queue()
        self._stderr: collections.deque[str] = collections.deque(maxlen=20)
        self._last_used = 0.0
        self._reaper: threading.Timer | None = None

    @property
    def pid(self) -> int | None:
        """The running child's pid (None when there is none)."""
        child = self._child
        return child.pid if child is not None and child.poll() is None else None

    def count(
        self, dataset: Path, tokenizer: str, max_seq_len: int, sha256: str, fmt: str
    ) -> dict[str, Any]:
        request = {
            "dataset": str(dataset),
            "tokenizer": tokenizer,
            "max_seq_len": max_seq_len,
            "sha256": sha256,
            "format": fmt,
        }
        with self._lock:
            child = self._running()
            assert child.stdin is not None
            try:
                child.stdin.write(json.dumps(request) + "\n")
                child.stdin.flush()
                line = self._answers.get(timeout=self.timeout_s)
            except queue.Empty:
                self._end()
                return {"unavailable": f"counting took longer than {self.timeout_s:.0f} s"}
            except OSError:
                line = None
            self._last_used = time.monotonic()
            if line is None:  # the child died under this count
                self._end()
                tail = (list(self._stderr) or ["no output"])[-1]
                return {"unavailable": f"the token counter failed: {tail[:300]}"}
            self._reap_later()
        result: dict[str, Any] = json.loads(line)
        return result

    def close(self) -> None:
        # not under the lock: a count in flight must not hold up the process's shutdown; it
        # reads the child's end as a failure
        self._end()

    # ------------------------------------------------------------ the child
    def _running(self) -> subprocess.Popen[str]:
        if self._child is not None and self._child.poll() is None:
            return self._child
        self._end()
        # no secret reaches the child: a gated catalogue model's tokenizer is unavailable
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_TOKEN", "TENSORANT_"))}
        env["HF_ENDPOINT"] = self.hf_endpoint
        env["TOKENIZERS_PARALLELISM"] = "false"
        # our own module, no shell; requests carry paths and model ids as JSON, never options
        child = subprocess.Popen(
            [sys.executable, "-m", "trainer.count", "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self._answers = queue.Queue()
        self._stderr.clear()
        assert child.stdout is not None and child.stderr is not None
        threading.Thread(target=self._pump, args=(child.stdout, self._answers), daemon=True).start()
        threading.Thread(target=self._drain, args=(child.stderr,), daemon=True).start()
        self._child = child
        return child

    @staticmethod
    def _pump(out: IO[str], answers: queue.Queue[str | None]) -> None:
        for line in out:
            if line.strip():
                answers.put(line)
        answers.put(None)  # the child ended

    def _drain(self, err: IO[str]) -> None:
        for line in err:  # a full stderr pipe would block the child
            if line.strip():
                self._stderr.append(line.rstrip())

    def _end(self) -> None:
        child, self._child = self._child, None
        if child is None:
            return
        try:
            if child.stdin is not None:
                child.stdin.close()  # the child's loop ends
            child.wait(5)
        except (OSError, subprocess.TimeoutExpired):
            child.kill()
            child.wait()

    def _reap_later(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
        self._reaper = threading.Timer(self.idle_s, self._reap)
        self._reaper.daemon = True
        self._reaper.start()

    def _reap(self) -> None:
        with self._lock:
            if time.monotonic() - self._last_used >= self.idle_s * 0.99:
                self._end()
