"""Tenant keys: one sandbox plays many RunPod users (the scale bench's organizations), each with
its own Pods and its own rate-limit windows."""

from __future__ import annotations

import httpx

from runpod_sandbox import Sandbox
from runpod_sandbox.tenants import key_for
from tests.integration.sandbox.test_rest_v2 import BODY


def test_a_tenant_key_sees_only_its_pods_and_counts_its_own_quota(sandbox: Sandbox) -> None:
    base = sandbox.credentials()["api_key"]

    def client(key: str) -> httpx.Client:
        return httpx.Client(
            base_url=sandbox.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=5
        )

    with client(key_for(base, "org-a")) as a, client(key_for(base, "org-b")) as b:
        created = a.post("/v2/pods", json=BODY)
        assert created.status_code == 201, created.text
        pod_id = created.json()["id"]
        assert [p["id"] for p in a.get("/v2/pods").json()["pods"]] == [pod_id]
        assert b.get("/v2/pods").json()["pods"] == []  # another user's Pod is invisible
        assert b.get(f"/v2/pods/{pod_id}").status_code == 404
        a.get("/v2/pods")
        left_a = a.get("/v2/pods").headers["RateLimit"]  # a's 4th call, b's 2 not counted
        assert left_a.startswith('"minute";r=596;')
    with client(base) as seeded:
        assert seeded.get("/v2/pods").json()["pods"] == []  # the seeded key is a user of its own
