"""Settings → Webhooks (R20): an owner's endpoints and their recent deliveries; adding one shows
its signing secret once (as the API's answer does); removing one stops its deliveries."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import Response

from api.actions import webhooks
from api.console.forms import Errors, status_of, submit, text
from api.console.web import Page, SignedIn, checked_form, pages, redirect, render
from api.schemas.webhooks import WebhookCreated, WebhookIn
from domain.webhook import EVENT_TYPES

router = pages()
HERE = "/settings/webhooks"
RECENT = 10  # deliveries shown per endpoint; all of them are in the API


def _page(p: Page, errors: Errors, created: WebhookCreated | None = None) -> Response:
    caller = p.require("manage_webhooks")
    views = p.backend.views
    found = webhooks.endpoints(views=views, caller=caller)
    recent = {
        e.id: webhooks.deliveries(
            views=views, caller=caller, webhook_id=e.id, limit=RECENT
        ).deliveries
        for e in found
    }
    return render(
        p,
        "webhooks.html",
        status=status_of(errors),
        endpoints=found,
        recent=recent,
        event_types=EVENT_TYPES,
        created=created,
        errors=errors,
    )


@router.get(HERE)
def webhooks_page(p: SignedIn) -> Response:
    return _page(p, {})


@router.post(HERE)
async def add_webhook(request: Request, p: SignedIn) -> Response:
    form = await checked_form(request, p)
    caller = p.require("manage_webhooks")
    errors: Errors = {}
    made: list[WebhookCreated] = []
    chosen = [t for t in EVENT_TYPES if form.get(f"event-{t}")]

    def add() -> None:
        fields: dict[str, Any] = {"url": text(form, "url"), "events": chosen}
        body = WebhookIn.model_validate(fields)
        made.append(
            webhooks.create(
                backend=p.backend, caller=caller, url=body.url, events=list(body.events)
            )
        )

    submit(p, errors, "url", add)
    return _page(p, errors, made[0] if made else None)  # the secret is on this page only


@router.post(HERE + "/{webhook_id}/remove")
async def remove_webhook(webhook_id: str, request: Request, p: SignedIn) -> Response:
    await checked_form(request, p)
    caller = p.require("manage_webhooks")
    errors: Errors = {}

    def remove() -> None:
        webhooks.remove(backend=p.backend, caller=caller, webhook_id=webhook_id)

    if submit(p, errors, f"webhook-{webhook_id}", remove):
        return redirect(HERE)
    return _page(p, errors)
