"""`python -m trainer.count` (the control plane's child process) counts a dataset's tokens as
the trainer does: the same numbers as the trainer's own "dataset tokens" log line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from tests.trainer.fixtures import TINY, TrainedRun
from trainer.protocol.reports import Log


def _count(*args: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-m", "trainer.count", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_the_count_equals_the_trainers_dataset_tokens_line(trained_run: TrainedRun) -> None:
    ws = trained_run.workspace
    line = next(
        r.text
        for r in trained_run.reports
        if isinstance(r, Log) and r.text.startswith("dataset tokens:")
    )
    found = re.fullmatch(r"dataset tokens: (\d+) in (\d+) examples, (\d+) of them trained", line)
    assert found, line
    m = ws.manifest
    counted = _count(
        str(ws.path(m.dataset.object_key)),
        str(ws.path(TINY)),
        "--max-seq-len",
        str(m.hyperparameters.max_seq_len),
        "--sha256",
        m.dataset.sha256,
        "--format",
        m.dataset.format,
    )
    assert counted["tokens"] == int(found[1]) > 0
    assert counted["examples"] == int(found[2])
    assert counted["trained_tokens"] == int(found[3]) > 0


def test_a_missing_tokenizer_is_unavailable_with_why(
    trained_run: TrainedRun, tmp_path: Path
) -> None:
    m = trained_run.workspace.manifest
    counted = _count(
        str(trained_run.workspace.path(m.dataset.object_key)),
        str(tmp_path),
        "--max-seq-len",
        "128",
        "--sha256",
        m.dataset.sha256,
    )
    assert "tokenizer does not load" in str(counted["unavailable"])


def test_one_child_answers_many_counts_is_replaced_when_it_dies_and_leaves_when_idle(
    tiny_model: Path, tmp_path: Path
) -> None:
    """P1 at scale: the control plane's counter keeps one `--serve` child for all its counts
    (a child per count spent seconds importing transformers), replaces a dead one, lets an
    idle one go, and a bad request answers `unavailable` without ending it."""
    import hashlib
    import os
    import signal
    import time

    from adapters.token_count import ChildTokenCounter
    from trainer.count import count
    from trainer.tiny import demo_rows, write_jsonl

    dataset = write_jsonl(demo_rows(12), tmp_path / "chats.jsonl")
    sha = hashlib.sha256(dataset.read_bytes()).hexdigest()
    once = count(dataset, str(tiny_model), 128, sha, "chat")  # as `python -m trainer.count`
    counter = ChildTokenCounter("http://127.0.0.1:9", idle_s=60)
    try:
        first = counter.count(dataset, str(tiny_model), 128, sha, "chat")
        pid = counter.pid
        started = time.monotonic()
        second = counter.count(dataset, str(tiny_model), 128, sha, "chat")
        warm_s = time.monotonic() - started
        assert first == second == once
        assert int(str(once["examples"])) > 0
        assert pid is not None and counter.pid == pid  # the same child answered both
        assert warm_s < 5, warm_s  # no import of transformers this time

        bad = counter.count(dataset, str(tmp_path), 128, sha, "chat")
        assert "tokenizer does not load" in str(bad["unavailable"])
        assert counter.pid == pid

        os.kill(pid, signal.SIGKILL)
        assert counter._child is not None
        counter._child.wait(10)
        counter.idle_s = 0.5  # the replacement leaves half a second after its count
        assert counter.count(dataset, str(tiny_model), 128, sha, "chat") == once
        replaced = counter._child
        assert replaced is not None and replaced.pid != pid
        replaced.wait(10)  # ended by the counter, idle
        assert counter.pid is None
    finally:
        counter.close()
    assert counter.pid is None
