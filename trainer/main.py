"""`tensorant-trainer` / `python -m trainer`: the container's entrypoint (T1)."""

from __future__ import annotations

import argparse
import os
import sys
import time

from trainer import __version__
from trainer.settings import Settings, SettingsError
from trainer.stop import IDLE, StopSignal


def idle(stop: StopSignal) -> None:
    """RunPod restarts a container that exits, so after its final report the trainer waits
    here until it is stopped or terminated (SIGTERM exits)."""
    stop.mode = IDLE
    if stop.requested:
        return
    while True:
        time.sleep(3600)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="tensorant-trainer",
        description="Fine-tunes a LoRA adapter as the run manifest says (TENSORANT_* variables).",
    )
    parser.add_argument("--version", action="version", version=f"tensorant-trainer {__version__}")
    parser.parse_args(argv)
    # Before the Hugging Face libraries are imported: no progress bars, no tokenizer threads.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    stop = StopSignal()
    stop.install()  # first of all: a Python PID 1 ignores SIGTERM without a handler
    try:
        settings = Settings.from_env()
    except SettingsError as e:
        print(f"tensorant-trainer: {e}", file=sys.stderr, flush=True)
        idle(stop)
        return 2
    from trainer.errors import Interrupted
    from trainer.run import run

    try:
        result = run(settings, stop)
    except Interrupted:
        # SIGTERM in the first moments, before there was a reporter to say so: nothing was
        # started, so nothing is lost; a restart begins again.
        return 0
    if stop.requested or not settings.tunables.idle_after_final:
        if result.reporter is not None:
            result.reporter.close(callback_wait_s=2.0)
        return 0 if result.final.type == "exported" else 1
    idle(stop)  # the callback sender keeps delivering in the background meanwhile
    return 0
