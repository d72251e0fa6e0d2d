"""Schemathesis against /openapi.json with an owner's token, the sandbox behind the API:
no 5xx, every response conforms to the schema (bounded examples to stay fast)."""

from __future__ import annotations

from typing import Any

import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import positive_data_acceptance

from tests.e2e.conftest import Api, ready_org

EXAMPLES_PER_OPERATION = 20
# Schema-valid bodies that a domain rule refuses (422 with the rule's problem type) are the
# contract, not a defect: keys are checked for their kind, volumes for their datacenter, ...


def test_the_api_honours_its_schema(api: Api, creds: dict[str, Any]) -> None:
    org = ready_org(api, creds)
    org.owner.post("/v1/projects", json={"name": "fuzzed"})
    headers = {"Authorization": f"Bearer {org.tokens['owner']}"}
    schema = schemathesis.openapi.from_url(f"{api.base_url}/openapi.json")
    failures: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 14
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=EXAMPLES_PER_OPERATION,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def check(case: Any) -> None:
            case.call_and_validate(headers=headers, excluded_checks=[positive_data_acceptance])

        try:
            check()
        except Exception as e:  # collect every operation's failure, then report them all
            failures.append(f"{operation.label}: {str(e)[:1500]}")
    assert not failures, "\n\n".join(failures)
