"""GET /v2/pods/{id}/logs: Server-Sent Events with ids, source, tail, since and Last-Event-ID,
carrying the trainer's stdout (report lines included) and the system's lines; a cut stream
resumed with Last-Event-ID loses and repeats nothing."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from runpod_sandbox import Sandbox
from trainer.protocol.reports import parse_report_line

VOLUME = "nv7eu1ro4k"
BODY: dict[str, Any] = {
    "name": "tensorant-run-logs",
    "image": "tensorant/trainer:v2",
    "gpu": {"id": "NVIDIA GeForce RTX 4090", "count": 1},
    "dataCenterIds": ["EU-RO-1"],
    "mounts": {"network": [{"volumeId": VOLUME, "path": "/workspace"}]},
}


@pytest.fixture
def api(sandbox: Sandbox) -> Iterator[httpx.Client]:
    key = sandbox.credentials()["api_key"]
    with httpx.Client(
        base_url=sandbox.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=10
    ) as client:
        yield client


def launch(api: httpx.Client, run_id: str) -> str:
    answer = api.post("/v2/pods", json={**BODY, "env": {"TENSORANT_RUN_ID": run_id}})
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


def wait_result(sandbox: Sandbox, run_id: str) -> None:
    deadline = time.monotonic() + 10
    while sandbox.read_volume_file(VOLUME, f"runs/{run_id}/result.json") is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)


def read_events(
    api: httpx.Client, pod_id: str, headers: dict[str, str] | None = None, **params: Any
) -> list[tuple[str, dict[str, Any]]]:
    """(id, data) of every event until the stream ends (or is cut)."""
    events: list[tuple[str, dict[str, Any]]] = []
    event_id = ""
    with api.stream("GET", f"/v2/pods/{pod_id}/logs", params=params, headers=headers) as answer:
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/event-stream")
        for line in answer.iter_lines():
            if line.startswith("id: "):
                event_id = line[4:]
            elif line.startswith("data: "):
                events.append((event_id, json.loads(line[6:])))
    return events


def test_tail_since_source_and_last_event_id_select_the_backfill_of_a_stopped_pod(
    api: httpx.Client, sandbox: Sandbox
) -> None:
    pod_id = launch(api, "logs-1")
    wait_result(sandbox, "logs-1")
    assert api.post(f"/v2/pods/{pod_id}/action", json={"action": "stop"}).status_code == 200

    everything = read_events(api, pod_id, tail=5000)
    ids = [i for i, _ in everything]
    seqs = [int(i.rpartition("/")[2]) for i in ids]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert all(i[:20].endswith("Z") and i[10] == "T" for i in ids)  # <RFC 3339 second>/<seq>
    container = [d for _, d in everything if d["source"] == "container"]
    system = [d["line"] for _, d in everything if d["source"] == "system"]
    assert any("Pulling from tensorant/trainer" in x for x in system)
    assert system[-1].startswith("stop container")
    # The trainer's stdout: its reports as contract lines, the last one `exported`.
    reports = [parse_report_line(d["line"]) for d in container]
    assert [r.type for r in reports if r is not None][-1] == "exported"

    assert [d for _, d in read_events(api, pod_id, tail=3, source="container")] == container[-3:]
    assert read_events(api, pod_id, tail=0) == []  # live only, and the Pod writes no more
    assert [d["line"] for _, d in read_events(api, pod_id, source="system")] == system
    since = container[4]["ts"]
    assert [d for _, d in read_events(api, pod_id, since=since, source="container")] == [
        d for d in container if d["ts"] >= since
    ]
    # Last-Event-ID wins over tail and since.
    k = len(everything) // 2
    resumed = read_events(
        api, pod_id, headers={"Last-Event-ID": ids[k]}, tail=1, since="2100-01-01T00:00:00Z"
    )
    assert resumed == everything[k + 1 :]
    assert api.get(f"/v2/pods/{pod_id}/logs", params={"tail": 5001}).status_code == 422
    assert api.get("/v2/pods/nosuchpod/logs").status_code == 404


@pytest.mark.parametrize("abrupt", [False, True])
def test_a_stream_cut_three_times_and_resumed_with_last_event_id_gives_every_line_once(
    api: httpx.Client, sandbox: Sandbox, abrupt: bool
) -> None:
    sandbox.set_faults(log_stream_cut_after=4, log_stream_cuts=3, log_stream_cut_abrupt=abrupt)
    run_id = f"logs-cut-{abrupt}"
    pod_id = launch(api, run_id)

    def stop_when_done() -> None:
        wait_result(sandbox, run_id)
        api.post(f"/v2/pods/{pod_id}/action", json={"action": "stop"})

    stopper = threading.Thread(target=stop_when_done, daemon=True)
    stopper.start()
    got: list[tuple[str, dict[str, Any]]] = []
    connections = 0
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        connections += 1
        headers = {"Last-Event-ID": got[-1][0]} if got else None
        before = len(got)
        try:
            with api.stream(
                "GET", f"/v2/pods/{pod_id}/logs", params={"tail": 5000}, headers=headers
            ) as answer:
                event_id = ""
                for line in answer.iter_lines():
                    if line.startswith("id: "):
                        event_id = line[4:]
                    elif line.startswith("data: "):
                        got.append((event_id, json.loads(line[6:])))
        except httpx.HTTPError:
            assert abrupt  # only the abrupt cut drops a connection mid-response
        status = api.get(f"/v2/pods/{pod_id}").json()["status"]
        if len(got) == before and status == "EXITED" and not stopper.is_alive():
            break
    stopper.join(1)
    assert connections >= 5  # three cuts, the rest, and the check that nothing is left
    expected = [e for e in sandbox.model.pod_logs[pod_id]]
    assert [d["line"] for _, d in got] == [e[3] for e in expected]
    assert [int(i.rpartition("/")[2]) for i, _ in got] == [e[1] for e in expected]
    assert sandbox.model.faults.log_stream_cuts == 0
