"""A trial whose callbacks point at a closed port succeeds, with its log
lines and progress on the run, through the storage mailbox on the GraphQL wire (no inbound
connection at all) and through Pod logs and the mailbox on the REST v2 wire; for a network
volume and for custom S3 (where the trainer writes its mailbox through presigned URLs)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from tests.e2e.conftest import Api, custom_spec, volume_spec
from tests.e2e.flows import RunPodConsole, draft, launch, private_stack, ready, wait_state

pytestmark = pytest.mark.slow


def _closed_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module", params=["graphql", "rest"])
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Api, RunPodConsole, str]]:
    api_kind: str = request.param
    closed = f"http://127.0.0.1:{_closed_port()}"
    with private_stack(
        tmp_path_factory, f"nocallback-{api_kind}", public_url=closed, runpod_api=api_kind
    ) as (api, console):
        yield api, console, api_kind


@pytest.mark.parametrize("storage", ["runpod_volume", "s3"])
def test_a_trial_whose_callbacks_cannot_arrive_succeeds_with_logs_and_progress(
    stack: tuple[Api, RunPodConsole, str], storage: str
) -> None:
    api, _console, api_kind = stack
    creds = api.sandbox.credentials()
    spec = volume_spec(creds) if storage == "runpod_volume" else custom_spec(creds)
    org, config = ready(api, creds, storage=spec)
    run = draft(org, config)
    launch(org, run["id"])
    done = wait_state(org, run["id"], "succeeded", timeout=90)
    assert done["adapter"]["verified_at"], done
    progress = done["progress"]
    assert progress is not None, done
    channels = {"mailbox"} if api_kind == "graphql" else {"mailbox", "pod_logs"}
    assert progress["via"] in channels, progress
    lines = org.member.get(f"/v1/runs/{run['id']}/logs", params={"limit": 1000}).json()["lines"]
    texts = [x["text"] for x in lines]
    assert texts, "the trainer's log lines reached the run without a callback"
    assert not any(t.startswith("TENSORANT-REPORT") for t in texts)
    assert len(texts) == len(set(texts)), texts  # the sandbox's trainer never repeats a line
