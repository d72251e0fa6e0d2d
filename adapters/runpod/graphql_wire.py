"""The GraphQL wire: RunPod's GraphQL API with the runpod 1.12 SDK's query builders.

Every call takes the organization's key as an argument; the process-wide `runpod.api_key` is
never set and the SDK functions that read it (create_pod, stop_pod, resume_pod, terminate_pod)
are never called: their mutation builders are, and the request goes out exactly as the SDK's
`run_graphql_query` sends it (URL `{base}/graphql`, its User-Agent, Bearer auth, body
`{"query": ...}` and no variables). Errors keep the SDK's order: 401 first (its
AuthenticationError), then any JSON `errors` -> errors[0].message (its QueryError), then a
non-JSON body (the SDK lets JSONDecodeError escape; we call it unavailable).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from runpod.api.mutations.pods import (
    generate_pod_deployment_mutation,
    generate_pod_resume_mutation,
    generate_pod_stop_mutation,
    generate_pod_terminate_mutation,
)
from runpod.user_agent import USER_AGENT

from adapters.runpod import graphql_mapping as m
from adapters.runpod.errors import (
    ApiRetired,
    from_graphql_message,
    retry_after,
    unavailable,
)
from adapters.runpod.http import RunPodHttp
from adapters.runpod.mapping import cuda_request
from adapters.runpod.wire import Created, Outcome
from application.errors import InvalidCredentials, ProviderError
from application.ports import Account, GpuOffer, NetworkVolume, PodInfo, PodSpec

HEADERS = {"Content-Type": "application/json", "User-Agent": USER_AGENT}
# Where the SDK's builder closes the create's input object; the fields the SDK 1.12 builder
# lacks go just before it, as runpodctl sends them: `minCudaVersion` (the builder knows only
# allowedCudaVersions), `stopAfter` (R5's backstop) and `containerRegistryAuthId`.
_INPUT_END = "\n        }\n      ) {"


def stop_after_text(at: datetime) -> str:
    """RFC 3339 in UTC, to the second, as runpodctl's --stop-after sends it."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def deploy_mutation(spec: PodSpec) -> str:
    """podFindAndDeployOnDemand as the SDK builds it, plus what it lacks: `minCudaVersion`
    (R5), `stopAfter` (RunPod stops the Pod itself then, should no worker be up) and
    `containerRegistryAuthId` (a private image's registry credentials)."""
    s = m.gql_string
    min_cuda, allowed = cuda_request(spec)
    mutation = str(
        generate_pod_deployment_mutation(
            name=s(spec.name),
            image_name=s(spec.image),
            gpu_type_id=s(spec.gpu_type_id),
            cloud_type="SECURE",
            support_public_ip=True,
            start_ssh=True,
            data_center_id=s(spec.datacenter_id) if spec.datacenter_id else None,
            gpu_count=spec.gpu_count,
            volume_in_gb=spec.volume_gb,
            container_disk_in_gb=spec.container_disk_gb,
            volume_mount_path=s(spec.volume_mount_path),
            env={s(k): s(v) for k, v in spec.env.items()},
            network_volume_id=s(spec.network_volume_id) if spec.network_volume_id else None,
            allowed_cuda_versions=[s(v) for v in allowed] if allowed else None,
            docker_args=s(spec.start_command) if spec.start_command else None,
        )
    )
    extra = ""
    if min_cuda is not None:
        extra += f', minCudaVersion: "{s(min_cuda)}"'
    if spec.stop_after is not None:
        extra += f', stopAfter: "{stop_after_text(spec.stop_after)}"'
    if spec.registry_auth_id:
        extra += f', containerRegistryAuthId: "{s(spec.registry_auth_id)}"'
    if not extra:
        return mutation
    if mutation.count(_INPUT_END) != 1:  # the SDK changed its layout: fail loudly, never guess
        raise RuntimeError("the runpod SDK's deploy mutation has an unexpected layout")
    return mutation.replace(_INPUT_END, extra + _INPUT_END)


class GraphQLWire:
    name = "graphql"

    def __init__(self, http: RunPodHttp) -> None:
        self.http = http

    def post(self, query: str, api_key: str) -> dict[str, Any]:
        """`data` of the answer to one query (the SDK's request, byte for byte)."""
        body = json.dumps({"query": query}).encode()
        response = self.http.send(
            "POST", "/graphql", api_key, headers=HEADERS, paced=False, content=body
        )
        status = response.status_code
        if status in (404, 410):
            raise ApiRetired(
                f"RunPod's GraphQL API answered HTTP {status}: it is retired (or the base URL "
                "is wrong); use TENSORANT_RUNPOD_API=rest"
            )
        try:
            answer = response.json()
        except ValueError:  # an HTML 502/429 page from the edge
            raise unavailable(
                f"RunPod answered HTTP {status} with a non-JSON body",
                api_key,
                retry_after(response),
            ) from None
        if isinstance(answer, dict) and answer.get("errors"):
            first = answer["errors"][0]
            message = str(first.get("message", "")) if isinstance(first, dict) else str(first)
            error = from_graphql_message(message, status, api_key)
            wait = retry_after(response)
            if wait is not None:
                error.extra["retry_after_s"] = wait
            raise error
        if status == 429 or status >= 500 or not isinstance(answer, dict):
            raise unavailable(f"RunPod answered HTTP {status}", api_key, retry_after(response))
        data = answer.get("data")
        if not isinstance(data, dict):
            raise unavailable(f"RunPod answered HTTP {status} without data", api_key)
        return data

    # ---------------------------------------------------------------- reads

    def account(self, api_key: str) -> Account:
        myself = self.post(m.QUERY_ACCOUNT, api_key).get("myself")
        if not myself:
            raise InvalidCredentials("RunPod knows no account for this key")
        return m.account(myself)

    def volumes(self, api_key: str) -> list[NetworkVolume]:
        myself = self.post(m.QUERY_VOLUMES, api_key).get("myself") or {}
        return [m.volume(v) for v in myself.get("networkVolumes") or []]

    def gpus(self, api_key: str, gpu_count: int) -> list[GpuOffer]:
        return m.gpu_offers(self.post(m.gpus_query(gpu_count), api_key))

    def pods(self, api_key: str) -> list[PodInfo]:
        """GraphQL exposes no creation time; RunPod (and the sandbox) list Pods oldest first."""
        myself = self.post(m.QUERY_PODS, api_key).get("myself") or {}
        return [m.pod_info(p) for p in myself.get("pods") or []]

    def pod(self, api_key: str, pod_id: str) -> PodInfo | None:
        raw = self.post(m.pod_query(pod_id), api_key).get("pod")
        return m.pod_info(raw) if raw else None

    # ---------------------------------------------------------------- writes

    def create(self, api_key: str, spec: PodSpec) -> Created:
        """The answer lacks costPerHr and placement: the caller reads the Pod back."""
        created = self.post(deploy_mutation(spec), api_key).get("podFindAndDeployOnDemand")
        if not created or not created.get("id"):
            raise ProviderError("RunPod answered the create without a Pod")
        known = {
            "name": spec.name,
            "gpuCount": spec.gpu_count,
            "networkVolumeId": spec.network_volume_id,
            "machine": {"gpuTypeId": spec.gpu_type_id, "dataCenterId": spec.datacenter_id},
        }
        return Created(m.created_pod(created, known), complete=False)

    def act(self, api_key: str, pod_id: str, action: str, gpu_count: int = 1) -> Outcome:
        pod = m.gql_string(pod_id)
        mutations = {
            "stop": lambda: generate_pod_stop_mutation(pod),
            "start": lambda: generate_pod_resume_mutation(pod, int(gpu_count)),
            "terminate": lambda: generate_pod_terminate_mutation(pod),
        }
        self.post(str(mutations[action]()), api_key)
        return Outcome.DONE

    def delete(self, api_key: str, pod_id: str) -> Outcome:
        return self.act(api_key, pod_id, "terminate")

    def probe(self, api_key: str, pod_id: str) -> str:
        data = self.post(str(generate_pod_stop_mutation(m.gql_string(pod_id))), api_key)
        return "GraphQL answered " + json.dumps(data)[:160]
