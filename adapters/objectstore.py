"""The ObjectStore port over boto3: RunPod network volumes (S3-compatible API) and custom S3."""

from __future__ import annotations

import hmac
import secrets
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, BinaryIO

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from adapters.ssrf import Resolver, check_endpoint
from application.errors import StorageCheckFailed, VolumeNotFound
from application.ports import ObjectInfo, S3Credentials, StorageLocation

MIB = 1024 * 1024
PROBE_PREFIX = ".tensorant/probe-"
_CACHE_SIZE = 64
_ACCESS_DENIED = "access denied: check the S3 access key and secret"
_RUNPOD_KEY_HINT = (
    " (a RunPod volume needs the S3 API key pair from Settings > S3 API Keys:"
    " access key user_..., secret rps_...; not the RunPod API key)"
)


class S3ObjectStore:
    """ObjectStore over boto3; clients are cached per (endpoint, region, access key id)."""

    def __init__(
        self,
        runpod_endpoint_template: str = "https://s3api-{dc}.runpod.io",
        allow_endpoints: Sequence[str] = (),
        timeout_s: float = 10,
        *,
        multipart_threshold: int = 8 * MIB,
        part_size: int = 8 * MIB,
        max_attempts: int = 3,
        resolver: Resolver | None = None,
    ) -> None:
        if part_size <= 0 or multipart_threshold <= 0:
            raise ValueError("part_size and multipart_threshold must be positive")
        self._template = runpod_endpoint_template
        self._allow = tuple(allow_endpoints)
        self._timeout_s = timeout_s
        self._threshold = multipart_threshold
        self._part_size = part_size
        self._max_attempts = max_attempts
        self._resolver = resolver
        self._lock = threading.Lock()
        self._clients: OrderedDict[tuple[str, str, str], Any] = OrderedDict()

    def __repr__(self) -> str:
        return f"S3ObjectStore(template={self._template!r}, clients={len(self._clients)})"

    def endpoint_for_datacenter(self, datacenter_id: str) -> str:
        return self._template.format(dc=datacenter_id.lower())

    # ------------------------------------------------------------ the port

    def check(self, location: StorageLocation, credentials: S3Credentials) -> None:
        """HeadBucket, then write, read back and delete a probe; each failure names its step."""
        client = self._client(location, credentials)
        with self._translate("head_bucket", location, credentials, bucket_level=True):
            client.head_bucket(Bucket=location.bucket)
        key = f"{PROBE_PREFIX}{uuid.uuid4()}"
        payload = f"tensorant storage probe {secrets.token_hex(16)}\n".encode()
        with self._translate("write", location, credentials):
            client.put_object(Bucket=location.bucket, Key=key, Body=payload)
        with self._translate("read", location, credentials):
            got = client.get_object(Bucket=location.bucket, Key=key)["Body"].read()
        if got != payload:
            raise StorageCheckFailed(
                "read", "the probe object read back differs from what was written"
            )
        with self._translate("delete", location, credentials):
            client.delete_object(Bucket=location.bucket, Key=key)

    def head(
        self, location: StorageLocation, credentials: S3Credentials, key: str
    ) -> ObjectInfo | None:
        client = self._client(location, credentials)
        try:
            with self._translate("head", location, credentials, missing_ok=True):
                answer = client.head_object(Bucket=location.bucket, Key=key)
        except _Missing:
            return None
        return ObjectInfo(key=key, size=int(answer["ContentLength"]), etag=_etag(answer))

    def get(self, location: StorageLocation, credentials: S3Credentials, key: str) -> bytes:
        client = self._client(location, credentials)
        try:
            with self._translate("read", location, credentials, missing_ok=True):
                return bytes(client.get_object(Bucket=location.bucket, Key=key)["Body"].read())
        except _Missing:
            raise StorageCheckFailed("read", f"no object {key!r} in {location.bucket}") from None

    def download(
        self, location: StorageLocation, credentials: S3Credentials, key: str, into: BinaryIO
    ) -> bool:
        """Stream the object into `into` in 1 MiB chunks; False when it does not exist."""
        client = self._client(location, credentials)
        try:
            with self._translate("read", location, credentials, missing_ok=True):
                body = client.get_object(Bucket=location.bucket, Key=key)["Body"]
                try:
                    for chunk in body.iter_chunks(MIB):
                        into.write(chunk)
                finally:
                    body.close()
        except _Missing:
            return False
        into.flush()
        return True

    def upload(
        self, location: StorageLocation, credentials: S3Credentials, key: str, source: BinaryIO
    ) -> None:
        """Stream a file to the object: one PUT below the threshold, else multipart parts."""
        client = self._client(location, credentials)
        with self._translate("write", location, credentials):
            first = source.read(self._threshold)
            if len(first) < self._threshold:
                client.put_object(Bucket=location.bucket, Key=key, Body=first)
                return
            upload_id = client.create_multipart_upload(Bucket=location.bucket, Key=key)["UploadId"]
            try:
                parts = []
                chunk, number = first, 1
                while chunk:
                    answer = client.upload_part(
                        Bucket=location.bucket,
                        Key=key,
                        UploadId=upload_id,
                        PartNumber=number,
                        Body=chunk,
                    )
                    parts.append({"PartNumber": number, "ETag": answer["ETag"]})
                    chunk, number = source.read(self._part_size), number + 1
                client.complete_multipart_upload(
                    Bucket=location.bucket,
                    Key=key,
                    UploadId=upload_id,
                    MultipartUpload={"Parts": parts},
                )
            except BaseException:
                with suppress(ClientError, BotoCoreError):
                    client.abort_multipart_upload(
                        Bucket=location.bucket, Key=key, UploadId=upload_id
                    )
                raise

    def put(
        self, location: StorageLocation, credentials: S3Credentials, key: str, data: bytes
    ) -> None:
        client = self._client(location, credentials)
        with self._translate("write", location, credentials):
            if len(data) < self._threshold:
                client.put_object(Bucket=location.bucket, Key=key, Body=data)
            else:
                self._put_multipart(client, location.bucket, key, data)

    def delete(self, location: StorageLocation, credentials: S3Credentials, key: str) -> None:
        client = self._client(location, credentials)
        with self._translate("delete", location, credentials):
            client.delete_object(Bucket=location.bucket, Key=key)

    def list(
        self, location: StorageLocation, credentials: S3Credentials, prefix: str = ""
    ) -> list[ObjectInfo]:
        """Objects under `prefix`; RunPod's directory entries (keys ending in `/`) are skipped."""
        client = self._client(location, credentials)
        found: list[ObjectInfo] = []
        seen_tokens: set[str] = set()
        request: dict[str, Any] = {"Bucket": location.bucket, "Prefix": prefix}
        with self._translate("list", location, credentials):
            while True:
                page = client.list_objects_v2(**request)
                found.extend(
                    ObjectInfo(key=o["Key"], size=int(o.get("Size", 0)), etag=_etag(o))
                    for o in page.get("Contents", [])
                    if not o["Key"].endswith("/")
                )
                token = page.get("NextContinuationToken")
                if not page.get("IsTruncated") or not token:
                    return found
                if token in seen_tokens:  # a known RunPod quirk on big directories
                    raise StorageCheckFailed("list", "the endpoint repeated a continuation token")
                seen_tokens.add(token)
                request["ContinuationToken"] = token

    def presign_put(
        self, location: StorageLocation, credentials: S3Credentials, key: str, expires_s: int
    ) -> str:
        return self._presign("put_object", "PUT", location, credentials, key, expires_s)

    def presign_get(
        self, location: StorageLocation, credentials: S3Credentials, key: str, expires_s: int
    ) -> str:
        return self._presign("get_object", "GET", location, credentials, key, expires_s)

    def _presign(
        self,
        operation: str,
        method: str,
        location: StorageLocation,
        credentials: S3Credentials,
        key: str,
        expires_s: int,
    ) -> str:
        if location.kind == "runpod_volume":
            raise StorageCheckFailed(
                "presign", "RunPod network volumes do not support presigned URLs"
            )
        client = self._client(location, credentials)
        with self._translate("presign", location, credentials):
            url: str = client.generate_presigned_url(
                operation,
                Params={"Bucket": location.bucket, "Key": key},
                ExpiresIn=expires_s,
                HttpMethod=method,
            )
        return url

    # ------------------------------------------------------------ internals

    def _put_multipart(self, client: Any, bucket: str, key: str, data: bytes) -> None:
        upload_id = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
        try:
            parts = []
            for number, start in enumerate(range(0, len(data), self._part_size), start=1):
                chunk = data[start : start + self._part_size]
                answer = client.upload_part(
                    Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=chunk
                )
                parts.append({"PartNumber": number, "ETag": answer["ETag"]})
            client.complete_multipart_upload(
                Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}
            )
        except BaseException:
            # the original failure is what matters; RunPod cleans its hidden parts on abort
            with suppress(ClientError, BotoCoreError):
                client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
            raise

    def _client(self, location: StorageLocation, credentials: S3Credentials) -> Any:
        if location.kind == "s3":
            check_endpoint(location.endpoint_url, self._allow, resolver=self._resolver)
        elif location.kind != "runpod_volume":
            raise StorageCheckFailed("configure", f"unknown storage kind {location.kind!r}")
        cache_key = (location.endpoint_url, location.region, credentials.access_key_id)
        with self._lock:
            client = self._clients.get(cache_key)
            if client is not None and _same_secret(client, credentials.secret_access_key):
                self._clients.move_to_end(cache_key)
                return client
            client = boto3.session.Session().client(
                "s3",
                endpoint_url=location.endpoint_url,
                region_name=location.region,
                aws_access_key_id=credentials.access_key_id,
                aws_secret_access_key=credentials.secret_access_key,
                config=Config(
                    signature_version="s3v4",
                    s3={"addressing_style": "path"},
                    request_checksum_calculation="when_required",
                    response_checksum_validation="when_required",
                    retries={"mode": "standard", "max_attempts": self._max_attempts},
                    connect_timeout=self._timeout_s,
                    # RunPod's CompleteMultipartUpload on large files can be slow
                    read_timeout=self._timeout_s * 6,
                ),
            )
            self._clients[cache_key] = client
            while len(self._clients) > _CACHE_SIZE:
                self._clients.popitem(last=False)
            return client

    @contextmanager
    def _translate(
        self,
        step: str,
        location: StorageLocation,
        credentials: S3Credentials,
        *,
        bucket_level: bool = False,
        missing_ok: bool = False,
    ) -> Iterator[None]:
        """Turn botocore failures into our errors; the secret never reaches an error text."""
        scrub = _scrubber(credentials.secret_access_key)
        try:
            yield
        except ClientError as exc:
            error = exc.response.get("Error", {})
            code = str(error.get("Code", ""))
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
            if status == 404 or code in ("NoSuchBucket", "NoSuchKey", "NotFound", "404"):
                if code == "NoSuchBucket" or bucket_level:
                    raise VolumeNotFound(step, scrub(_no_bucket(location))) from None
                if missing_ok:
                    raise _Missing from None
            detail = _client_error_detail(code, status, str(error.get("Message", "")), location)
            raise StorageCheckFailed(step, scrub(detail)) from None
        except BotoCoreError as exc:
            raise StorageCheckFailed(
                step, scrub(f"cannot reach {location.endpoint_url}: {type(exc).__name__}: {exc}")
            ) from None


class _Missing(Exception):
    """An object (not the bucket) is absent; callers decide what that means."""


def _client_error_detail(code: str, status: int, message: str, location: StorageLocation) -> str:
    if status == 403 or code in (
        "403",
        "AccessDenied",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
    ):
        hint = _RUNPOD_KEY_HINT if location.kind == "runpod_volume" else ""
        return f"{_ACCESS_DENIED}{hint}" + (f" ({code})" if code and code != "403" else "")
    if code in ("AuthorizationHeaderMalformed", "IllegalLocationConstraintException"):
        return f"the region {location.region!r} is wrong for this endpoint ({code})"
    if status == 501 or code == "NotImplemented":
        return f"the endpoint does not support this operation ({code or status})"
    if code == "RequestTimeTooSkewed":
        return "the clock of this server differs too much from the endpoint's"
    return f"the endpoint answered {status} {code}: {message}".rstrip(": ")


def _no_bucket(location: StorageLocation) -> str:
    if location.kind == "runpod_volume":
        return (
            f"no network volume {location.bucket!r} in datacenter {location.region} "
            f"({location.endpoint_url})"
        )
    return f"no bucket {location.bucket!r} at {location.endpoint_url}"


def _scrubber(secret: str) -> Callable[[str], str]:
    def scrub(text: str) -> str:
        return text.replace(secret, "***") if secret else text

    return scrub


def _same_secret(client: Any, secret: str) -> bool:
    frozen = client._request_signer._credentials.get_frozen_credentials()
    return hmac.compare_digest(frozen.secret_key.encode(), secret.encode())


def _etag(answer: dict[str, Any]) -> str | None:
    etag = answer.get("ETag")
    return str(etag).strip('"') if etag else None
