"""The Hugging Face Hub through huggingface_hub's own pieces (C7), at a configurable
endpoint (TENSORANT_HF_ENDPOINT: the Hub, a mirror, or the sandbox's stand-in).

`whoami-v2` says who a token is; `auth-check` says whether it may read a repository, without
downloading anything: the very routes `HfApi.whoami` and `HfApi.auth_check` call, with the
client's headers (`build_hf_headers`) and its reading of the Hub's answers
(`hf_raise_for_status`: GatedRepoError, RepositoryNotFoundError, ...). The requests go through
this adapter's own HTTP client (huggingface_hub's, httpx2) rather than the library's shared
session, so the control plane is ruled by its own settings only: HF_HUB_OFFLINE, meant for a
trainer's process, does not switch the control plane's checks off. The token is passed per call
and never kept, logged or put in an error.
"""

from __future__ import annotations

from typing import Any

import httpx2
from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError
from huggingface_hub.utils import build_hf_headers, hf_raise_for_status

from application.errors import HubUnavailable, InvalidHubToken
from application.ports import HubAccount
from domain.errors import NotFound

HUB = "https://huggingface.co"


def _status(error: HfHubHTTPError) -> int:
    response: Any = getattr(error, "response", None)
    return int(getattr(response, "status_code", 0) or 0)


class HubClient:
    """The `ModelHub` port; errors name the endpoint and the status, never the token
    (huggingface_hub's own messages quote no token either, but are not passed on)."""

    def __init__(self, endpoint: str = HUB, timeout_s: float = 10.0) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.http = httpx2.Client(timeout=timeout_s, follow_redirects=True)

    def _get(self, path: str, token: str | bool) -> Any:
        """GET a Hub API route as huggingface_hub would, raising its errors."""
        try:
            r = self.http.get(f"{self.endpoint}{path}", headers=build_hf_headers(token=token))
        except (httpx2.HTTPError, OSError) as e:
            raise self._unavailable(type(e).__name__) from None
        hf_raise_for_status(r)
        return r

    def whoami(self, token: str) -> HubAccount:
        try:
            me = self._get("/api/whoami-v2", token).json()
        except HfHubHTTPError as e:
            status = _status(e)
            if status in (401, 403):
                raise InvalidHubToken(
                    "the Hugging Face Hub refused the token (whoami answered "
                    f"{status}): paste a current access token from huggingface.co → Settings → "
                    "Access Tokens"
                ) from None
            raise self._unavailable(f"whoami answered {status}") from None
        except ValueError:
            raise self._unavailable("whoami answered no JSON") from None
        access = (me.get("auth") or {}).get("accessToken") or {}
        return HubAccount(username=str(me.get("name") or ""), role=str(access.get("role") or ""))

    def can_read(self, token: str, repo_id: str) -> bool:
        try:
            self._get(f"/api/models/{repo_id}/auth-check", token)
        except GatedRepoError:  # a subclass of RepositoryNotFoundError: caught first
            return False
        except RepositoryNotFoundError:
            return False
        except HfHubHTTPError as e:
            raise self._unavailable(f"auth-check answered {_status(e)}") from None
        return True

    def revision(self, token: str | None, repo_id: str) -> str:
        """R19: `GET /api/models/{repo}/revision/main` (what `HfApi.model_info` and
        `snapshot_download` ask) and its `sha`."""
        try:
            sha = (
                self._get(f"/api/models/{repo_id}/revision/main", token or False).json().get("sha")
            )
        except RepositoryNotFoundError:
            raise NotFound(f"{repo_id} was not found on the Hugging Face Hub") from None
        except HfHubHTTPError as e:
            raise self._unavailable(f"model info answered {_status(e)}") from None
        except (ValueError, AttributeError):
            raise self._unavailable("model info answered no JSON object") from None
        if not isinstance(sha, str) or not sha:
            raise self._unavailable("model info named no commit")
        return sha

    def page(self, repo_id: str) -> str:
        return f"{self.endpoint}/{repo_id}"

    def _unavailable(self, what: str) -> HubUnavailable:
        return HubUnavailable(
            f"the Hugging Face Hub at {self.endpoint} did not answer as expected ({what}); "
            "retry later"
        )
