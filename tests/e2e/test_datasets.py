"""P1 over HTTP: bad data never rents a GPU. Each bad dataset is
refused with its documented problem (line numbers where they apply), nothing is registered, no
object is left behind by a refused upload, and the sandbox shows no Pod created; a dataset whose
object changed after registration is refused at launch with 409 `dataset-changed`."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.builders import CHATS
from tests.e2e.conftest import Api, Org, problem
from tests.e2e.flows import (
    RunPodConsole,
    draft,
    private_stack,
    ready,
    upload_dataset,
    volume_objects,
)

VOLUME = "nv7eu1ro4k"
GOOD = json.dumps(
    {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
).encode()


def _chat(*turns: tuple[str, str]) -> bytes:
    return json.dumps({"messages": [{"role": r, "content": c} for r, c in turns]}).encode()


# name -> (file, the line the first problem is on, a word of its text)
BAD_FILES: dict[str, tuple[bytes, int, str]] = {
    "not JSON": (GOOD + b"\n{not json\n" + GOOD + b"\n", 2, "key must be in double quotes"),
    "a weight other than 0 or 1": (
        b'{"messages": [{"role": "user", "content": "q"}, '
        b'{"role": "assistant", "content": "a", "weight": 0.5}]}\n',
        1,
        "weight must be 0 or 1",
    ),
    "every answer of weight 0": (
        b'{"messages": [{"role": "user", "content": "q"}, '
        b'{"role": "assistant", "content": "a", "weight": 0}]}\n',
        1,
        "no assistant message to learn from",
    ),
    "wrong shape": (GOOD + b"\n" + GOOD + b'\n{"text": "a row of another tool"}\n', 3, "messages"),
    "empty assistant content": (
        GOOD + b"\n" + _chat(("user", "hi"), ("assistant", "  ")) + b"\n",
        2,
        "assistant",
    ),
    "empty completion": (b'{"prompt": "2+2?", "completion": ""}\n', 1, "completion"),
    "no assistant turn": (_chat(("system", "be nice"), ("user", "hi")) + b"\n", 1, "assistant"),
    "invalid UTF-8": (
        GOOD + b"\n" + GOOD + b"\n" + b'{"prompt": "\xff\xfe", "completion": "x"}',
        3,
        "UTF-8",
    ),
    "an empty file": (b"", 0, "no rows"),
    "mixed formats": (GOOD + b'\n{"prompt": "a", "completion": "b"}\n', 2, "chat"),
}


@pytest.fixture(scope="module")
def world(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Api, RunPodConsole, Org, dict[str, Any], Any]]:
    with private_stack(tmp_path_factory, "datasets") as (api, console):
        creds = api.sandbox.credentials()
        org, config = ready(api, creds)
        yield api, console, org, config, volume_objects(creds)


def _upload(org: Org, pid: str, name: str, data: bytes) -> httpx.Response:
    return org.member.post(
        f"/v1/projects/{pid}/datasets",
        data={"name": name, "version": "1"},
        files={"file": (f"{name}.jsonl", data, "application/jsonl")},
    )


def _names(org: Org, pid: str) -> list[str]:
    return [d["name"] for d in org.member.get(f"/v1/projects/{pid}/datasets").json()]


def _keys(s3: Any, prefix: str) -> list[str]:
    page = s3.list_objects_v2(Bucket=VOLUME, Prefix=prefix)
    return [o["Key"] for o in page.get("Contents", [])]


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_p1_a_bad_upload_is_refused_with_line_numbers_and_nothing_is_registered_or_stored(
    world: tuple[Api, RunPodConsole, Org, dict[str, Any], Any], case: str
) -> None:
    _api, console, org, config, s3 = world
    pods = len(console.pods())
    data, line, word = BAD_FILES[case]
    pid = config["project_id"]
    name = "bad-" + hashlib.sha256(case.encode()).hexdigest()[:8]
    body = problem(_upload(org, pid, name, data), 422, "dataset-invalid")
    assert body["errors"][0]["line"] == line, body
    assert word.lower() in body["errors"][0]["problem"].lower(), body
    assert body["problem_count"] >= 1
    assert name not in _names(org, pid)
    assert _keys(s3, f"datasets/{pid}/{name}") == []  # a refused upload writes nothing
    assert len(console.pods()) == pods


def test_p1_the_first_20_problems_are_listed_with_their_lines(
    world: tuple[Api, RunPodConsole, Org, dict[str, Any], Any],
) -> None:
    _api, _console, org, config, _s3 = world
    data = b"\n".join([GOOD] + [b"[1, 2]"] * 30)
    body = problem(_upload(org, config["project_id"], "many", data), 422, "dataset-invalid")
    assert [e["line"] for e in body["errors"]] == list(range(2, 22))
    assert body["problem_count"] == 30


def test_p1_registering_a_missing_object_or_a_wrong_sha256_is_refused(
    world: tuple[Api, RunPodConsole, Org, dict[str, Any], Any],
) -> None:
    _api, console, org, config, s3 = world
    pods = len(console.pods())
    pid = config["project_id"]
    url = f"/v1/projects/{pid}/datasets"
    missing = {"name": "ghost", "version": "1", "object_key": f"datasets/{pid}/nobody.jsonl"}
    problem(org.member.post(url, json=missing), 422, "dataset-not-found")
    s3.put_object(Bucket=VOLUME, Key=f"datasets/{pid}/by-hand.jsonl", Body=CHATS)
    wrong = {"name": "by-hand", "version": "1", "object_key": f"datasets/{pid}/by-hand.jsonl"}
    body = problem(
        org.member.post(url, json={**wrong, "sha256": "ab" * 32}), 422, "dataset-sha256-mismatch"
    )
    assert hashlib.sha256(CHATS).hexdigest() in body["detail"]
    s3.put_object(Bucket=VOLUME, Key=f"datasets/{pid}/bad-by-hand.jsonl", Body=b"{not json\n")
    bad = {"name": "bad-by-hand", "version": "1", "object_key": f"datasets/{pid}/bad-by-hand.jsonl"}
    body = problem(org.member.post(url, json=bad), 422, "dataset-invalid")
    assert body["errors"] == [{"line": 1, "problem": body["errors"][0]["problem"]}]
    assert not {"ghost", "by-hand", "bad-by-hand"} & set(_names(org, pid))
    # The same object, registered with its true sha256 (or none): the server's own numbers.
    r = org.member.post(url, json={**wrong, "sha256": hashlib.sha256(CHATS).hexdigest()})
    assert r.status_code == 201, r.text
    assert (r.json()["row_count"], r.json()["size_bytes"]) == (3, len(CHATS))
    assert len(console.pods()) == pods


def test_p1_an_object_changed_after_registration_is_refused_at_launch_before_any_pod(
    world: tuple[Api, RunPodConsole, Org, dict[str, Any], Any],
) -> None:
    _api, console, org, config, s3 = world
    pid = config["project_id"]
    dv = upload_dataset(org, pid, "changing")
    run = draft(org, {**config, "dataset_version_id": dv["id"]})
    s3.put_object(Bucket=VOLUME, Key=dv["object_key"], Body=CHATS + GOOD + b"\n")
    r = org.member.post(
        f"/v1/runs/{run['id']}/launch", json={"confirm": True, "accepted_price_per_hour": "1.64"}
    )
    body = problem(r, 409, "dataset-changed")
    assert dv["object_key"] in body["detail"]
    assert org.member.get(f"/v1/runs/{run['id']}").json()["state"] == "draft"
    assert console.pods_of_run(run["id"]) == []
    # Same size, other bytes: still refused (the sha256 is recomputed, not only the size).
    s3.put_object(Bucket=VOLUME, Key=dv["object_key"], Body=CHATS.replace(b"tomorrow", b"tomorrew"))
    r = org.member.post(
        f"/v1/runs/{run['id']}/launch", json={"confirm": True, "accepted_price_per_hour": "1.64"}
    )
    problem(r, 409, "dataset-changed")
    assert console.pods_of_run(run["id"]) == []


def test_p1_an_upload_above_the_configured_limit_is_refused(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with private_stack(tmp_path_factory, "small-uploads", settings={"max_dataset_bytes": 1000}) as (
        api,
        _console,
    ):
        org, config = ready(api, api.sandbox.credentials())
        big = b"\n".join([GOOD] * 40)
        problem(_upload(org, config["project_id"], "big", big), 413, "dataset-too-large")
        assert "big" not in _names(org, config["project_id"])


OPENAI_ROW = {
    "messages": [
        {"role": "developer", "content": "Use the tools."},
        {"role": "user", "content": "Where is order 7?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "track", "arguments": '{"order": 7}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "in Lyon"},
        {"role": "assistant", "content": "It is in Lyon.", "weight": 1},
        {"role": "user", "content": "Thanks"},
        {"role": "assistant", "content": "Any time.", "weight": 0},
    ]
}


def test_p1_openai_chat_rows_with_tools_and_weights_upload_and_a_full_run_needs_ten(
    world: tuple[Api, RunPodConsole, Org, dict[str, Any], Any],
) -> None:
    _api, console, org, config, _s3 = world
    pods = len(console.pods())
    pid = config["project_id"]
    nine = upload_dataset(org, pid, "openai-9", data=(json.dumps(OPENAI_ROW) + "\n").encode() * 9)
    assert (nine["row_count"], nine["format"]) == (9, "chat")
    trial = draft(org, {**config, "dataset_version_id": nine["id"]})  # a trial may use fewer
    full = {
        **config,
        "dataset_version_id": nine["id"],
        "kind": "full",
        "baseline_run_id": trial["id"],
    }
    body = problem(org.member.post("/v1/runs", json=full), 422, "dataset-too-small")
    assert "at least 10 valid rows" in body["detail"] and "has 9" in body["detail"]
    ten = upload_dataset(org, pid, "openai-10", data=(json.dumps(OPENAI_ROW) + "\n").encode() * 10)
    r = org.member.post("/v1/runs", json={**full, "dataset_version_id": ten["id"]})
    # ten rows pass this rule; the next one (a baseline that has not succeeded) refuses
    assert r.status_code == 422 and "baseline" in r.text and "dataset-too-small" not in r.text
    assert len(console.pods()) == pods
