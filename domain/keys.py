"""Telling kinds of key apart (C5) and masking them (C1); keys are stored only in the vault."""

from __future__ import annotations

import re

from domain.errors import DomainError

RUNPOD_API_KEY = "runpod_api_key"
RUNPOD_S3_ACCESS_KEY = "runpod_s3_access_key"
RUNPOD_S3_SECRET = "runpod_s3_secret"  # noqa: S105 - a kind's name, not a secret
AWS_ACCESS_KEY = "aws_access_key"
UNKNOWN = "unknown"

_KIND_NAMES = {
    RUNPOD_API_KEY: "a RunPod API key",
    RUNPOD_S3_ACCESS_KEY: "a RunPod S3 access key (user_…)",
    RUNPOD_S3_SECRET: "a RunPod S3 secret (rps_…)",
    AWS_ACCESS_KEY: "an AWS access key id",
}


def classify(value: str) -> str:
    """Guess a key's kind from its shape; RunPod's prefixes are rpa_, user_ and rps_."""
    v = value.strip()
    if v.startswith("rpa_"):
        return RUNPOD_API_KEY
    if v.startswith("user_"):
        return RUNPOD_S3_ACCESS_KEY
    if v.startswith("rps_"):
        return RUNPOD_S3_SECRET
    if re.fullmatch(r"(AKIA|ASIA)[A-Z0-9]{16}", v):
        return AWS_ACCESS_KEY
    return UNKNOWN


def fingerprint(value: str) -> str:
    """The masked form shown on cards: an ellipsis and the last four characters."""
    return "…" + value.strip()[-4:]


def ensure_compute_key(value: str) -> str:
    """C5: the RunPod API key field takes a RunPod API key, not an S3 key."""
    v = value.strip()
    if len(v) < 16 or any(c.isspace() for c in v):
        raise WrongKindOfKey("this does not look like a RunPod API key")
    kind = classify(v)
    if kind in (RUNPOD_S3_ACCESS_KEY, RUNPOD_S3_SECRET, AWS_ACCESS_KEY):
        raise WrongKindOfKey(
            f"this looks like {_KIND_NAMES[kind]}; paste it in the storage card's S3 fields, "
            "and paste the RunPod API key (Settings → API Keys) here"
        )
    return v


def ensure_s3_pair(access_key_id: str, secret_access_key: str) -> tuple[str, str]:
    """C5: the S3 fields take an S3 key pair, not the RunPod API key, and not swapped."""
    a, s = access_key_id.strip(), secret_access_key.strip()
    if not a or not s:
        raise WrongKindOfKey("both the S3 access key id and the secret are needed")
    for field, v in (("access key id", a), ("secret", s)):
        if classify(v) == RUNPOD_API_KEY:
            raise WrongKindOfKey(
                f"the S3 {field} looks like a RunPod API key; create an S3 API key in RunPod "
                "(Settings → S3 API Keys) and use its access key and secret here"
            )
    if classify(a) == RUNPOD_S3_SECRET or classify(s) == RUNPOD_S3_ACCESS_KEY:
        raise WrongKindOfKey("the S3 access key id and secret look swapped")
    return a, s


class WrongKindOfKey(DomainError):
    problem = "wrong-kind-of-key"
    title = "A key was pasted in the wrong field"
