"""Serve → Deployments (V1, V2): each deployment with its endpoint and cost, a "Try it" chat
box (one message, temperature 0), delete with confirmation; "Deploy" on a succeeded run's page
posts here."""

from __future__ import annotations

import json

from fastapi import Request
from fastapi.responses import Response

from api.actions import deployments
from api.console.forms import Errors, status_of, submit, text
from api.console.web import Page, SignedIn, checked_form, pages, redirect, render
from domain.errors import DomainError

router = pages()
HERE = "/deployments"
TRY_MAX_TOKENS = 64


def _page(
    p: Page, errors: Errors, answers: dict[str, tuple[str, str]] | None = None, confirm: str = ""
) -> Response:
    caller = p.me
    return render(
        p,
        "deployments.html",
        status=status_of(errors),
        deployments=deployments.listing(backend=p.backend, caller=caller),
        answers=answers or {},
        confirm=confirm,
        errors=errors,
    )


@router.get(HERE)
def deployments_page(p: SignedIn, confirm: str = "") -> Response:
    return _page(p, {}, confirm=confirm)


@router.post(HERE)
async def deploy(request: Request, p: SignedIn) -> Response:
    form = await checked_form(request, p)
    caller = p.require("manage_runs")
    errors: Errors = {}
    run_id = text(form, "run_id")

    def command() -> None:
        deployments.deploy(backend=p.backend, caller=caller, run_id=run_id)

    if submit(p, errors, "deploy", command):
        return redirect(HERE)
    return _page(p, errors)


@router.post(HERE + "/{deployment_id}/try")
async def try_it(deployment_id: str, request: Request, p: SignedIn) -> Response:
    form = await checked_form(request, p)
    caller = p.require("manage_runs")
    errors: Errors = {}
    message = text(form, "message")
    answers: dict[str, tuple[str, str]] = {}

    def ask() -> None:
        if not message:
            raise DomainError("write a message to send", rule="message")
        body = {
            "messages": [{"role": "user", "content": message}],
            "temperature": 0,
            "max_tokens": TRY_MAX_TOKENS,
        }
        status, _headers, content = deployments.chat(
            backend=p.backend, caller=caller, deployment_id=deployment_id, body=body
        )
        try:
            answer = json.loads(content)
        except ValueError:
            answer = None
        if status != 200 or not isinstance(answer, dict):
            raise DomainError(
                f"the endpoint answered HTTP {status}: {content[:300].decode(errors='replace')}",
                rule="chat",
            )
        answers[deployment_id] = (message, str(answer["choices"][0]["message"]["content"]))

    submit(p, errors, f"try-{deployment_id}", ask)
    return _page(p, errors, answers)


@router.post(HERE + "/{deployment_id}/delete")
async def delete(deployment_id: str, request: Request, p: SignedIn) -> Response:
    await checked_form(request, p)
    caller = p.require("manage_runs")
    errors: Errors = {}

    def command() -> None:
        deployments.delete(backend=p.backend, caller=caller, deployment_id=deployment_id)

    if submit(p, errors, f"delete-{deployment_id}", command):
        return redirect(HERE)
    return _page(p, errors)
