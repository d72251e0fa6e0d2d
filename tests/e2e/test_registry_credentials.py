"""Acceptance 6: a baked trainer image's private registry credentials. The owner attaches them
(`PUT /v1/connections/registry`); RunPod is given them once (`/v2/registries`) and each Pod
create carries their id, on both wires (GraphQL `containerRegistryAuthId`, REST v2
`registry`); the secret appears in no event, log line, response or Pod env. Over HTTP against
a served stack whose `TENSORANT_TRAINER_IMAGE` names a private image."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from adapters.runpod import APIS
from tests.e2e.conftest import LOG, RESPONSES, Api, problem
from tests.e2e.flows import RunPodConsole, draft, launch, private_stack, ready, until

BAKED = "ghcr.io/acme/tensorant-trainer:1.0"
SECRET = "ghp_RegistryTokenNeverShown0042"


@pytest.fixture(scope="module", params=APIS)
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Api, RunPodConsole]]:
    settings = {"trainer_image": BAKED, "runpod_api": request.param}
    with private_stack(tmp_path_factory, f"registry-{request.param}", settings=settings) as s:
        yield s


def test_the_create_carries_the_registry_credentials_and_their_secret_stays_in_the_vault(
    stack: tuple[Api, RunPodConsole],
) -> None:
    api, console = stack
    responses, lines = len(RESPONSES), len(LOG.lines)
    org, config = ready(api, api.sandbox.credentials())
    body = {"username": "acme-bot", "password": SECRET}
    problem(org.member.put("/v1/connections/registry", json=body), 403, "forbidden")
    attached = org.owner.put("/v1/connections/registry", json=body)
    assert attached.status_code == 200, attached.text
    card = attached.json()
    assert card["attached"] is True and card["fingerprint"] == "…0042"
    [registered] = console.rest("GET", "/registries").json()["registries"]
    assert registered["id"] == card["registry_auth_id"]
    assert api.sandbox.model.registries[registered["id"]]["password"] == SECRET

    run = draft(org, config)
    launch(org, run["id"])
    pod = until(lambda: console.pods_of_run(run["id"]), what="the run's Pod")[0]
    assert pod["image_name"] == BAKED
    assert pod["registry_auth_id"] == card["registry_auth_id"]  # sent on the create
    assert console.rest_pod(pod["id"])["registry"] == card["registry_auth_id"]  # as RunPod shows
    assert SECRET not in str(pod["env"])
    org.member.post(f"/v1/runs/{run['id']}/cancel")

    # Attaching again replaces them: RunPod keeps one set under the organization's name.
    again = org.owner.put("/v1/connections/registry", json={**body, "password": SECRET + "x"})
    assert again.status_code == 200, again.text
    assert len(console.rest("GET", "/registries").json()["registries"]) == 1

    assert org.owner.delete("/v1/connections/registry").status_code == 204
    assert console.rest("GET", "/registries").json()["registries"] == []
    assert org.owner.delete("/v1/connections/registry").status_code == 204  # idempotent

    events = org.auditor.get("/v1/audit/events", params={"limit": 1000}).json()
    kinds = [e["type"] for e in events["events"]]
    assert kinds.count("RegistryCredentialsAttached") == 2
    assert kinds.count("RegistryCredentialsRemoved") == 1
    assert SECRET not in str(events)
    leaked = [b[:200] for b in RESPONSES[responses:] if SECRET.encode() in b]
    assert not leaked, leaked
    said = [line for line in LOG.lines[lines:] if SECRET in line]
    assert not said, said


def test_without_a_baked_image_no_registry_credentials_are_sent(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The default public image needs none: attached credentials are not sent with it."""
    with private_stack(tmp_path_factory, "registry-public") as (api, console):
        org, config = ready(api, api.sandbox.credentials())
        body = {"username": "acme-bot", "password": SECRET}
        assert org.owner.put("/v1/connections/registry", json=body).status_code == 200
        run = draft(org, config)
        launch(org, run["id"])
        pod = until(lambda: console.pods_of_run(run["id"]), what="the run's Pod")[0]
        assert pod["registry_auth_id"] is None
        org.member.post(f"/v1/runs/{run['id']}/cancel")
