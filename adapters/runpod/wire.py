"""What a wire is: one RunPod API's calls and answers, translated, one attempt each.

A wire never retries, never looks anything up on its own and never decides what an error means
for the Pod: `RunPodCompute` does, once for every wire. A wire only turns our call into RunPod's
request and RunPod's answer into our port's values or errors (adapters.runpod.errors).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from application.ports import Account, GpuOffer, NetworkVolume, PodInfo, PodSpec


class Outcome(Enum):
    """How RunPod answered a Pod action that raised no error."""

    DONE = "done"  # RunPod took it
    GONE = "gone"  # RunPod does not know the Pod (REST v2's 404)
    CONFLICT = "conflict"  # not allowed in the Pod's current status (REST v2's 409)


@dataclass(frozen=True)
class Created:
    """A create's answer; `complete` is False when it lacks price and placement (GraphQL)."""

    pod: PodInfo
    complete: bool


class Wire(Protocol):
    name: str

    def account(self, api_key: str) -> Account:
        """The account behind the key (InvalidCredentials when RunPod knows none)."""
        ...

    def volumes(self, api_key: str) -> list[NetworkVolume]: ...

    def gpus(self, api_key: str, gpu_count: int) -> list[GpuOffer]: ...

    def pods(self, api_key: str) -> list[PodInfo]:
        """Live Pods (not terminated), oldest first."""
        ...

    def pod(self, api_key: str, pod_id: str) -> PodInfo | None:
        """None when RunPod no longer knows the Pod or it is terminated."""
        ...

    def create(self, api_key: str, spec: PodSpec) -> Created: ...

    def act(self, api_key: str, pod_id: str, action: str, gpu_count: int = 1) -> Outcome:
        """`stop`, `start` or `terminate` one Pod."""
        ...

    def delete(self, api_key: str, pod_id: str) -> Outcome:
        """Remove a Pod whatever its status (REST v2's DELETE; GraphQL's terminate)."""
        ...

    def probe(self, api_key: str, pod_id: str) -> str:
        """Stop the Pod `pod_id` that cannot exist; RunPod's answer as a short text."""
        ...
