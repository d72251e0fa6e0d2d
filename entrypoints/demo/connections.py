"""The guide's first steps (1–4, up to "Create a project"): connections, storage, a project."""

from __future__ import annotations

import secrets
from typing import Any

import httpx

from entrypoints.demo.walk import StepFailed, Walk, expect


def walk_connections(client: httpx.Client, creds: dict[str, Any], walk: Walk) -> None:
    """The guide's steps 1-4 (up to 'Create a project'), each checked against the contract."""

    def wrong_key() -> str:
        r = client.post("/v1/connections/runpod", json={"api_key": "rpa_" + secrets.token_hex(20)})
        return f"refused (422 invalid-key): {expect(r, 422, 'invalid-key')['detail']}"

    def read_only_key() -> str:
        r = client.post("/v1/connections/runpod", json={"api_key": creds["read_only_api_key"]})
        return f"flagged (422 read-only-key): {expect(r, 422, 'read-only-key')['detail']}"

    def right_key() -> str:
        r = client.post("/v1/connections/runpod", json={"api_key": creds["api_key"]})
        card = expect(r, 201)
        if card["status"] != "connected":
            raise StepFailed(f"card says {card['status']}")
        return (
            f"connected to {card['account_id']} with key {card['key_fingerprint']}, "
            f"balance ${card['balance']}, write permission {card['write_permission']}"
        )

    def rotate() -> str:
        r = client.post("/v1/connections/runpod/rotate", json={"api_key": creds["api_key"]})
        card = expect(r, 200)
        if not card["rotated_at"]:
            raise StepFailed("rotated_at is empty")
        return f"KeyRotated at {card['rotated_at']}, key {card['key_fingerprint']}"

    def volumes() -> str:
        found = expect(client.get("/v1/storage/volumes"), 200)["items"]
        return ", ".join(
            f"{v['id']} ({v['datacenter_id']}, {v['size_gb']} GB, "
            f"{'S3' if v['s3_api'] else 'no S3'})"
            for v in found
        )

    def non_s3() -> str:
        vol = next(v for v in creds["volumes"] if not v["s3_api"])
        r = client.put("/v1/storage", json=_volume(creds, vol["id"], vol["dataCenterId"]))
        expect(r, 422, "datacenter-without-s3")
        return f"{vol['id']} in {vol['dataCenterId']} refused (422 datacenter-without-s3)"

    def bind() -> str:
        vol = next(v for v in creds["volumes"] if v["s3_api"])
        card = expect(
            client.put("/v1/storage", json=_volume(creds, vol["id"], vol["dataCenterId"])), 200
        )
        return (
            f"storage check passed; VolumeBound {card['volume_id']} at {card['endpoint_url']}"
            f", {card['size_gb']} GB billing ${card['cost_per_month']}/month from now"
        )

    def project() -> str:
        p = expect(client.post("/v1/projects", json={"name": "support-bot"}), 201)
        return f"project {p['name']} ({p['id']})"

    def locked() -> str:
        card = expect(client.get("/v1/connections"), 200)["storage"]
        if not card["locked"]:
            raise StepFailed("the storage card is not locked")
        other = next(v for v in creds["volumes"][1:] if v["s3_api"])
        r = client.put("/v1/storage", json=_volume(creds, other["id"], other["dataCenterId"]))
        expect(r, 409, "storage-locked")
        return "the location is locked; moving it is refused (409 storage-locked)"

    for title, run in (
        ("A wrong key is refused", wrong_key),
        ("A read-only key is flagged", read_only_key),
        ("The right key connects", right_key),
        ("The key is rotated", rotate),
        ("Volumes are discovered", volumes),
        ("A datacenter without S3 is refused", non_s3),
        ("The volume is bound after its storage check", bind),
        ("A project is created", project),
        ("The storage location is locked", locked),
    ):
        walk.step(title, run)


def _volume(creds: dict[str, Any], volume_id: str, datacenter_id: str) -> dict[str, Any]:
    return {
        "kind": "runpod_volume",
        "volume_id": volume_id,
        "datacenter_id": datacenter_id,
        "access_key_id": creds["s3_access_key_id"],
        "secret_access_key": creds["s3_secret_access_key"],
    }
