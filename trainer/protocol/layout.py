"""Where things are: the Pod's environment, the mailbox keys on storage, the failure codes (T1)."""

from __future__ import annotations

import re
import urllib.parse

# The Pod's environment, set by the control plane; everything else is in the manifest.
ENV_RUN_ID = "TENSORANT_RUN_ID"
ENV_RUN_TOKEN = "TENSORANT_RUN_TOKEN"  # noqa: S105 - the variable's name, not a secret
ENV_CALLBACK_URL = "TENSORANT_CALLBACK_URL"
ENV_MANIFEST = "TENSORANT_MANIFEST"
POD_ENV = (ENV_RUN_ID, ENV_RUN_TOKEN, ENV_CALLBACK_URL, ENV_MANIFEST)
# Set only where the Pod is emulated (the sandbox): the local folder that stands for RunPod's
# volume mount, and the one that stands for the container disk.
ENV_WORKSPACE = "TENSORANT_WORKSPACE"
ENV_CONTAINER_DISK = "TENSORANT_CONTAINER_DISK"
# ... and the URL of the emulated RunPod's clock (GET: {"now": ISO 8601, "frozen": bool}), which
# tests move forward: the run's deadline is judged on it instead of the machine's clock.
ENV_CLOCK_URL = "TENSORANT_CLOCK_URL"

# A run on a gated Hub model asks for the organization's Hugging Face token here (GET under
# /v1/trainer/runs/<id>/, with its run token): it is never in the Pod's environment, which any
# key that can read the RunPod account can read, nor in the manifest on storage.
HUB_TOKEN_CALLBACK = "hub-token"  # noqa: S105 - a path segment, not a secret

VOLUME_MOUNT = "/workspace"  # where RunPod mounts the network volume (or the Pod's volume disk)
RECOVERY_PATH = "/workspace/data/adapter.zip"  # the guide's recovery path (R9, R10)

_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def check_run_id(run_id: str) -> str:
    """A run id is one safe path segment (it names a folder on storage)."""
    if not _RUN_ID.match(run_id) or ".." in run_id:
        raise ValueError(f"not a valid run id: {run_id!r}")
    return run_id


def run_prefix(run_id: str) -> str:
    return f"runs/{check_run_id(run_id)}/"


def manifest_key(run_id: str) -> str:
    return run_prefix(run_id) + "manifest.json"


def adapter_key(run_id: str) -> str:
    return run_prefix(run_id) + "adapter.zip"


def recovery_key(run_id: str) -> str:
    """Where an adapter recovered from the Pod (R10) is stored."""
    return run_prefix(run_id) + "recovered/adapter.zip"


def verified_key(run_id: str, sha256: str) -> str:
    """Where a verified adapter is pinned (N1): named by its content, written only by the
    control plane, never by a URL a Pod holds."""
    return f"{run_prefix(run_id)}verified/{sha256}.zip"


def own_adapter_keys(run_id: str) -> frozenset[str]:
    """The only objects a run's `exported` report may name (N2): its adapter or recovery key."""
    return frozenset({adapter_key(run_id), recovery_key(run_id)})


def status_key(run_id: str) -> str:
    return run_prefix(run_id) + "status.json"


def result_key(run_id: str) -> str:
    return run_prefix(run_id) + "result.json"


def log_prefix(run_id: str) -> str:
    return run_prefix(run_id) + "logs/"


def log_chunk_key(run_id: str, boot: str, first_seq: int) -> str:
    """`logs/<boot>-<first seq>.jsonl`; the seq is zero-padded so a listing sorts in order."""
    return f"{log_prefix(run_id)}{boot}-{first_seq:08d}.jsonl"


def pooled_log_key(run_id: str, index: int) -> str:
    """The key of the index-th presigned log chunk URL (custom S3: keys are fixed at launch)."""
    return f"{log_prefix(run_id)}pool-{index:05d}.jsonl"


def volume_manifest_url(run_id: str, mount: str = VOLUME_MOUNT) -> str:
    """TENSORANT_MANIFEST for a network volume: the manifest read through the Pod's mount."""
    return "file://" + mount.rstrip("/") + "/" + manifest_key(run_id)


def redact_url(url: str) -> str:
    """A URL without its query or user info: presigned signatures never reach a log."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))


class FailureReason:
    """Stable reason codes of a `failed` report."""

    MANIFEST_INVALID = "manifest_invalid"
    DATASET_UNAVAILABLE = "dataset_unavailable"
    DATASET_CHANGED = "dataset_changed"  # sha256 differs from the one checked at registration
    DATASET_INVALID = "dataset_invalid"
    BASE_MODEL_UNAVAILABLE = "base_model_unavailable"
    OUT_OF_MEMORY = "out_of_memory"
    TRAINING_DIVERGED = "training_diverged"  # the loss became NaN or infinite
    EXPORT_FAILED = "export_failed"
    INTERRUPTED = "interrupted"  # SIGTERM before there was anything to save
    INTERNAL_ERROR = "internal_error"


FAILURE_REASONS = frozenset(
    v for k, v in vars(FailureReason).items() if k.isupper() and isinstance(v, str)
)
