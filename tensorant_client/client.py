"""The client: one httpx session, one method per route, problem+json raised as `ApiError`."""

from __future__ import annotations

import hashlib
import os
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any, NotRequired, TypedDict, cast

import httpx

# Every route the client calls: (method, path as the OpenAPI document writes it)
ROUTES: dict[str, tuple[str, str]] = {
    "projects.list": ("GET", "/v1/projects"),
    "datasets.upload": ("POST", "/v1/projects/{project_id}/datasets"),
    "datasets.list": ("GET", "/v1/projects/{project_id}/datasets"),
    "runs.create": ("POST", "/v1/runs"),
    "runs.list": ("GET", "/v1/runs"),
    "runs.get": ("GET", "/v1/runs/{run_id}"),
    "runs.launch": ("POST", "/v1/runs/{run_id}/launch"),
    "runs.cancel": ("POST", "/v1/runs/{run_id}/cancel"),
    "runs.logs": ("GET", "/v1/runs/{run_id}/logs"),
    "runs.adapter": ("GET", "/v1/runs/{run_id}/adapter"),
}
# A run in one of these states changes no more (the API's run states)
ENDED = frozenset({"succeeded", "cancelled", "failed"})
CONFIG_FILE = Path("~/.config/tensorant/client.toml")


class Project(TypedDict):
    id: str
    name: str
    created_at: str


class DatasetVersion(TypedDict):
    id: str
    project_id: str
    name: str
    version: str
    object_key: str
    size_bytes: int
    row_count: int
    sha256: str
    format: str
    created_at: str


class Adapter(TypedDict):
    object_key: str
    sha256: str
    size_bytes: int
    verified_at: str | None


class Run(TypedDict):
    id: str
    state: str
    state_reason: str | None
    kind: str
    project_id: str
    dataset_version_id: str
    base_model: str
    gpu_type_id: str
    gpu_count: int
    price_limit_per_hour: str
    max_runtime_minutes: int
    price_per_hour: str | None
    pod_id: str | None
    runtime_seconds: int
    cost_so_far: str
    adapter: Adapter | None
    progress: dict[str, Any] | None
    stalled_since: str | None
    created_at: str
    updated_at: str
    actions: NotRequired[dict[str, bool]]


class Accepted(TypedDict):
    id: str
    state: str
    detail: str


class LogLine(TypedDict):
    seq: int
    time: str
    text: str


class LogPage(TypedDict):
    lines: list[LogLine]
    next_after: int


@dataclass(frozen=True)
class Downloaded:
    path: Path
    sha256: str
    size_bytes: int


class ApiError(Exception):
    """A refusal from the server: its problem+json `type` (a stable slug), title and detail."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        self.status = status
        self.type = str(problem.get("type") or "error").rsplit("/", 1)[-1]
        self.title = str(problem.get("title") or "")
        self.detail = str(problem.get("detail") or "")
        self.problem = problem
        super().__init__(f"{status} {self.type}: {self.detail or self.title}")


@dataclass(frozen=True)
class ClientConfig:
    """Where the server is and the member token to use. `from_env`: explicit values first,
    then TENSORANT_URL and TENSORANT_TOKEN, then the file TENSORANT_CLIENT_CONFIG names (else
    ~/.config/tensorant/client.toml, keys `url` and `token`)."""

    url: str
    token: str

    def __repr__(self) -> str:  # the token never reaches a log or a traceback
        return f"ClientConfig(url={self.url!r}, token=***)"

    @classmethod
    def from_env(cls, url: str | None = None, token: str | None = None) -> ClientConfig:
        path = Path(os.environ.get("TENSORANT_CLIENT_CONFIG") or CONFIG_FILE).expanduser()
        stored: dict[str, Any] = tomllib.loads(path.read_text()) if path.is_file() else {}
        url = url or os.environ.get("TENSORANT_URL") or stored.get("url")
        token = token or os.environ.get("TENSORANT_TOKEN") or stored.get("token")
        if not url or not token:
            missing = " and ".join(n for n, v in (("url", url), ("token", token)) if not v)
            raise ValueError(
                f"no server {missing}: pass --url/--token, set TENSORANT_URL and "
                f"TENSORANT_TOKEN, or write them to {path}"
            )
        return cls(str(url).rstrip("/"), str(token))


class _Counted:
    """A file whose reads are reported (upload progress); httpx streams it in chunks."""

    def __init__(self, file: IO[bytes], seen: Callable[[int], None]) -> None:
        self._file, self._seen = file, seen
        self.name = getattr(file, "name", "dataset.jsonl")

    def read(self, size: int = -1) -> bytes:
        data = self._file.read(size)
        self._seen(len(data))
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._file.seek(offset, whence)

    def tell(self) -> int:
        return self._file.tell()

    def fileno(self) -> int:
        return self._file.fileno()


class Client:
    def __init__(self, config: ClientConfig, *, timeout: float = 60.0) -> None:
        self.config = config
        self.http = httpx.Client(
            base_url=config.url,
            headers={"Authorization": f"Bearer {config.token}"},
            timeout=timeout,
        )
        self.datasets = Datasets(self)
        self.runs = Runs(self)

    @classmethod
    def from_config(cls, url: str | None = None, token: str | None = None) -> Client:
        return cls(ClientConfig.from_env(url, token))

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    def call(self, route: str, path_params: dict[str, str] | None = None, **kw: Any) -> Any:
        method, path = ROUTES[route]
        response = self.http.request(method, path.format(**(path_params or {})), **kw)
        return _answer(response)

    def projects(self) -> list[Project]:
        return cast(list[Project], self.call("projects.list"))


class Datasets:
    def __init__(self, client: Client) -> None:
        self.client = client

    def list(self, project_id: str) -> list[DatasetVersion]:
        found = self.client.call("datasets.list", {"project_id": project_id})
        return cast(list[DatasetVersion], found)

    def upload(
        self,
        project_id: str,
        path: Path,
        name: str,
        version: str,
        progress: Callable[[int], None] | None = None,
    ) -> DatasetVersion:
        """Stream the file to the organization's storage through the server (multipart);
        `progress` is told each chunk's size as it is sent."""
        with path.open("rb") as file:
            body = _Counted(file, progress or (lambda _n: None))
            found = self.client.call(
                "datasets.upload",
                {"project_id": project_id},
                data={"name": name, "version": version},
                files={"file": (path.name, cast(IO[bytes], body), "application/jsonl")},
                timeout=None,
            )
        return cast(DatasetVersion, found)


class Runs:
    def __init__(self, client: Client) -> None:
        self.client = client

    def create(self, **config: Any) -> Run:
        """A draft (`POST /v1/runs`): nothing is rented until `launch`."""
        return cast(Run, self.client.call("runs.create", json=config))

    def list(self) -> list[Run]:
        return cast(list[Run], self.client.call("runs.list"))

    def get(self, run_id: str) -> Run:
        return cast(Run, self.client.call("runs.get", {"run_id": run_id}))

    def launch(self, run_id: str, accepted_price_per_hour: str) -> Accepted:
        """Rent the Pod at the hourly price the caller accepted (the server refuses another)."""
        body = {"confirm": True, "accepted_price_per_hour": accepted_price_per_hour}
        return cast(Accepted, self.client.call("runs.launch", {"run_id": run_id}, json=body))

    def cancel(self, run_id: str) -> Accepted:
        return cast(Accepted, self.client.call("runs.cancel", {"run_id": run_id}))

    def logs(self, run_id: str, after: int = 0, limit: int = 500) -> LogPage:
        params = {"after": after, "limit": limit}
        return cast(LogPage, self.client.call("runs.logs", {"run_id": run_id}, params=params))

    def watch(
        self, run_id: str, interval_s: float = 1.0, timeout_s: float | None = None
    ) -> Iterator[Run]:
        """The run each time its state, progress or cost changed, until it ends (the last one
        yielded is the ended run); TimeoutError past `timeout_s`."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        last: tuple[Any, ...] | None = None
        while True:
            run = self.get(run_id)
            seen = (run["state"], run.get("progress"), run.get("cost_so_far"), run.get("pod_id"))
            if seen != last:
                last = seen
                yield run
            if run["state"] in ENDED:
                return
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"run {run_id} still {run['state']} after {timeout_s} s")
            time.sleep(interval_s)

    def download(self, run_id: str, into: Path) -> Downloaded:
        """Write the run's verified adapter to `into`, checked against the sha256 the run shows
        (a mismatch deletes the file and raises)."""
        run = self.get(run_id)
        adapter = run.get("adapter")
        method, path = ROUTES["runs.adapter"]
        digest, size = hashlib.sha256(), 0
        url = path.format(run_id=run_id)
        with self.client.http.stream(method, url, follow_redirects=True, timeout=None) as got:
            if got.status_code >= 400:
                got.read()
                _answer(got)
            with into.open("wb") as out:
                for chunk in got.iter_bytes():
                    digest.update(chunk)
                    size += len(chunk)
                    out.write(chunk)
        expected = adapter["sha256"] if adapter else ""
        if digest.hexdigest() != expected:
            into.unlink(missing_ok=True)
            raise ApiError(
                409,
                {
                    "type": "adapter-changed",
                    "detail": f"downloaded {digest.hexdigest()}, the run shows {expected}",
                },
            )
        return Downloaded(into, digest.hexdigest(), size)


def _answer(response: httpx.Response) -> Any:
    if response.status_code >= 400:
        try:
            problem = response.json()
        except ValueError:
            problem = {"title": response.reason_phrase, "detail": response.text[:300]}
        raise ApiError(response.status_code, problem if isinstance(problem, dict) else {})
    if response.status_code == 204 or not response.content:
        return None
    return response.json()
