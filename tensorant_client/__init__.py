"""A typed Python client for Tensorant's HTTP API (W3), the one `tensorant datasets …` and
`tensorant runs …` use. It needs only httpx; nothing of the server is imported.

    from tensorant_client import Client
    with Client.from_config() as api:          # TENSORANT_URL / TENSORANT_TOKEN or the file
        run = api.runs.get("c0ffee…")
        api.runs.download(run["id"], "adapter.zip")

Every route it calls is listed in `ROUTES`; a test keeps that list, and the fields of the typed
answers, in step with the server's OpenAPI document.
"""

from tensorant_client.client import (
    ROUTES,
    ApiError,
    Client,
    ClientConfig,
    DatasetVersion,
    Downloaded,
    LogLine,
    LogPage,
    Project,
    Run,
)

__all__ = [
    "ROUTES",
    "ApiError",
    "Client",
    "ClientConfig",
    "DatasetVersion",
    "Downloaded",
    "LogLine",
    "LogPage",
    "Project",
    "Run",
]
