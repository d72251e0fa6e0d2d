"""T1 on custom S3: the trainer holds no key pair, only the manifest's presigned URLs: it GETs the
manifest, the dataset and the model's files, and PUTs the mailbox and the adapter."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.fixtures import HYPERPARAMETERS, TOKEN, Workspace, run_in_process
from trainer.protocol import (
    AdapterSpec,
    BaseModelSpec,
    DatasetSpec,
    Exported,
    Log,
    MailboxUrls,
    Manifest,
    Progress,
    Status,
    TrialCaps,
    parse_report_line,
    report_from_json,
)
from trainer.settings import Settings, Tunables
from trainer.tiny import demo_rows

SIGNATURE = "X-Amz-Signature=5ecret5ignature"


@dataclass
class PresignedStore:
    """An S3 stand-in that serves and accepts objects at presigned-looking URLs."""

    base: str = ""
    objects: dict[str, bytes] = field(default_factory=dict)
    puts: list[str] = field(default_factory=list)
    queries: set[str] = field(default_factory=set)

    def url(self, key: str) -> str:
        return f"{self.base}/bucket/{key}?{SIGNATURE}&X-Amz-Expires=3600"


@pytest.fixture
def store() -> Iterator[PresignedStore]:
    s = PresignedStore()

    class Handler(BaseHTTPRequestHandler):
        def _key(self) -> str:
            path, _, query = self.path.partition("?")
            s.queries.add(query)
            return path.removeprefix("/bucket/")

        def do_GET(self) -> None:
            data = s.objects.get(self._key())
            self.send_response(200 if data is not None else 404)
            self.send_header("Content-Length", str(len(data or b"")))
            self.end_headers()
            self.wfile.write(data or b"")

        def do_PUT(self) -> None:
            key = self._key()
            s.objects[key] = self.rfile.read(int(self.headers["Content-Length"]))
            s.puts.append(key)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    s.base = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield s
    server.shutdown()


def test_a_custom_s3_run_reads_and_writes_only_through_presigned_urls(
    store: PresignedStore, tiny_model: Path, tmp_path: Path
) -> None:
    run_id = "run-s3"
    for f in tiny_model.iterdir():
        store.objects[f"models/tiny/{f.name}"] = f.read_bytes()
    dataset = "".join(json.dumps(r) + "\n" for r in demo_rows(24)).encode()
    store.objects["datasets/d.jsonl"] = dataset
    manifest = Manifest(
        run_id=run_id,
        kind="trial",
        storage="s3",
        base_model=BaseModelSpec(
            source="storage",
            path="models/tiny",
            url_by_file={f.name: store.url(f"models/tiny/{f.name}") for f in tiny_model.iterdir()},
        ),
        dataset=DatasetSpec(
            object_key="datasets/d.jsonl",
            sha256=hashlib.sha256(dataset).hexdigest(),
            format="chat",
            url=store.url("datasets/d.jsonl"),
        ),
        adapter=AdapterSpec(
            object_key=f"runs/{run_id}/adapter.zip",
            upload_url=store.url(f"runs/{run_id}/adapter.zip"),
        ),
        hyperparameters=replace(HYPERPARAMETERS, max_steps=3),
        trial=TrialCaps(max_rows=24, max_steps=3),
        mailbox=MailboxUrls(
            status_url=store.url(f"runs/{run_id}/status.json"),
            result_url=store.url(f"runs/{run_id}/result.json"),
            log_urls=tuple(store.url(f"runs/{run_id}/logs/pool-{i:05d}.jsonl") for i in range(3)),
        ),
    )
    store.objects[f"runs/{run_id}/manifest.json"] = manifest.dumps().encode()
    volume_disk = tmp_path / "workspace"  # the Pod's own /workspace: no network volume
    settings = Settings(
        run_id=run_id,
        token=TOKEN,
        callback_url="",
        manifest_url=store.url(f"runs/{run_id}/manifest.json"),
        workspace=volume_disk,
        container_disk=tmp_path / "disk",
        tunables=Tunables(progress_s=0, log_flush_s=0.05),
    )
    ws = Workspace(volume_disk, settings, manifest)
    result, lines = run_in_process(ws)
    final = result.final
    assert isinstance(final, Exported) and final.partial is False, final
    # The adapter went up by the presigned PUT, and stays at the recovery path on the Pod (R10).
    uploaded = store.objects[f"runs/{run_id}/adapter.zip"]
    assert uploaded == (volume_disk / "data/adapter.zip").read_bytes()
    assert (
        hashlib.sha256(uploaded).hexdigest() == final.sha256 and len(uploaded) == final.size_bytes
    )
    # The mailbox: result.json last, status.json, log chunks from the pool.
    assert store.puts[-1] == f"runs/{run_id}/result.json"
    assert report_from_json(json.loads(store.objects[f"runs/{run_id}/result.json"])) == final
    status = Status.from_json(json.loads(store.objects[f"runs/{run_id}/status.json"]))
    assert status.progress.step == 3
    chunks = [k for k in store.objects if "/logs/pool-" in k]
    logged = [
        report_from_json(json.loads(line))
        for k in sorted(chunks)
        for line in store.objects[k].decode().splitlines()
    ]
    reports = [r for r in (parse_report_line(x) for x in lines) if r is not None]
    assert {r.seq for r in logged} <= {r.seq for r in reports if isinstance(r, Log)}
    assert logged and all(isinstance(r, Log) for r in logged)
    # The model's files came through presigned GETs: their bytes were reported as they came.
    downloads = [r for r in reports if isinstance(r, Progress) and r.phase == "downloading_model"]
    model_bytes = sum(
        p.stat().st_size for p in (tmp_path / "disk/base-model" / run_id).rglob("*") if p.is_file()
    )
    last = downloads[-1] if downloads else None
    assert last and last.bytes_done == last.bytes_total == model_bytes, downloads
    # Signatures are used, never shown; the container disk got the model and the dataset.
    assert store.queries and all(SIGNATURE in q for q in store.queries)
    assert SIGNATURE not in "\n".join(lines)
    assert (tmp_path / "disk/base-model" / run_id / "config.json").exists()
    # A restart (the volume disk survives it) finds the final record and idles; result again.
    store.puts.clear()
    again, _ = run_in_process(ws)
    assert again.already_finished and again.final == final
    assert store.puts == [f"runs/{run_id}/result.json"]
