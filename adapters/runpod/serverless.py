"""RunPod Serverless over REST v2 (`/v2/serverless`) and each endpoint's OpenAI-compatible route
(`api.runpod.ai/v2/<endpoint id>/openai/v1/...`), with the organization's key (V1, V2).

The key goes in the Authorization header only; errors are scrubbed of it. An endpoint's env is
never read back into our objects (RunPod shows it to any holder of the key; ours carries none).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import httpx

from adapters.runpod.billing import billing_records, hourly
from adapters.runpod.errors import invalid_credentials, redact, unavailable
from adapters.runpod.http import DEFAULT_API_BASE_URL, resolve_base_url
from application.errors import InsufficientPermissions, ProviderError
from application.ports import BillingRecord, ServingEndpoint, ServingWorkers

SERVING_BASE_URL = "https://api.runpod.ai"  # where endpoints answer (not api.runpod.io)
PASSED_HEADERS = ("content-type", "retry-after")


def _endpoint(body: dict[str, Any]) -> ServingEndpoint:
    workers = body.get("workers") or {}
    return ServingEndpoint(
        id=str(body["id"]),
        name=str(body.get("name") or ""),
        workers_min=int(workers.get("min") or 0),
        workers_max=int(workers["max"]) if workers.get("max") is not None else 3,
        pools=tuple((body.get("gpu") or {}).get("pools") or ()),
    )


class RunPodServing:
    def __init__(self, api_base_url: str | None = None, timeout_s: float = 30.0) -> None:
        self._explicit = api_base_url
        self.timeout_s = timeout_s
        self._client = httpx.Client(timeout=timeout_s)

    @property
    def api_url(self) -> str:
        return resolve_base_url(self._explicit)

    @property
    def serving_url(self) -> str:
        # A sandbox (or any other base) serves both; RunPod itself answers endpoints elsewhere.
        base = self.api_url
        return SERVING_BASE_URL if base == DEFAULT_API_BASE_URL else base

    def close(self) -> None:
        self._client.close()

    def _send(
        self, method: str, url: str, api_key: str, *, relay: bool = False, **kw: Any
    ) -> httpx.Response:
        if not api_key:
            raise invalid_credentials()
        try:
            response = self._client.request(
                method, url, headers={"Authorization": f"Bearer {api_key}"}, **kw
            )
        except httpx.TimeoutException:
            raise unavailable(
                f"RunPod did not answer within {self.timeout_s:g} s", api_key
            ) from None
        except httpx.HTTPError as exc:
            raise unavailable(
                f"RunPod could not be reached: {type(exc).__name__}", api_key
            ) from None
        return self._check(response, api_key, relay)

    @staticmethod
    def _check(response: httpx.Response, api_key: str, relay: bool = False) -> httpx.Response:
        """Key refusals raise; a chat's other answers are relayed (`relay`), the API's raise."""
        status = response.status_code
        if status == 401:
            raise invalid_credentials()
        if status == 403:
            raise InsufficientPermissions("RunPod refused the key on Serverless (HTTP 403)")
        if not relay and (status == 429 or status >= 500):
            raise unavailable(f"RunPod answered HTTP {status} on Serverless", api_key)
        return response

    def _json(self, method: str, path: str, api_key: str, **kw: Any) -> Any:
        response = self._send(method, self.api_url + path, api_key, **kw)
        if response.status_code >= 400 and response.status_code != 404:
            raise ProviderError(
                redact(
                    f"RunPod refused {method} {path}: HTTP {response.status_code} "
                    f"{response.text[:300]}",
                    api_key,
                )
            )
        return None if response.status_code in (204, 404) else response.json()

    def list_endpoints(self, api_key: str) -> list[ServingEndpoint]:
        body = self._json("GET", "/v2/serverless", api_key) or []
        return [_endpoint(e) for e in body]

    def create_endpoint(self, api_key: str, body: dict[str, Any]) -> ServingEndpoint:
        return _endpoint(self._json("POST", "/v2/serverless", api_key, json=body))

    def patch_endpoint(
        self, api_key: str, endpoint_id: str, body: dict[str, Any]
    ) -> ServingEndpoint | None:
        found = self._json("PATCH", f"/v2/serverless/{endpoint_id}", api_key, json=body)
        return _endpoint(found) if found else None

    def delete_endpoint(self, api_key: str, endpoint_id: str) -> None:
        self._json("DELETE", f"/v2/serverless/{endpoint_id}", api_key)

    def workers(self, api_key: str, endpoint_id: str) -> ServingWorkers | None:
        body = self._json("GET", f"/v2/serverless/{endpoint_id}/workers", api_key)
        if body is None:
            return None
        workers = [w for w in body.get("workers") or [] if isinstance(w, dict)]
        states = [str(w.get("status")) for w in workers]
        up = ("RUNNING", "IDLE", "INITIALIZING")
        return ServingWorkers(
            running=states.count("RUNNING"),
            idle=states.count("IDLE"),
            initializing=states.count("INITIALIZING"),
            pools=tuple(str(w.get("gpuTypeId") or "") for w in workers if w.get("status") in up),
        )

    def billing(self, api_key: str, start: datetime, end: datetime) -> list[BillingRecord]:
        path = "/v2/billing/serverless"
        body = self._json("GET", path, api_key, params=hourly(start, end))
        return billing_records(body, path, "serverlessId")

    def _chat_url(self, endpoint_id: str) -> str:
        return f"{self.serving_url}/v2/{endpoint_id}/openai/v1/chat/completions"

    def chat(
        self, api_key: str, endpoint_id: str, body: dict[str, Any], timeout_s: float
    ) -> tuple[int, dict[str, str], bytes]:
        response = self._send(
            "POST", self._chat_url(endpoint_id), api_key, relay=True, json=body, timeout=timeout_s
        )
        headers = {k: v for k, v in response.headers.items() if k.lower() in PASSED_HEADERS}
        return response.status_code, headers, response.content

    @contextmanager
    def chat_stream(
        self, api_key: str, endpoint_id: str, body: dict[str, Any], timeout_s: float
    ) -> Iterator[tuple[int, Iterator[bytes]]]:
        try:
            with self._client.stream(
                "POST",
                self._chat_url(endpoint_id),
                headers={"Authorization": f"Bearer {api_key}"},
                json=body,
                timeout=httpx.Timeout(self.timeout_s, read=timeout_s),
            ) as response:
                self._check(response, api_key, relay=True)
                yield response.status_code, response.iter_bytes()
        except httpx.TimeoutException:
            raise unavailable("the endpoint did not answer in time", api_key) from None
        except httpx.HTTPError as exc:
            raise unavailable(
                f"the endpoint's stream broke: {type(exc).__name__}", api_key
            ) from None
