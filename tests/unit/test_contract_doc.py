"""docs/contract.md cannot go stale: its route tables name exactly the routes of the API document
(`/openapi.json`) and only fields those routes have; its schema tables and its tables of the
trainer's contract are generated from the API document and from `trainer.protocol`; its run
states are the domain's.

After changing a route, a schema or the trainer's protocol, update the hand-written rows and
regenerate the tables: `uv run python -m tests.unit.test_contract_doc --write`.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

from api.app import create_app
from domain.run import STATES
from trainer import protocol
from trainer.protocol.reports import REPORT_TYPES

CONTRACT = Path(__file__).resolve().parents[2] / "docs" / "contract.md"
VERBS = ("GET", "POST", "PUT", "PATCH", "DELETE")
ROUTE = re.compile(r"\b(GET|POST|PUT|PATCH|DELETE) (/v1/[^\s`?,]*|/healthz|/readyz)")
BLOCK = re.compile(r"(<!-- generated: ([a-z-]+) -->\n)(.*?)(<!-- end generated -->)", re.S)
FIELD = re.compile(r"^[a-z_][a-z0-9_]*$")


@cache
def openapi() -> dict[str, Any]:
    spec: dict[str, Any] = create_app(lambda: None).openapi()  # type: ignore[arg-type,return-value]
    return spec


def same_path(path: str) -> str:
    """`/v1/runs/{id}` and `/v1/runs/{run_id}` are one path: the parameters' names are not."""
    return re.sub(r"\{[^}]*\}", "{}", path.rstrip("/"))


def api_routes() -> set[tuple[str, str]]:
    return {
        (verb.upper(), same_path(path))
        for path, operations in openapi()["paths"].items()
        for verb in operations
        if verb.upper() in VERBS
    }


def documented_routes(text: str) -> set[tuple[str, str]]:
    return {(verb, same_path(path)) for verb, path in ROUTE.findall(text)}


# ---------------------------------------------------------------- fields a route row names
def braces(text: str) -> Iterator[str]:
    """Each outermost `{...}` of `text`, without its braces."""
    depth, start = 0, 0
    for i, ch in enumerate(text):
        if ch == "{":
            depth += 1
            if depth == 1:
                start = i + 1
        elif ch == "}" and depth:
            depth -= 1
            if depth == 0:
                yield text[start:i]


def named_fields(inside: str) -> set[str]:
    """The field names of a `{a, b?: value, c: {d}, e: [{f}]}` (values and `...` left out)."""
    names: set[str] = set()
    depth, item = 0, ""
    for ch in inside + ",":
        if ch == "," and depth == 0:
            name, _, value = item.partition(":")
            name = name.strip().rstrip("?")
            if FIELD.match(name):
                names.add(name)
            for nested in braces(value):
                names |= named_fields(nested)
            item = ""
            continue
        if ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        item += ch
    return names


def schema_fields(schema: Any) -> set[str] | None:
    """Every property name anywhere in `schema` ($refs followed); None when it names none (a
    free-form object, a file)."""
    found: set[str] = set()
    seen: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref not in seen:
                seen.add(ref)
                walk(openapi()["components"]["schemas"][ref.rsplit("/", 1)[1]])
            found.update(node.get("properties", {}))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return found or None


def route_fields(verb: str, path: str) -> set[str] | None:
    """The fields of a route's request body and answers, or None when neither names any."""
    for api_path, operations in openapi()["paths"].items():
        if same_path(api_path) == path and verb.lower() in operations:
            op = operations[verb.lower()]
            parts = [op.get("requestBody", {})]
            parts += [r for code, r in op["responses"].items() if code.startswith("2")]
            return schema_fields(parts)
    return None


def unknown_fields(text: str) -> dict[str, set[str]]:
    """Per route row of `text`, the fields it names that its route does not have."""
    unknown: dict[str, set[str]] = {}
    for line in text.splitlines():
        cells = line.strip().strip("|").split("|") if line.startswith("| ") else []
        routes = documented_routes(cells[0]) if cells else set()
        has: set[str] = set()
        for verb, path in routes:
            has |= route_fields(verb, path) or set()
        if not has:
            continue  # not a route row, or only free-form answers: nothing to check against
        quoted = re.findall(r"`([^`]*)`", line)  # a path's own `{id}` is not in backticks
        named = {name for q in quoted for inside in braces(q) for name in named_fields(inside)}
        if named - has:
            unknown[cells[0].strip()] = named - has
    return unknown


# ---------------------------------------------------------------- the generated tables
def _fields(schema: dict[str, Any]) -> str:
    required = set(schema.get("required", ()))
    names = [n if n in required else f"{n}?" for n in schema.get("properties", {})]
    return ", ".join(f"`{n}`" for n in names) or "(no named fields)"


def schema_tables() -> str:
    rows = [
        f"| `{name}` | {_fields(schema)} |"
        for name, schema in sorted(openapi()["components"]["schemas"].items())
    ]
    return "| schema | fields (`?`: optional) |\n|---|---|\n" + "\n".join(rows) + "\n"


def _dataclass_fields(cls: type) -> str:
    out = []
    for f in dataclasses.fields(cls):
        optional = f.default is None or f.default is not dataclasses.MISSING
        optional = optional or f.default_factory is not dataclasses.MISSING
        out.append(f"`{f.name}{'?' if optional else ''}`")
    return ", ".join(out)


def _placeholders(key: str) -> str:
    key = key.replace("RUN", "<run id>").replace("BOOT", "<boot>").replace("SHA256", "<sha256>")
    return re.sub(r"-0*1\.jsonl$", "-<first seq>.jsonl", key)


def protocol_tables() -> str:
    env = ", ".join(f"`{name}`" for name in protocol.POD_ENV)
    manifest = [
        ("the manifest", protocol.Manifest),
        ("`base_model`", protocol.BaseModelSpec),
        ("`dataset`", protocol.DatasetSpec),
        ("`hyperparameters`", protocol.Hyperparameters),
        ("`trial`", protocol.TrialCaps),
        ("`adapter`", protocol.AdapterSpec),
        ("`mailbox`", protocol.MailboxUrls),
    ]
    reports = [(name, cls) for name, cls in REPORT_TYPES.items()]
    mailbox = [
        ("the manifest", protocol.manifest_key("RUN")),
        ("the adapter", protocol.adapter_key("RUN")),
        ("an adapter recovered by upload (R10)", protocol.recovery_key("RUN")),
        (
            "the verified adapter, pinned (control plane only)",
            protocol.verified_key("RUN", "SHA256"),
        ),
        ("the latest progress (a heartbeat)", protocol.status_key("RUN")),
        ("the final report, written last", protocol.result_key("RUN")),
        ("log chunks", protocol.log_chunk_key("RUN", "BOOT", 1)),
    ]
    lines = [
        f"The Pod's environment: {env}.",
        "",
        "| manifest part (`?`: optional) | fields |",
        "|---|---|",
        *(f"| {name} | {_dataclass_fields(cls)} |" for name, cls in manifest),
        "",
        f"| report `type` (stdout: `{protocol.REPORT_PREFIX.strip()} <JSON>`) | fields |",
        "|---|---|",
        *(f"| `{name}` | {_dataclass_fields(cls)} |" for name, cls in reports),
        "",
        "| on storage | key |",
        "|---|---|",
        *(f"| {what} | `{_placeholders(key)}` |" for what, key in mailbox),
        "",
        "Failure reasons of a `failed` report: "
        + ", ".join(f"`{r}`" for r in sorted(protocol.FAILURE_REASONS))
        + ".",
    ]
    return "\n".join(lines) + "\n"


GENERATORS = {"openapi-schemas": schema_tables, "trainer-protocol": protocol_tables}


def generated(text: str) -> dict[str, str]:
    return {name: body for _, name, body, _ in BLOCK.findall(text)}


def regenerate(text: str) -> str:
    return BLOCK.sub(lambda m: m[1] + GENERATORS[m[2]]() + m[4], text)


# ---------------------------------------------------------------- the tests
def test_every_route_of_the_api_document_has_a_row_and_every_row_a_route() -> None:
    documented, served = documented_routes(CONTRACT.read_text()), api_routes()
    assert len(served) > 40
    assert served - documented == set(), "add docs/contract.md rows for these routes"
    assert documented - served == set(), "docs/contract.md names routes that are not served"


def test_every_field_a_route_row_names_is_a_field_of_that_route() -> None:
    assert unknown_fields(CONTRACT.read_text()) == {}


def test_the_schema_and_trainer_tables_are_generated_from_the_code() -> None:
    text = CONTRACT.read_text()
    assert set(generated(text)) == set(GENERATORS)
    stale = [name for name, body in generated(text).items() if body != GENERATORS[name]()]
    assert stale == [], "run: uv run python -m tests.unit.test_contract_doc --write"


def test_the_run_states_are_the_domains() -> None:
    text = CONTRACT.read_text()
    paragraph = text.split("Run states: ", 1)[1].split("\n\n", 1)[0].split(" (`domain/run.py`)")[0]
    assert set(re.findall(r"`([a-z_]+)`", paragraph)) == set(STATES)


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.unit.test_contract_doc --write")
    CONTRACT.write_text(regenerate(CONTRACT.read_text()))
