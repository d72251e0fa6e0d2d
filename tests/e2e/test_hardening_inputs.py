"""Every input gets a 4xx, never a 5xx.

The shapes the issue found, one test each; then a property test that fuzzes every route's path,
query, header and body parameters from /openapi.json with hostile values well beyond the
schema's own examples (huge numbers, calendar edges with offsets, odd digits, long text).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.e2e.conftest import Api, Org, custom_spec, problem, ready_org
from tests.e2e.flows import draft, project_with_dataset, run_config

BEYOND_64_BITS = str(2**64)
EDGES = [
    "9999-12-31T23:59:59-05:00",
    "0001-01-01T00:00:00+01:00",
    "9999-12-31T23:59:59+00:00",
    "9999-12-31",
    "0001-01-01",
    "2026-02-30",
]
HOSTILE: list[Any] = [
    BEYOND_64_BITS,
    str(2**63),
    "9" * 40,
    "9" * 5000,  # beyond Python's int-from-text limit
    "-1",
    "1e309",
    "NaN",
    "Infinity",
    "0x10",
    "1_000",
    "١٢٣",  # Arabic-Indic digits: str.isdigit() says yes
    "²",
    "",
    " ",
    "../../etc/passwd",
    "%2e%2e",
    "x" * 5000,
    "null",
    "true",
    "{}",
    "😀",
    *EDGES,
    2**64,
    -(2**64),
    1e308,
    -1,
    0,
    True,
    None,
    [],
    {},
    [BEYOND_64_BITS],
]


@pytest.fixture(scope="module")
def fuzz_org(api: Api, creds: dict[str, Any]) -> tuple[Org, dict[str, str]]:
    org = ready_org(api, creds)
    project, dataset = project_with_dataset(org, "fuzz")
    ended = draft(org, run_config(project, dataset))["id"]
    assert org.member.post(f"/v1/runs/{ended}/cancel").status_code == 202
    ids = {"project": project, "dataset": dataset, "ended": ended}
    return org, ids


# ---------------------------------------------------------------- the six shapes


def test_a_log_cursor_beyond_64_bits_is_a_4xx(fuzz_org: tuple[Org, dict[str, str]]) -> None:
    org, ids = fuzz_org
    for path in (f"/v1/runs/{ids['ended']}/logs", f"/v1/runs/{ids['ended']}/events"):
        problem(org.member.get(path, params={"after": BEYOND_64_BITS}), 422, "validation-error")
    problem(
        org.member.get(f"/v1/runs/{ids['ended']}/logs/stream", params={"after": BEYOND_64_BITS}),
        422,
        "validation-error",
    )
    problem(
        org.owner.get("/v1/audit/events", params={"after": BEYOND_64_BITS}), 422, "validation-error"
    )


@pytest.mark.parametrize("value", [BEYOND_64_BITS, "9" * 5000, "١٢٣", "-1", "abc"])
def test_a_huge_or_odd_last_event_id_is_a_4xx(
    fuzz_org: tuple[Org, dict[str, str]], value: str
) -> None:
    org, ids = fuzz_org
    r = org.member.get(
        f"/v1/runs/{ids['ended']}/logs/stream",
        headers={b"Last-Event-ID": value.encode()},
        timeout=10,
    )
    problem(r, 422, "validation-error")


@pytest.mark.parametrize("when", EDGES)
def test_calendar_edges_with_offsets_are_a_4xx(
    fuzz_org: tuple[Org, dict[str, str]], when: str
) -> None:
    org, ids = fuzz_org
    for path in ("/v1/billing/costs", "/v1/billing/export", "/v1/billing/reconciliation"):
        for params in ({"from": when}, {"to": when}, {"from": "2026-01-01", "to": when}):
            r = org.owner.get(path, params=params)
            assert r.status_code < 500, (path, params, r.text)
    r = org.owner.get(f"/v1/audit/run/{ids['ended']}", params={"as_of": when})
    assert r.status_code < 500, r.text


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("region", "us-east-1 "),
        ("region", "-us-east-1"),
        ("region", "us_east_1"),
        ("region", "a" * 64),
        ("region", "us/east"),
        ("bucket", "My_Bucket"),
        ("bucket", "ab"),
        ("bucket", "a" * 64),
        ("bucket", "bucket..name"),
        ("bucket", "192.168.0.1"),
        ("bucket", "-bucket"),
        ("bucket", "xn--bucket"),
        ("bucket", "bucket-s3alias"),
    ],
)
def test_s3_regions_and_buckets_follow_the_s3_rules(
    api: Api, creds: dict[str, Any], field: str, value: str
) -> None:
    org = api.new_org()
    spec = {**custom_spec(creds), field: value}
    problem(org.owner.put("/v1/storage", json=spec), 422, "validation-error")


# ---------------------------------------------------------------- the property test


def _operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, op)
        for path, ops in spec["paths"].items()
        for method, op in ops.items()
        if method in ("get", "put", "post", "patch", "delete")
    ]


def _body_fields(spec: dict[str, Any], op: dict[str, Any]) -> list[str] | None:
    content = op.get("requestBody", {}).get("content", {})
    media = content.get("application/json") or content.get("multipart/form-data")
    if media is None:
        return None
    schema = media.get("schema", {})
    names: set[str] = set()
    for s in [schema, *schema.get("oneOf", []), *schema.get("anyOf", [])]:
        ref = s.get("$ref")
        found = spec["components"]["schemas"][ref.rsplit("/", 1)[1]] if ref else s
        names |= set(found.get("properties", {}))
    return sorted(names)


def test_every_route_answers_fuzzed_parameters_without_a_5xx(
    api: Api, fuzz_org: tuple[Org, dict[str, str]]
) -> None:
    org, ids = fuzz_org
    spec = httpx.get(f"{api.base_url}/openapi.json").json()
    operations = _operations(spec)
    assert len(operations) >= 45
    token = {"value": org.tokens["owner"]}
    real = [*ids.values(), org.owner.get("/v1/me").json()["user_id"], "run", "organization"]
    values = st.one_of(st.sampled_from(HOSTILE), st.text(max_size=40), st.integers())
    path_values = st.one_of(
        st.sampled_from(real), st.sampled_from(HOSTILE).map(str), st.text(max_size=20)
    )
    failures: list[str] = []

    def fuzz(method: str, path: str, op: dict[str, Any]) -> None:
        params = op.get("parameters", [])
        names = re.findall(r"{(\w+)}", path)
        query = [p["name"] for p in params if p["in"] == "query"]
        headers = [p["name"] for p in params if p["in"] == "header"]
        fields = _body_fields(spec, op)

        @given(
            path_args=st.fixed_dictionaries({n: path_values for n in names}),
            query_args=st.dictionaries(st.sampled_from(query or ["x"]), values, max_size=3),
            header_args=st.dictionaries(
                st.sampled_from(headers or ["x-fuzz"]),
                st.sampled_from(HOSTILE).map(str),
                max_size=2,
            ),
            body=st.one_of(
                st.none(),
                st.dictionaries(st.sampled_from(fields or ["x"]), values, max_size=6),
                values,
            ),
        )
        @settings(
            max_examples=4, deadline=None, database=None, suppress_health_check=list(HealthCheck)
        )
        def call(
            path_args: dict[str, str],
            query_args: dict[str, Any],
            header_args: dict[str, str],
            body: Any,
        ) -> None:
            url = path
            for n, v in path_args.items():
                url = url.replace("{" + n + "}", quote(v, safe="") or "x")
            hdrs = [
                (k.encode(), (re.sub(r"[\r\n\x00]", "", v)[:200].strip() or "x").encode())
                for k, v in header_args.items()
            ]
            hdrs.append((b"Authorization", f"Bearer {token['value']}".encode()))
            q = {k: (v if isinstance(v, str) else repr(v)) for k, v in query_args.items()}
            with httpx.Client(base_url=api.base_url, timeout=15) as c:
                r = c.request(
                    method, url, params=q, headers=hdrs, json=body if body is not None else None
                )
            if path == "/v1/me/token/rotate" and r.status_code == 200:
                token["value"] = r.json()["token"]  # keep fuzzing as the owner
            assert r.status_code < 500, (
                f"{method} {url} {q} {hdrs} {body!r}: {r.status_code} {r.text[:300]}"
            )

        call()

    for method, path, op in operations:
        try:
            fuzz(method, path, op)
        except Exception as e:  # every operation's failure, then all of them
            failures.append(f"{method} {path}: {str(e)[:800]}")
    assert not failures, "\n\n".join(failures)
