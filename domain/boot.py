"""Why a Pod never ran the trainer (R5), read from the last lines RunPod kept of its logs.

RunPod names neither failure in a Pod's status (docs/runpod.md, What happens on each failure):
a Pod whose image cannot be pulled loops on "error pulling image ... pull access denied" with
its status still running, and a host whose driver is older than the image's CUDA refuses to
start the container with "nvidia-container-cli: requirement error: unsatisfied condition:
cuda>=13.0". Only the Pod's log says which; without such a line the trainer never started.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from domain.run import CUDA_UNAVAILABLE, IMAGE_UNAVAILABLE, TRAINER_NEVER_STARTED

# The host's driver is too old for the image (checked first: it can also stop a pull's retry)
CUDA_GATE = re.compile(
    r"unsatisfied condition:\s*cuda\s*>=|cuda driver version is insufficient", re.IGNORECASE
)
# The image cannot be pulled: unknown, private without credentials, or a registry refusing
IMAGE_PULL = re.compile(
    r"error pulling image|pull access denied|failed to pull|errimagepull|imagepullbackoff"
    r"|manifest unknown|manifest for \S+ not found|repository does not exist",
    re.IGNORECASE,
)
MAX_DETAIL = 300


def boot_failure(lines: Sequence[str]) -> tuple[str, str]:
    """(reason, detail) of a Pod that never ran the trainer, from its last log lines (oldest
    first): the latest line that names the cause as the detail; `trainer_never_started` with no
    detail when none does."""
    for pattern, reason in ((CUDA_GATE, CUDA_UNAVAILABLE), (IMAGE_PULL, IMAGE_UNAVAILABLE)):
        for line in reversed(lines):
            if pattern.search(line):
                return reason, line.strip()[:MAX_DETAIL]
    return TRAINER_NEVER_STARTED, ""
