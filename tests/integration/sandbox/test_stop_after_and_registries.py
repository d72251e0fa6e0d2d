"""R5's server-side backstop and a private image's registry credentials, through the real
adapter (RunPodCompute over each wire) against the sandbox: the create carries `stopAfter` and
the registry credentials' id, and the sandbox stops the Pod itself when its clock passes
`stopAfter`, billing it no further. On REST v2, which has no `stopAfter`, the create goes
through GraphQL while GraphQL lives, and over REST v2 without the backstop once it is retired."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest

from adapters.runpod import APIS, make_compute
from application.ports import POD_STOPPED, PodSpec
from runpod_sandbox import Sandbox

A100 = "NVIDIA A100 80GB PCIe"


@pytest.fixture
def box() -> Iterator[Sandbox]:
    """A sandbox of this test's own: its clock is frozen and moved by hand."""
    with Sandbox(startup_seconds=0.1) as sb:
        sb.clock.freeze()
        yield sb


def registry(box: Sandbox, name: str = "ghcr") -> str:
    key = box.credentials()["api_key"]
    r = httpx.post(
        f"{box.base_url}/v2/registries",
        json={"name": name, "username": "bot", "password": "s3cret-token"},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert r.status_code == 201, r.text
    assert "password" not in r.json()
    return str(r.json()["id"])


def spec(box: Sandbox, name: str, **changes: object) -> PodSpec:
    base = PodSpec(
        name=name,
        image="ghcr.io/acme/trainer:1",
        gpu_type_id=A100,
        gpu_count=1,
        env={"TENSORANT_RUN_ID": name},
        datacenter_id="EU-RO-1",
        network_volume_id="nv7eu1ro4k",
        stop_after=box.clock.now() + timedelta(minutes=70),
    )
    return PodSpec(**{**base.__dict__, **changes})  # type: ignore[arg-type]


@pytest.mark.parametrize("api", APIS)
def test_the_create_asks_runpod_to_stop_the_pod_itself_and_the_sandbox_does_on_its_clock(
    box: Sandbox, api: str
) -> None:
    compute = make_compute(api, box.base_url, sleep=lambda _s: None)
    key = box.credentials()["api_key"]
    auth = registry(box)
    wanted = spec(box, f"stop-after-{api}", registry_auth_id=auth)
    pod = compute.launch_pod(key, wanted)
    made = box.model.pods[pod.id]
    assert made.stop_after == wanted.stop_after.replace(microsecond=0)  # type: ignore[union-attr]
    assert made.registry_auth_id == auth
    box.advance_clock(69 * 60)
    assert compute.get_pod(key, pod.id).status != POD_STOPPED  # type: ignore[union-attr]
    box.advance_clock(2 * 60)  # a minute past stopAfter: RunPod stopped it at stopAfter
    seen = compute.get_pod(key, pod.id)
    assert seen is not None and seen.status == POD_STOPPED
    assert "stopAfter" in made.last_status_change
    # Billed at its GPU price until stopAfter, not a second longer.
    [gpu] = [c for c in box.model.ledger.charges if c.resource_id == pod.id and c.category == "gpu"]
    assert gpu.end == made.stop_after


def test_on_rest_v2_the_create_goes_through_graphql_for_stop_after_then_without_it(
    box: Sandbox,
) -> None:
    """REST v2 has no stopAfter (RUNPOD_FACTS appendix B): while GraphQL lives it carries the
    create; once it answers 410 the Pod is created over REST v2, with `registry`, and no
    backstop."""
    compute = make_compute("rest", box.base_url, sleep=lambda _s: None)
    key = box.credentials()["api_key"]
    auth = registry(box)
    via_graphql = compute.launch_pod(key, spec(box, "rest-while-graphql-lives"))
    assert box.model.pods[via_graphql.id].stop_after is not None
    box.set_faults(graphql_retired=True)
    retired = compute.launch_pod(key, spec(box, "rest-after-graphql", registry_auth_id=auth))
    made = box.model.pods[retired.id]
    assert made.stop_after is None and made.registry_auth_id == auth
    assert retired.status != POD_STOPPED and retired.datacenter_id == "EU-RO-1"


def test_an_unknown_registry_id_is_refused_and_the_password_is_never_listed(
    box: Sandbox,
) -> None:
    key = box.credentials()["api_key"]
    auth = registry(box, "private")
    headers = {"Authorization": f"Bearer {key}"}
    listed = httpx.get(f"{box.base_url}/v2/registries", headers=headers).json()
    assert listed == {"registries": [{"id": auth, "name": "private"}]}
    assert (
        "s3cret-token"
        not in httpx.get(f"{box.base_url}/v2/registries/{auth}", headers=headers).text
    )
    body = {
        "name": "bad-registry",
        "image": "img",
        "gpu": {"id": A100, "count": 1},
        "registry": "cra_nope",
    }
    assert httpx.post(f"{box.base_url}/v2/pods", json=body, headers=headers).status_code == 400
    assert httpx.delete(f"{box.base_url}/v2/registries/{auth}", headers=headers).status_code == 204
    assert box.model.registries == {}


def test_terminate_after_makes_runpod_terminate_the_pod_itself(box: Sandbox) -> None:
    """GraphQL's `terminateAfter` (runpodctl's --terminate-after): RunPod removes the Pod then,
    whatever its status; a malformed time is refused."""
    key = box.credentials()["api_key"]
    at = (box.clock.now() + timedelta(minutes=30)).strftime("%Y-%m-%dT%H:%M:%SZ")

    def create(name: str, when: str) -> httpx.Response:
        mutation = (
            f'mutation {{ podFindAndDeployOnDemand(input: {{name: "{name}", imageName: "img", '
            f'gpuTypeId: "{A100}", cloudType: SECURE, gpuCount: 1, terminateAfter: "{when}"}}) '
            "{ id } }"
        )
        return httpx.post(
            f"{box.base_url}/graphql",
            json={"query": mutation},
            headers={"Authorization": f"Bearer {key}"},
        )

    made = create("terminate-after", at).json()["data"]["podFindAndDeployOnDemand"]["id"]
    assert "errors" in create("bad-time", "tomorrow").json()
    box.advance_clock(29 * 60)
    assert box.model.find_pod(made) is not None
    box.advance_clock(2 * 60)
    assert box.model.find_pod(made) is None
    assert box.model.pods[made].end_reason == "terminate_after"
