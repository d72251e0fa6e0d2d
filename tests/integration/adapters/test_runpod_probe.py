"""C1, C3: the key check's write probe does not guess. RunPod's answers to stopping a Pod that
cannot exist are not documented, so only a definite unauthorized (GraphQL "Unauthorized") or
forbidden (REST v2 403) refuses the key as read-only; "not found", "something went wrong", any
unknown text and an error after retries connect it (write permission unproven) and the answer
is kept for auditors, without key material. Both wires, against a scripted RunPod."""

from __future__ import annotations

import pytest

from adapters.runpod import RunPodCompute, make_compute
from application.errors import InsufficientPermissions
from tests.integration.adapters.runpod_stub import (
    HTML_502,
    KEY,
    Answer,
    StubRunPod,
    data,
    gql_error,
    problem,
)

MYSELF = {"myself": {"id": "user_1", "clientBalance": 10, "currentSpendPerHr": 0}}
GRAPHQL_PROBE = "podStop"
REST_PROBE = "POST /v2/pods/tensorant-permission-probe/action"

UNPROVEN = [
    ("graphql", gql_error("Pod not found."), "refused: Pod not found.", 1),
    (
        "graphql",
        gql_error("Something went wrong. Please try again later or contact support."),
        "no answer after 4 attempts",
        4,
    ),
    ("graphql", gql_error("Zorblax quota of this key is spent"), "Zorblax quota", 1),
    ("graphql", Answer(502, HTML_502), "non-JSON", 4),
    ("graphql", gql_error(f"no pod for key {KEY}"), "no pod for key [redacted]", 1),
    ("rest", problem(404, "pod not found"), "HTTP 404 pod not found", 1),
    ("rest", problem(500, "Something went wrong."), "no answer after 4 attempts", 4),
    ("rest", problem(400, "Zorblax quota of this key is spent"), "Zorblax quota", 1),
    ("rest", problem(409, "cannot stop a pod in status EXITED"), "HTTP 409", 1),
]


def adapter(api: str, stub: StubRunPod, slept: list[float]) -> RunPodCompute:
    stub.on("query account", data(MYSELF))
    stub.on("GET /v2/pods ", Answer(200, {"pods": []}))
    return make_compute(api, stub.base_url, sleep=slept.append, jitter=lambda: 0.0, timeout_s=2)


@pytest.mark.parametrize(("api", "answer", "recorded", "attempts"), UNPROVEN)
def test_an_answer_other_than_unauthorized_connects_the_key_and_is_recorded(
    stub: StubRunPod, slept: list[float], api: str, answer: Answer, recorded: str, attempts: int
) -> None:
    stub.on(GRAPHQL_PROBE if api == "graphql" else REST_PROBE, answer)
    account = adapter(api, stub, slept).check_account(KEY)
    assert account.id == "user_1"
    assert account.probe_answer is not None
    assert account.probe_answer.startswith(f"{api}: ")
    assert recorded in account.probe_answer
    assert KEY not in account.probe_answer and KEY[-12:] not in account.probe_answer
    assert stub.count(GRAPHQL_PROBE if api == "graphql" else REST_PROBE) == attempts


@pytest.mark.parametrize(
    ("api", "answer"),
    [
        ("graphql", gql_error("Unauthorized")),
        ("rest", problem(403, "access denied")),
    ],
)
def test_only_a_definite_unauthorized_or_forbidden_flags_the_key_read_only(
    stub: StubRunPod, slept: list[float], api: str, answer: Answer
) -> None:
    stub.on(GRAPHQL_PROBE if api == "graphql" else REST_PROBE, answer)
    with pytest.raises(InsufficientPermissions, match="read-only") as caught:
        adapter(api, stub, slept).check_account(KEY)
    assert KEY not in str(caught.value)
    assert stub.count(GRAPHQL_PROBE if api == "graphql" else REST_PROBE) == 1  # not retried
