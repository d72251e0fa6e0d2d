"""What to do about each refusal, in the words of docs/problems.md
(tests/browser/test_console_words.py checks every entry against it)."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError

from domain.errors import TensorantError

WHAT_TO_DO: dict[str, str] = {
    "unauthenticated": "ask an owner for a new token (`admin add-member`)",
    "forbidden": "ask an owner",
    "not-found": "check the id and that you use the right organization's token",
    "validation-error": "fix the named field (values are never echoed back)",
    "invalid-key": "paste a current key from RunPod → Settings → API Keys",
    "read-only-key": (
        "create a Restricted key with read/write Pod permissions (and volume discovery)"
    ),
    "wrong-kind-of-key": "put each key in its own field",
    "runpod-unreachable": "retry later; check RunPod's status page and the server's network",
    "provider-error": "see `detail`; retry, or contact RunPod support with the time",
    "already-connected": "Replace key",
    "not-connected": "connect RunPod first",
    "provided-by-tensorant": (
        "contact your platform administrator about using your own connections"
    ),
    "key-for-other-account": "rotate within the same account, or release the Pods first",
    "pods-depend-on-key": "release them first",
    "storage-not-connected": "bind a network volume or custom S3",
    "datacenter-without-s3": "create the volume in a supported datacenter",
    "volume-not-found": "check the volume id and datacenter id (not the volume's name)",
    "storage-check-failed": (
        "check the key pair, bucket, region and the key's permissions for that step"
    ),
    "unsafe-endpoint": "use a public https endpoint",
    "unsafe-webhook-url": "use a public https URL",
    "invalid-webhook": "send a URL of at most 2000 characters and types from docs/webhooks.md",
    "storage-locked": ("rotate credentials for the same location; moving data needs a migration"),
    "volume-cannot-shrink": "volumes only grow; choose a larger size",
    "secret-unavailable": "save the connection again",
    "dataset-version-exists": "register a new version",
    "pre-ampere-gpu": "choose an Ampere-or-newer GPU",
    "no-cuda13-hosts": "pick a GPU that `GET /v1/gpus` lists as eligible",
    "gpu-unavailable": "choose another GPU or datacenter, or retry later",
    "availability-changed": "choose another GPU or datacenter, or retry later",
    "price-above-limit": "raise the limit or re-confirm the new price",
    "price-changed": "raise the limit or re-confirm the new price",
    "low-balance": "add credit in RunPod → Billing",
    "unverified-release": "confirm the deletion explicitly",
    "concurrent-change": "retry the request",
    "views-behind": "retry the GET shortly; if it persists, check the projector logs",
    "conflict": "reload the object and retry if it still applies",
    "invalid-report": "use ISO 8601 `from`/`to`, `group_by` run, resource or day",
    "invalid-hub-token": (
        "paste a current access token from huggingface.co → Settings → Access Tokens"
    ),
    "hub-unreachable": "retry later; check the Hub's status and the server's network",
    "base-model-gated": "an owner connects a token of a Hub account that accepted the licence",
    "base-model-access-denied": "accept the model's licence and wait for the approval",
}


@dataclass(frozen=True)
class Shown:
    """A refusal as a page shows it next to the field or button it concerns."""

    slug: str
    title: str
    detail: str
    what_to_do: str
    field: str | None = None
    status: int = 422
    lines: tuple[dict[str, object], ...] = ()

    @property
    def text(self) -> str:
        return f"{self.title}: {self.detail}"


def shown(exc: Exception) -> Shown:
    if isinstance(exc, TensorantError):
        step = exc.extra.get("step")
        detail = exc.detail if step is None else f"{exc.detail} (failing step: {step})"
        lines = exc.extra.get("errors")
        return Shown(
            exc.problem,
            exc.title,
            detail,
            WHAT_TO_DO.get(exc.problem, ""),
            None,
            exc.status,
            tuple(x for x in lines if isinstance(x, dict)) if isinstance(lines, list) else (),
        )
    if isinstance(exc, ValidationError):
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid"}
        where = ".".join(str(p) for p in first.get("loc", ()))
        return Shown(
            "validation-error",
            "The request is not valid",
            f"{where}: {first.get('msg', '')}",
            WHAT_TO_DO["validation-error"],
            where or None,
        )
    raise exc
