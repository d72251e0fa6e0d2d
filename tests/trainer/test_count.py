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
