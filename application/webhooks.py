"""Webhook endpoints (R20): owners register where run state changes and risk states are sent.

Registering checks the URL with the same SSRF guard as a custom S3 endpoint (https to public
addresses, or an operator's allow-list entry), makes the endpoint's signing secret, keeps it in
the vault only and returns it once. What is delivered, and when, is the read side's
(`projections/webhooks.py`): deliveries follow the log, so nothing here sends anything.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

from application.errors import UnsafeEndpoint
from application.log import TensorantLog
from application.ports import Clock, SecretVault
from domain.ids import id_text
from domain.webhook import SECRET_PREFIX, WebhookEndpoint, vault_name

UrlCheck = Callable[[str], None]


class DeliveryFailed(Exception):
    """A delivery attempt got no answer (refused, timed out, unsafe): the message says which,
    naming no secret."""


class Transport(Protocol):
    """What the webhook deliverer asks of HTTP (`adapters.webhook_http`): POST, the status."""

    def post(self, url: str, body: bytes, headers: dict[str, str], timeout: float) -> int: ...


class UnsafeWebhookUrl(UnsafeEndpoint):
    problem = "unsafe-webhook-url"
    title = "The webhook URL is not allowed"


def https_only(url: str) -> None:
    """The check when none is wired (tests of the service alone): https, nothing resolved."""
    if urlsplit(url).scheme != "https":
        raise UnsafeEndpoint("the endpoint must be an https:// URL with a host name")


@dataclass(frozen=True)
class Registered:
    endpoint_id: str
    secret: str  # shown once, in the answer to the registration
    position: int


class WebhookService:
    def __init__(
        self, log: TensorantLog, vault: SecretVault, clock: Clock, check_url: UrlCheck | None
    ) -> None:
        self.log, self.vault, self.clock = log, vault, clock
        self.check_url = check_url or https_only

    def register(self, org_id: str, url: str, events: list[str], actor: str) -> Registered:
        """Check the URL, keep a new secret in the vault, then record the endpoint."""
        try:
            self.check_url(url.strip())
        except UnsafeEndpoint as e:
            raise UnsafeWebhookUrl(e.detail) from None
        endpoint = WebhookEndpoint.register(org_id, url, events, actor, self.clock.now())
        endpoint_id = id_text(endpoint.id)
        secret = SECRET_PREFIX + secrets.token_urlsafe(32)
        # The vault first: an endpoint recorded without its secret could never be delivered to;
        # a secret whose endpoint was never recorded is named by nothing.
        self.vault.put(org_id, vault_name(endpoint_id), secret)
        return Registered(endpoint_id, secret, self.log.save_all(endpoint))

    def remove(self, org_id: str, endpoint_id: str, actor: str) -> int:
        endpoint = self.log.load(WebhookEndpoint, endpoint_id, org_id)
        endpoint.remove(actor, self.clock.now())
        position = self.log.save_all(endpoint)
        self.vault.delete(org_id, vault_name(endpoint_id))
        return position
