"""The Hugging Face Hub's stand-in, served under /hf: the routes the control plane and the
trainer call, answered the way huggingface_hub expects, so the real client works unchanged.

- `GET /api/whoami-v2`: 401 for an unknown token; else the user and the token's role.
- `GET /api/models/{repo}` and `/api/models/{repo}/revision/{rev}`: the repository's info
  (`gated`, `sha`, `siblings`), and `/api/models/{repo}/tree/{rev}` its files (what
  `snapshot_download` lists), readable by anyone, as on the Hub.
- `GET /api/models/{repo}/auth-check`: 200 when the token may read the files; a gated repository
  answers 401 without a token and 403 for a user who has not accepted its licence, with the
  Hub's `X-Error-Code: GatedRepo` (huggingface_hub raises GatedRepoError on it).
- `HEAD`/`GET /{repo}/resolve/{rev}/{file}`: a file of a published repository, with the headers
  huggingface_hub reads (`X-Repo-Commit`, `ETag`, `Content-Length`); every GET is counted
  (`downloads`), so a test can see that a second run downloaded nothing.

The catalogue's repositories exist without files until a test or the demo publishes a folder
(a tiny model made on the spot) under one of their names (`Hub.publish`).
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from . import seed


@dataclass
class HubRepo:
    id: str
    gated: bool
    files: dict[str, bytes] = field(default_factory=dict)

    @property
    def sha(self) -> str:
        """The commit: a hash of the files, so a new publication is a new revision."""
        h = hashlib.sha1(self.id.encode(), usedforsecurity=False)
        for name in sorted(self.files):
            h.update(name.encode() + b"\0" + hashlib.sha256(self.files[name]).digest())
        return h.hexdigest()


@dataclass(frozen=True)
class HubUser:
    name: str
    token: str
    # Gated repositories whose licence this user accepted (the Hub grants access per user).
    accepted: frozenset[str]


class Hub:
    """The seeded users and repositories; `downloads` lists every file GET as (repo, file)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.repos: dict[str, HubRepo] = {r: HubRepo(r, True) for r in seed.HUB_GATED}
        self.repos.update({r: HubRepo(r, False) for r in seed.HUB_OPEN})
        llama = frozenset(r for r in seed.HUB_GATED if r.startswith("meta-llama/"))
        self.users = {
            u.token: u
            for u in (
                HubUser(seed.HUB_USER, seed.HUB_TOKEN, frozenset(seed.HUB_GATED)),
                HubUser(
                    seed.HUB_RESTRICTED_USER,
                    seed.HUB_RESTRICTED_TOKEN,
                    frozenset(seed.HUB_GATED) - llama,
                ),
            )
        }
        self.downloads: list[tuple[str, str]] = []
        self.calls: list[tuple[str, str]] = []  # (route kind, repo or "") for tests

    def publish(self, repo_id: str, folder: str | Path, *, gated: bool | None = None) -> str:
        """Put a folder's files (e.g. a tiny model's `save_pretrained`) in a repository;
        returns its new commit sha."""
        root = Path(folder)
        files = {
            p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*"))
            if p.is_file()
        }
        with self.lock:
            repo = self.repos.get(repo_id) or HubRepo(repo_id, bool(gated))
            if gated is not None:
                repo.gated = gated
            repo.files = files
            self.repos[repo_id] = repo
            return repo.sha

    def user(self, request: Request) -> HubUser | None:
        auth = request.headers.get("authorization", "")
        token = auth.removeprefix("Bearer ").strip() if auth.startswith("Bearer ") else ""
        return self.users.get(token)

    def access(self, request: Request, repo: HubRepo) -> Response | None:
        """None when the caller may read the repository's files; else the Hub's refusal."""
        if not repo.gated:
            return None
        user = self.user(request)
        if user is None:
            return _error(
                401,
                "GatedRepo",
                f"Access to model {repo.id} is restricted. You must have access to it and be "
                "authenticated to access it. Please log in.",
            )
        if repo.id not in user.accepted:
            return _error(
                403,
                "GatedRepo",
                f"Access to model {repo.id} is restricted and you are not in the authorized "
                f"list. Visit https://huggingface.co/{repo.id} to ask for access.",
            )
        return None


def _error(status: int, code: str, message: str) -> Response:
    return JSONResponse(
        {"error": message},
        status_code=status,
        headers={"X-Error-Code": code, "X-Error-Message": message},
    )


def _not_found(repo_id: str) -> Response:
    return _error(
        404,
        "RepoNotFound",
        f"Repository Not Found for url: /api/models/{repo_id}. Please make sure you specified "
        "the correct `repo_id` and `repo_type`.",
    )


def _hub(request: Request) -> Hub:
    hub: Hub = request.app.state.hub
    return hub


async def whoami(request: Request) -> Response:
    hub = _hub(request)
    hub.calls.append(("whoami", ""))
    user = hub.user(request)
    if user is None:
        return JSONResponse({"error": "Invalid credentials in Authorization header"}, 401)
    return JSONResponse(
        {
            "type": "user",
            "id": hashlib.sha256(user.name.encode()).hexdigest()[:24],
            "name": user.name,
            "fullname": user.name.replace("-", " ").title(),
            "isPro": False,
            "orgs": [],
            "auth": {
                "type": "access_token",
                "accessToken": {"displayName": "tensorant", "role": "read"},
            },
        }
    )


def _info(repo: HubRepo) -> dict[str, Any]:
    return {
        "_id": repo.sha[:24],
        "id": repo.id,
        "modelId": repo.id,
        "author": repo.id.split("/", 1)[0],
        "sha": repo.sha,
        "private": False,
        "disabled": False,
        "gated": "manual" if repo.gated else False,
        "tags": [],
        "siblings": [{"rfilename": name} for name in sorted(repo.files)],
    }


async def models(request: Request) -> Response:
    """/api/models/{repo}[/auth-check | /revision/{rev}]: info is public; auth-check is not."""
    hub = _hub(request)
    path: str = request.path_params["path"]
    kind = "info"
    if path.endswith("/auth-check"):
        path, kind = path.removesuffix("/auth-check"), "auth-check"
    elif "/revision/" in path:
        path = path.split("/revision/", 1)[0]
    elif "/tree/" in path:
        path, kind = path.split("/tree/", 1)[0], "tree"
    hub.calls.append((kind, path))
    repo = hub.repos.get(path)
    if repo is None:
        return _not_found(path)
    if kind == "auth-check":
        refused = hub.access(request, repo)
        return refused or JSONResponse({})
    if kind == "tree":  # one page, no Link header: every file at the top of the listing
        return JSONResponse(
            [
                {
                    "type": "file",
                    "oid": hashlib.sha1(data, usedforsecurity=False).hexdigest(),
                    "size": len(data),
                    "path": name,
                }
                for name, data in sorted(repo.files.items())
            ]
        )
    return JSONResponse(_info(repo))


async def resolve(request: Request) -> Response:
    """HEAD and GET of one file of a repository at a revision (`main` or its sha)."""
    hub = _hub(request)
    repo_id = f"{request.path_params['org']}/{request.path_params['name']}"
    revision, name = request.path_params["revision"], request.path_params["file"]
    repo = hub.repos.get(repo_id)
    if repo is None:
        return _not_found(repo_id)
    refused = hub.access(request, repo)
    if refused is not None:
        return refused
    if revision not in ("main", repo.sha):
        return _error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
    data = repo.files.get(name)
    if data is None:
        return _error(404, "EntryNotFound", f"{name} does not exist on {revision}")
    headers = {
        "X-Repo-Commit": repo.sha,
        "ETag": '"' + hashlib.sha256(data).hexdigest() + '"',
        "Content-Length": str(len(data)),
        "Accept-Ranges": "bytes",
    }
    if request.method == "HEAD":
        return Response(b"", headers=headers, media_type="application/octet-stream")
    hub.downloads.append((repo_id, name))
    return Response(data, headers=headers, media_type="application/octet-stream")


async def publish(request: Request) -> Response:
    """`POST /_sandbox/hub/models {repo_id, folder, gated?}`: publish a local folder (a tiny
    model from `python -m trainer.tiny <folder>`) under a Hub name; answers its commit sha."""
    try:
        body = await request.json()
        repo_id, folder = str(body["repo_id"]), Path(str(body["folder"]))
        gated = body.get("gated")
    except (ValueError, KeyError, TypeError):
        return JSONResponse({"detail": "send {repo_id, folder, gated?}"}, 400)
    if repo_id.count("/") != 1 or not (folder / "config.json").is_file():
        return JSONResponse({"detail": "repo_id is owner/name; folder holds a config.json"}, 400)
    sha = _hub(request).publish(repo_id, folder, gated=None if gated is None else bool(gated))
    return JSONResponse({"repo_id": repo_id, "sha": sha})


async def downloads(request: Request) -> Response:
    """`GET /_sandbox/hub/downloads`: every file GET so far, as [repo_id, file]."""
    return JSONResponse([list(d) for d in _hub(request).downloads])


admin_routes = [
    Route("/_sandbox/hub/models", publish, methods=["POST"]),
    Route("/_sandbox/hub/downloads", downloads, methods=["GET"]),
]

routes = [
    Route("/api/whoami-v2", whoami, methods=["GET"]),
    Route("/api/models/{path:path}", models, methods=["GET"]),
    Route("/{org}/{name}/resolve/{revision}/{file:path}", resolve, methods=["GET", "HEAD"]),
]
