"""Settings → Connections: the RunPod card, the Data storage card and the Hugging Face card
(C1–C5, C7, S1–S6)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Query, Request
from fastapi.responses import Response

from api.actions import connections, storage
from api.actions.connections import checks
from api.console.forms import Errors, count, status_of, submit, text
from api.console.problems import shown
from api.console.web import Page, SignedIn, checked_form, pages, redirect, render
from api.schemas.connections import ApiKeyIn, HubTokenIn, RegistryCredentialsIn
from api.schemas.storage import ResizeIn, S3StorageIn, VolumeStorageIn
from domain.errors import TensorantError

router = pages()
HERE = "/settings/connections"


def _page(p: Page, errors: Errors, dialog: str | None, storage_form: str | None) -> Response:
    caller = p.me
    cards = connections.overview(views=p.backend.views, caller=caller)
    volumes: list[Any] = []
    if (
        storage_form == "volume"
        and p.can("discover_volumes")
        and cards.compute.status == "connected"
    ):
        try:
            volumes = storage.volumes(backend=p.backend, caller=caller)
        except TensorantError as exc:
            errors.setdefault("storage", shown(exc))
    registry = (
        connections.registry_card(p.backend, caller.org_id)
        if cards.compute.status == "connected"
        else None
    )
    return render(
        p,
        "connections.html",
        status=status_of(errors),
        compute=cards.compute,
        registry=registry,
        storage=cards.storage,
        huggingface=cards.huggingface,
        dialog=dialog,
        storage_form=storage_form,
        volumes=volumes,
        errors=errors,
    )


@router.get(HERE)
def connections_page(
    p: SignedIn,
    dialog: Annotated[str | None, Query(max_length=40)] = None,
    storage_form: Annotated[str | None, Query(alias="storage", max_length=40)] = None,
) -> Response:
    return _page(p, {}, dialog, storage_form)


@router.post(f"{HERE}/runpod")
async def connect_runpod(request: Request, p: SignedIn) -> Response:
    form = await checked_form(request, p)
    caller = p.require("manage_connections")
    errors: Errors = {}
    replace = form.get("action") == "replace"
    action = connections.rotate_runpod if replace else connections.connect_runpod

    def connect() -> object:
        body = ApiKeyIn(api_key=text(form, "api_key"))
        guard = checks(request)
        return action(backend=p.backend, caller=caller, checks=guard, api_key=body.api_key)

    if submit(p, errors, "api_key", connect):
        return redirect(HERE)
    return _page(p, errors, "replace-key" if replace else "connect-runpod", None)


@router.post(f"{HERE}/runpod/disconnect")
async def disconnect_runpod(request: Request, p: SignedIn) -> Response:
    form = await checked_form(request, p)
    caller = p.require("manage_connections")
    errors: Errors = {}
    if form.get("confirmed") != "yes":  # the confirmation first (without scripts too)
        return _page(p, errors, "disconnect", None)
    return _done_or_page(
        p, "disconnect", lambda: connections.disconnect_runpod(backend=p.backend, caller=caller)
    )


@router.post(f"{HERE}/huggingface")
async def connect_huggingface(request: Request, p: SignedIn) -> Response:
    """C7: connect or replace the Hugging Face token (checked against the Hub first)."""
    form = await checked_form(request, p)
    caller = p.require("manage_connections")

    def connect() -> object:
        body = HubTokenIn(token=text(form, "hf_token"))
        guard = checks(request)
        return connections.connect_huggingface(
            backend=p.backend, caller=caller, checks=guard, token=body.token
        )

    return _done_or_page(p, "hf_token", connect, "connect-huggingface")


@router.post(f"{HERE}/huggingface/disconnect")
async def disconnect_huggingface(request: Request, p: SignedIn) -> Response:
    await checked_form(request, p)
    caller = p.require("manage_connections")
    return _done_or_page(
        p,
        "hf_disconnect",
        lambda: connections.disconnect_huggingface(backend=p.backend, caller=caller),
    )


@router.post(f"{HERE}/registry")
async def attach_registry(request: Request, p: SignedIn) -> Response:
    """A baked trainer image's private-registry credentials (`PUT /v1/connections/registry`)."""
    form = await checked_form(request, p)
    caller = p.require("manage_connections")

    def attach() -> object:
        body = RegistryCredentialsIn(
            username=text(form, "registry_username"), password=text(form, "registry_password")
        )
        return connections.attach_registry(
            backend=p.backend, caller=caller, username=body.username, password=body.password
        )

    return _done_or_page(p, "registry", attach)


@router.post(f"{HERE}/registry/remove")
async def remove_registry(request: Request, p: SignedIn) -> Response:
    await checked_form(request, p)
    caller = p.require("manage_connections")
    return _done_or_page(
        p, "registry", lambda: connections.remove_registry(backend=p.backend, caller=caller)
    )


def _done_or_page(
    p: SignedIn, key: str, command: Callable[[], object], dialog: str | None = None
) -> Response:
    """Run a connection command: back to the page when it is done, else the page with its
    refusal beside the form `key` (and the dialog `dialog` open again)."""
    errors: Errors = {}
    if submit(p, errors, key, command):
        return redirect(HERE)
    return _page(p, errors, dialog, None)


def _storage_body(form: dict[str, Any], kind: str) -> VolumeStorageIn | S3StorageIn:
    if kind == "s3":
        return S3StorageIn(
            kind="s3",
            endpoint_url=text(form, "endpoint_url"),
            bucket=text(form, "bucket"),
            region=text(form, "region"),
            access_key_id=text(form, "access_key_id"),
            secret_access_key=text(form, "secret_access_key"),
        )
    volume_id, datacenter_id = text(form, "volume_id"), text(form, "datacenter_id")
    if "|" in text(form, "volume"):  # the discovered list: "<id>|<datacenter>"
        volume_id, datacenter_id = text(form, "volume").split("|", 1)
    return VolumeStorageIn(
        kind="runpod_volume",
        volume_id=volume_id,
        datacenter_id=datacenter_id,
        access_key_id=text(form, "access_key_id"),
        secret_access_key=text(form, "secret_access_key"),
    )


@router.post(f"{HERE}/storage")
async def connect_storage(request: Request, p: SignedIn) -> Response:
    form = await checked_form(request, p)
    caller = p.require("manage_connections")
    errors: Errors = {}
    kind = text(form, "kind")
    storage_form = text(form, "form") or ("s3" if kind == "s3" else "volume")

    def bind() -> object:
        body = _storage_body(form, kind)
        return storage.bind(backend=p.backend, caller=caller, checks=checks(request), body=body)

    if submit(p, errors, "storage", bind):
        return redirect(HERE)
    return _page(p, errors, None, storage_form)


@router.post(f"{HERE}/storage/resize")
async def resize_storage(request: Request, p: SignedIn) -> Response:
    form = await checked_form(request, p)
    caller = p.require("manage_connections")
    errors: Errors = {}

    def resize() -> object:
        body = ResizeIn.model_validate({"size_gb": count(text(form, "size_gb"))})
        return storage.resize(backend=p.backend, caller=caller, size_gb=body.size_gb)

    if submit(p, errors, "resize", resize):
        return redirect(HERE)
    return _page(p, errors, None, None)
