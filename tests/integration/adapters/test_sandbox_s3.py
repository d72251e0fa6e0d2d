"""The sandbox's S3 front for RunPod network volumes, driven over HTTP by plain boto3 (S2, C5)."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import boto3
import botocore.exceptions
import pytest
import requests
import uvicorn
from botocore.config import Config
from starlette.applications import Starlette
from starlette.routing import Mount

from runpod_sandbox.s3 import SandboxS3

ACCESS, SECRET = "user_2abcDEF", "rps_S3CR3Tvalue0123456789"
DC, VOLUME = "EUR-IS-1", "vol1abc2de"


@contextmanager
def serve_asgi(app: Any) -> Iterator[str]:
    """Serve an ASGI app with uvicorn (HTTP/1.1) on a free loopback port; yield its base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, log_level="warning", http="h11", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 5
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(5)
        sock.close()


def s3_client(endpoint: str, region: str, access: str = ACCESS, secret: str = SECRET) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=region,
        aws_access_key_id=access,
        aws_secret_access_key=secret,
        config=Config(
            signature_version="s3v4",
            s3={"addressing_style": "path"},
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            retries={"mode": "standard", "max_attempts": 1},
        ),
    )


@pytest.fixture(scope="module")
def sandbox() -> Iterator[tuple[SandboxS3, str]]:
    s3 = SandboxS3(ACCESS, SECRET)
    s3.create_bucket(VOLUME, DC)
    with serve_asgi(Starlette(routes=[Mount("/s3", app=s3.asgi_app())])) as base:
        s3.base_url = base
        yield s3, base
    s3.close()


@pytest.fixture
def client(sandbox: tuple[SandboxS3, str]) -> Any:
    return s3_client(f"{sandbox[1]}/s3/{DC.lower()}", DC)


def error_code(exc: pytest.ExceptionInfo[botocore.exceptions.ClientError]) -> str:
    return str(exc.value.response["Error"]["Code"])


def test_head_bucket_answers_for_a_volume_in_its_datacenter(client: Any) -> None:
    head = client.head_bucket(Bucket=VOLUME)
    assert head["ResponseMetadata"]["HTTPStatusCode"] == 200


def test_head_bucket_is_404_for_an_unknown_volume_or_another_datacenter(
    client: Any, sandbox: tuple[SandboxS3, str]
) -> None:
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        client.head_bucket(Bucket="nosuchvol")
    assert error_code(exc) == "404"
    other = s3_client(f"{sandbox[1]}/s3/eu-ro-1", "EU-RO-1")
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        other.head_bucket(Bucket=VOLUME)
    assert error_code(exc) == "404"


def test_put_get_head_delete_roundtrip(client: Any, sandbox: tuple[SandboxS3, str]) -> None:
    client.head_bucket(Bucket=VOLUME)  # the client's first call loads and builds what it needs
    took = []
    for _ in range(3):
        started = time.monotonic()
        client.put_object(Bucket=VOLUME, Key="runs/r1/config.json", Body=b'{"a": 1}')
        took.append(time.monotonic() - started)
    # Expect: 100-continue is answered: an unanswered one stalls every PUT for botocore's 1 s,
    # while a busy machine slows one PUT now and then (the fastest of three is judged).
    assert min(took) < 0.8, took
    assert client.get_object(Bucket=VOLUME, Key="runs/r1/config.json")["Body"].read() == b'{"a": 1}'
    assert client.head_object(Bucket=VOLUME, Key="runs/r1/config.json")["ContentLength"] == 8
    assert sandbox[0].get_object(VOLUME, "runs/r1/config.json") == b'{"a": 1}'
    client.delete_object(Bucket=VOLUME, Key="runs/r1/config.json")
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        client.head_object(Bucket=VOLUME, Key="runs/r1/config.json")
    assert error_code(exc) == "404"
    assert sandbox[0].get_object(VOLUME, "runs/r1/config.json") is None


def test_list_with_url_encoding_returns_keys_with_spaces_and_hashes(client: Any) -> None:
    keys = ["odd/a b.txt", "odd/c#d.txt", "odd/e+f%g.txt", "odd/ü.txt"]
    for key in keys:
        client.put_object(Bucket=VOLUME, Key=key, Body=key.encode())
    # botocore asks for encoding-type=url on its own and decodes the keys it gets back
    listed = client.list_objects_v2(Bucket=VOLUME, Prefix="odd/")
    assert sorted(o["Key"] for o in listed["Contents"]) == sorted(keys)
    v1 = client.list_objects(Bucket=VOLUME, Prefix="odd/")
    assert sorted(o["Key"] for o in v1["Contents"]) == sorted(keys)
    raw = client.list_objects_v2(Bucket=VOLUME, Prefix="odd/", EncodingType="url")
    assert "odd/a%20b.txt" in [o["Key"] for o in raw["Contents"]]
    assert client.get_object(Bucket=VOLUME, Key="odd/c#d.txt")["Body"].read() == b"odd/c#d.txt"


def test_seeded_objects_are_visible_over_http(client: Any, sandbox: tuple[SandboxS3, str]) -> None:
    sandbox[0].put_object(VOLUME, "seeded/x.bin", b"xyz")
    assert client.get_object(Bucket=VOLUME, Key="seeded/x.bin")["Body"].read() == b"xyz"


def test_copy_object_within_a_volume(client: Any) -> None:
    client.put_object(Bucket=VOLUME, Key="copy/src", Body=b"data")
    client.copy_object(
        Bucket=VOLUME, Key="copy/dst", CopySource={"Bucket": VOLUME, "Key": "copy/src"}
    )
    assert client.get_object(Bucket=VOLUME, Key="copy/dst")["Body"].read() == b"data"


def test_multipart_upload_with_small_parts_as_runpod_allows(client: Any) -> None:
    upload = client.create_multipart_upload(Bucket=VOLUME, Key="mp/big.bin")
    uid = upload["UploadId"]
    listed = client.list_multipart_uploads(Bucket=VOLUME)
    assert [u["UploadId"] for u in listed.get("Uploads", [])] == [uid]
    parts = []
    for n, chunk in enumerate([b"a" * 1000, b"b" * 10], start=1):
        etag = client.upload_part(
            Bucket=VOLUME, Key="mp/big.bin", UploadId=uid, PartNumber=n, Body=chunk
        )["ETag"]
        parts.append({"PartNumber": n, "ETag": etag})
    assert len(client.list_parts(Bucket=VOLUME, Key="mp/big.bin", UploadId=uid)["Parts"]) == 2
    client.complete_multipart_upload(
        Bucket=VOLUME, Key="mp/big.bin", UploadId=uid, MultipartUpload={"Parts": parts}
    )
    assert (
        client.get_object(Bucket=VOLUME, Key="mp/big.bin")["Body"].read() == b"a" * 1000 + b"b" * 10
    )
    other = client.create_multipart_upload(Bucket=VOLUME, Key="mp/aborted.bin")["UploadId"]
    client.abort_multipart_upload(Bucket=VOLUME, Key="mp/aborted.bin", UploadId=other)


def test_list_buckets_lists_the_volumes_of_the_datacenter(client: Any) -> None:
    assert [b["Name"] for b in client.list_buckets()["Buckets"]] == [VOLUME]


@pytest.mark.parametrize(
    ("access", "secret", "code"),
    [
        ("user_unknown", SECRET, "InvalidAccessKeyId"),
        ("rpa_ABCDEF0123456789", SECRET, "InvalidAccessKeyId"),  # a RunPod API key is not an S3 key
        (ACCESS, "rps_wrong", "SignatureDoesNotMatch"),
    ],
)
def test_wrong_key_pairs_are_refused_as_s3_refuses_them(
    sandbox: tuple[SandboxS3, str], access: str, secret: str, code: str
) -> None:
    bad = s3_client(f"{sandbox[1]}/s3/{DC.lower()}", DC, access, secret)
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        bad.list_objects_v2(Bucket=VOLUME)
    assert error_code(exc) == code
    assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        bad.head_bucket(Bucket=VOLUME)
    assert error_code(exc) == "403"


def test_unsigned_requests_are_refused(sandbox: tuple[SandboxS3, str]) -> None:
    answer = requests.get(f"{sandbox[1]}/s3/{DC.lower()}/{VOLUME}", timeout=5)
    assert answer.status_code == 403
    assert b"<Code>AccessDenied</Code>" in answer.content


def test_operations_runpod_lacks_answer_not_implemented(client: Any) -> None:
    client.put_object(Bucket=VOLUME, Key="keep/me", Body=b"1")
    calls: list[Callable[[], object]] = [
        lambda: client.delete_objects(Bucket=VOLUME, Delete={"Objects": [{"Key": "keep/me"}]}),
        lambda: client.create_bucket(Bucket="newvol"),
        lambda: client.delete_bucket(Bucket=VOLUME),
        lambda: client.get_bucket_location(Bucket=VOLUME),
        lambda: client.get_bucket_versioning(Bucket=VOLUME),
        lambda: client.get_object_acl(Bucket=VOLUME, Key="keep/me"),
        lambda: client.put_object_tagging(
            Bucket=VOLUME, Key="keep/me", Tagging={"TagSet": [{"Key": "a", "Value": "b"}]}
        ),
    ]
    for call in calls:
        with pytest.raises(botocore.exceptions.ClientError) as exc:
            call()
        assert error_code(exc) == "NotImplemented"
        assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 501
    assert client.get_object(Bucket=VOLUME, Key="keep/me")["Body"].read() == b"1"


def test_presigned_put_works_with_a_plain_http_put(sandbox: tuple[SandboxS3, str]) -> None:
    s3, _ = sandbox
    url = s3.presign_put(VOLUME, "uploads/adapter.zip", expires_s=60)
    answer = requests.put(url, data=b"zipbytes", timeout=5)
    assert answer.status_code == 200, answer.text
    assert s3.get_object(VOLUME, "uploads/adapter.zip") == b"zipbytes"
    tampered = url.replace("adapter.zip", "other.zip")
    assert requests.put(tampered, data=b"x", timeout=5).status_code == 403


def test_a_second_key_pair_sees_only_its_buckets(sandbox: tuple[SandboxS3, str]) -> None:
    s3, base = sandbox
    s3.create_bucket("custom-bucket", "us-east-1")
    s3.add_credentials("AKIACUSTOM", "custom-secret", {"custom-bucket"})
    custom = s3_client(f"{base}/s3/us-east-1", "us-east-1", "AKIACUSTOM", "custom-secret")
    custom.put_object(Bucket="custom-bucket", Key="k", Body=b"v")
    assert s3.get_object("custom-bucket", "k") == b"v"
    denied = s3_client(f"{base}/s3/{DC.lower()}", DC, "AKIACUSTOM", "custom-secret")
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        denied.get_object(Bucket=VOLUME, Key="keep/me")
    assert error_code(exc) == "AccessDenied"


def test_two_sandboxes_do_not_see_each_others_buckets() -> None:
    first, second = SandboxS3("a", "b"), SandboxS3("a", "b")
    try:
        first.create_bucket("samevol", DC)
        second.create_bucket("samevol", DC)
        first.put_object("samevol", "k", b"1")
        assert second.get_object("samevol", "k") is None
    finally:
        first.close()
        second.close()


def test_repr_hides_the_secret() -> None:
    s3 = SandboxS3(ACCESS, SECRET)
    assert SECRET not in repr(s3)
    assert SECRET not in repr(s3._keys)


def test_a_put_over_500_mb_is_refused_before_its_body_is_read(
    sandbox: tuple[SandboxS3, str],
) -> None:
    s3, _ = sandbox
    url = s3.presign_put(VOLUME, "huge.bin", expires_s=60)
    host, _, rest = url.removeprefix("http://").partition("/")
    conn = http.client.HTTPConnection(host, timeout=5)
    conn.putrequest("PUT", "/" + rest)
    conn.putheader("Content-Length", str(600 * 1000 * 1000))
    conn.putheader("Expect", "100-continue")
    conn.endheaders()
    answer = conn.getresponse()
    assert answer.status == 400
    assert b"<Code>EntityTooLarge</Code>" in answer.read()
    conn.close()
