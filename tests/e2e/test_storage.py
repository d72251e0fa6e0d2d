"""Storage over HTTP: discovery, binding with the check, custom S3, lock, rotate, resize (S2-S7)."""

from __future__ import annotations

from typing import Any

from tests.e2e.conftest import Api, Org, bind_volume, connect, custom_spec, problem, volume_spec


def test_volumes_are_discovered_with_the_compute_key_S2(org: Org, creds: dict[str, Any]) -> None:
    problem(org.owner.get("/v1/storage/volumes"), 409, "not-connected")
    connect(org, creds)
    volumes = {v["id"]: v for v in org.owner.get("/v1/storage/volumes").json()}
    assert volumes["nv7eu1ro4k"] == {
        "id": "nv7eu1ro4k",
        "name": "tensorant-eu-ro-1",
        "size_gb": 100,
        "datacenter_id": "EU-RO-1",
        "s3_api": True,
    }
    assert volumes["nv5camtl9p"]["s3_api"] is False


def test_binding_a_volume_runs_the_check_and_shows_the_monthly_cost_S2(
    org: Org, creds: dict[str, Any]
) -> None:
    connect(org, creds)
    card = bind_volume(org, creds)
    assert card["status"] == "connected"
    assert card["kind"] == "runpod_volume"
    assert card["volume_id"] == card["bucket"] == "nv7eu1ro4k"
    assert card["datacenter_id"] == card["region"] == "EU-RO-1"
    assert card["endpoint_url"].endswith("/eu-ro-1")
    assert card["size_gb"] == 100
    assert card["cost_per_month"] == "7.00"  # 100 GB x $0.07
    assert card["access_key_fingerprint"] == "…" + creds["s3_access_key_id"][-4:]
    assert card["locked"] is False
    assert org.finance.get("/v1/connections").json()["storage"] == card


def test_a_volume_entered_by_hand_binds_without_the_compute_key_S2(
    org: Org, creds: dict[str, Any]
) -> None:
    r = org.owner.put("/v1/storage", json=volume_spec(creds, "nv2usks8m3", "us-ks-2", size_gb=50))
    assert r.status_code == 200, r.text
    assert r.json()["datacenter_id"] == "US-KS-2"
    assert r.json()["cost_per_month"] == "3.50"


def test_a_datacenter_without_s3_is_refused_with_the_supported_ones_S3(
    org: Org, creds: dict[str, Any]
) -> None:
    connect(org, creds)
    r = org.owner.put("/v1/storage", json=volume_spec(creds, "nv5camtl9p", "CA-MTL-1"))
    body = problem(r, 422, "datacenter-without-s3")
    assert "EU-RO-1" in body["supported"]
    assert org.owner.get("/v1/connections").json()["storage"]["status"] == "not_connected"


def test_a_failing_storage_check_names_the_step_S2(org: Org, creds: dict[str, Any]) -> None:
    connect(org, creds)
    wrong = volume_spec(creds, secret_access_key="rps_" + "W" * 40)
    body = problem(org.owner.put("/v1/storage", json=wrong), 422, "storage-check-failed")
    assert body["step"]
    missing = volume_spec(creds, "nvdoesnotexist", "EU-RO-1")
    r = org.owner.put("/v1/storage", json=missing)
    assert r.status_code == 422
    assert r.json()["type"].rsplit("/", 1)[1] in ("volume-not-found", "storage-check-failed")
    assert org.owner.get("/v1/connections").json()["storage"]["status"] == "not_connected"


def test_custom_s3_binds_after_the_same_check_S4(org: Org, creds: dict[str, Any]) -> None:
    r = org.owner.put("/v1/storage", json=custom_spec(creds))
    assert r.status_code == 200, r.text
    card = r.json()
    assert card["kind"] == "s3"
    assert card["bucket"] == creds["custom_s3"]["bucket"]
    assert card["cost_per_month"] is None
    assert card["volume_id"] is None


def test_unsafe_custom_endpoints_are_refused_S4(org: Org, creds: dict[str, Any]) -> None:
    for url in ("http://169.254.169.254/latest", "https://127.0.0.1:9000", "http://example.com"):
        problem(
            org.owner.put("/v1/storage", json=custom_spec(creds, endpoint_url=url)),
            422,
            "unsafe-endpoint",
        )


def test_the_sandboxs_admin_routes_are_not_an_allowed_endpoint(
    api: Api, org: Org, creds: dict[str, Any]
) -> None:
    """Only the sandbox's S3 front is allow-listed, not its admin routes (which set
    the clock, faults and balance), however the path is spelled."""
    base = api.sandbox.base_url
    s3_front = creds["s3_endpoint_template"].split("{dc}")[0]
    for url in (
        f"{base}/_sandbox",
        f"{base}/_sandbox/clock",
        f"{base}/",
        f"{s3_front}../_sandbox",
        f"{s3_front}%2e%2e/_sandbox",
    ):
        problem(
            org.owner.put("/v1/storage", json=custom_spec(creds, endpoint_url=url)),
            422,
            "unsafe-endpoint",
        )
    assert org.owner.put("/v1/storage", json=custom_spec(creds)).status_code == 200


def test_the_api_key_in_an_s3_field_is_named_C5(org: Org, creds: dict[str, Any]) -> None:
    r = org.owner.put("/v1/storage", json=volume_spec(creds, access_key_id=creds["api_key"]))
    problem(r, 422, "wrong-kind-of-key")
    assert creds["api_key"] not in r.text
    r = org.owner.post(
        "/v1/storage/rotate",
        json={
            "access_key_id": creds["s3_secret_access_key"],
            "secret_access_key": creds["s3_access_key_id"],
        },
    )
    assert r.status_code in (409, 422)


def test_the_location_locks_once_a_project_exists_S5(api: Api, creds: dict[str, Any]) -> None:
    org = api.new_org()
    connect(org, creds)
    bind_volume(org, creds)
    assert org.member.post("/v1/projects", json={"name": "first"}).status_code == 201
    assert org.owner.get("/v1/connections").json()["storage"]["locked"] is True
    body = problem(
        org.owner.put("/v1/storage", json=volume_spec(creds, "nv2usks8m3", "US-KS-2")),
        409,
        "storage-locked",
    )
    assert "migration" in body["detail"]
    problem(org.owner.put("/v1/storage", json=custom_spec(creds)), 409, "storage-locked")
    # The same location with new credentials is a rotation, allowed.
    r = org.owner.put("/v1/storage", json=volume_spec(creds))
    assert r.status_code == 200, r.text
    r = org.owner.post(
        "/v1/storage/rotate",
        json={
            "access_key_id": creds["s3_access_key_id"],
            "secret_access_key": creds["s3_secret_access_key"],
        },
    )
    assert r.status_code == 200, r.text
    assert r.json()["locked"] is True
    assert r.json()["volume_id"] == "nv7eu1ro4k"


def test_rotating_storage_credentials_checks_them_S5(org: Org, creds: dict[str, Any]) -> None:
    problem(
        org.owner.post(
            "/v1/storage/rotate",
            json={
                "access_key_id": creds["s3_access_key_id"],
                "secret_access_key": creds["s3_secret_access_key"],
            },
        ),
        409,
        "storage-not-connected",
    )
    connect(org, creds)
    bind_volume(org, creds)
    r = org.owner.post(
        "/v1/storage/rotate",
        json={"access_key_id": creds["s3_access_key_id"], "secret_access_key": "rps_" + "X" * 40},
    )
    problem(r, 422, "storage-check-failed")


def test_a_volume_grows_at_runpod_and_never_shrinks_S6(
    api: Api, org: Org, creds: dict[str, Any]
) -> None:
    problem(
        org.owner.post("/v1/storage/resize", json={"size_gb": 10}), 409, "storage-not-connected"
    )
    connect(org, creds)
    bind_volume(org, creds)
    volume = api.sandbox.model.volumes["nv7eu1ro4k"]
    try:
        r = org.owner.post("/v1/storage/resize", json={"size_gb": 200})
        assert r.status_code == 200, r.text
        assert r.json()["size_gb"] == 200
        assert r.json()["cost_per_month"] == "14.00"
        assert volume.size_gb == 200  # RunPod bills the new size: it was resized there
        problem(
            org.owner.post("/v1/storage/resize", json={"size_gb": 150}),
            422,
            "volume-cannot-shrink",
        )
        assert org.owner.get("/v1/connections").json()["storage"]["size_gb"] == 200
        assert volume.size_gb == 200
    finally:
        volume.size_gb = 100  # the session's sandbox is shared by the other tests


def test_custom_s3_has_no_size_to_change_S6(org: Org, creds: dict[str, Any]) -> None:
    assert org.owner.put("/v1/storage", json=custom_spec(creds)).status_code == 200
    problem(org.owner.post("/v1/storage/resize", json={"size_gb": 500}), 422, "invalid-storage")


def test_only_owners_manage_storage_A2(org: Org, creds: dict[str, Any]) -> None:
    for role in ("member", "auditor", "finance"):
        c = org.clients[role]
        problem(c.get("/v1/storage/volumes"), 403, "forbidden")
        problem(c.put("/v1/storage", json=custom_spec(creds)), 403, "forbidden")
        problem(
            c.post("/v1/storage/rotate", json={"access_key_id": "a", "secret_access_key": "b"}),
            403,
            "forbidden",
        )
        problem(c.post("/v1/storage/resize", json={"size_gb": 500}), 403, "forbidden")
