"""W3: the Python client stays in step with the server. Every route it calls exists with that
method in the OpenAPI document, and every field its typed answers name is a field of the
schema the server answers with (a renamed field fails here, not in a user's script)."""

from __future__ import annotations

import typing
from typing import Any

import pytest

from tensorant_client import ROUTES, DatasetVersion, LogPage, Project, Run
from tests.unit.test_contract_doc import openapi

ANSWERS: list[tuple[type, str, str]] = [
    (Run, "GET", "/v1/runs/{run_id}"),
    (DatasetVersion, "GET", "/v1/projects/{project_id}/datasets"),
    (Project, "GET", "/v1/projects"),
    (LogPage, "GET", "/v1/runs/{run_id}/logs"),
]


def _schema(ref_or_schema: dict[str, Any]) -> dict[str, Any]:
    spec = openapi()
    schema = ref_or_schema
    if schema.get("type") == "array":
        schema = schema["items"]
    if "$ref" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema


@pytest.mark.parametrize("name", sorted(ROUTES))
def test_every_route_the_client_calls_is_served(name: str) -> None:
    method, path = ROUTES[name]
    operations = openapi()["paths"].get(path)
    assert operations is not None, f"{name}: the server has no {path}"
    assert method.lower() in operations, f"{name}: the server has no {method} {path}"


@pytest.mark.parametrize(
    ("answer", "method", "path"), ANSWERS, ids=lambda v: getattr(v, "__name__", v)
)
def test_every_field_of_a_typed_answer_is_in_the_servers_schema(
    answer: type, method: str, path: str
) -> None:
    ok = openapi()["paths"][path][method.lower()]["responses"]["200"]
    schema = _schema(ok["content"]["application/json"]["schema"])
    fields = set(typing.get_type_hints(answer))
    assert fields <= set(schema["properties"]), fields - set(schema["properties"])
