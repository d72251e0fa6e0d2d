"""The sandbox's S3 front for RunPod network volumes: moto's S3 behind RunPod's rules.

Mounted by the sandbox at `/s3`; a datacenter's endpoint is `{base_url}/s3/{dc lower-case}`,
path-style, bucket = volume id, region = datacenter id. Every request is SigV4-verified with
botocore's own signer against the registered key pairs before it reaches moto; operations RunPod
does not offer answer `501 NotImplemented`, as RunPod's API does.

Isolation: moto keeps buckets in a process-global registry, so each instance stores its buckets
under a private name (`t<token>-<bucket>`) in its own moto account and rewrites the name back in
XML answers; two sandboxes in one process never see each other's buckets. Note that
`moto.mock_aws()` resets every moto backend when it starts, this one included.

Folder-backed buckets (`attach_folder`): a network volume is a folder on disk (what a Pod sees at
its mount). Before each request on such a bucket the folder's changed files are copied into moto
and files gone from disk are deleted there; after a request that changes an object, that object is
written back to the folder (or removed). So a file a Pod writes under `/workspace` is an object,
and an object PUT through S3 is a file, while moto keeps S3's semantics (listing, multipart, copy).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import io
import os
import secrets
import sys
import threading
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote, unquote, unquote_to_bytes
from xml.sax.saxutils import escape

import anyio.to_thread
import moto.s3.models as moto_s3_models
from botocore.auth import S3SigV4Auth, S3SigV4QueryAuth, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from moto.moto_server.werkzeug_app import create_backend_app
from moto.s3.models import s3_backends

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_PUT_BYTES = 500 * 1000 * 1000  # RunPod: PutObject < 500 MB, larger files must be multipart
CLOCK_SKEW = timedelta(hours=1)  # RunPod tolerates 1 hour (AWS: 15 minutes)
_SIGV4_FORMAT = "%Y%m%dT%H%M%SZ"
_LIST_PARAMS = frozenset(
    {
        "list-type",
        "prefix",
        "delimiter",
        "marker",
        "max-keys",
        "encoding-type",
        "continuation-token",
        "start-after",
        "fetch-owner",
    }
)
_OBJECT_SUBRESOURCES = frozenset(
    {"acl", "tagging", "torrent", "retention", "legal-hold", "attributes", "restore", "select"}
)
_CHANGES_OBJECT = frozenset({"PutObject", "CopyObject", "DeleteObject", "CompleteMultipartUpload"})
_DROPPED_HEADERS = frozenset({"expect", "host", "content-length", "content-type", "connection"})
_HOP_BY_HOP = frozenset({"connection", "transfer-encoding", "keep-alive", "server", "date"})

# RunPod does not enforce S3's 5 MB minimum part size; moto reads this module global at completion.
moto_s3_models.S3_UPLOAD_PART_MIN_SIZE = 0  # type: ignore[attr-defined]

_moto_app_lock = threading.Lock()
_moto_app: Any = None


def _shared_moto_app() -> Any:
    """One moto S3 WSGI app per process (stateless: state lives in moto's backends)."""
    global _moto_app  # noqa: PLW0603 - built lazily, once, under a lock
    with _moto_app_lock:
        if _moto_app is None:
            _moto_app = create_backend_app("s3")
        return _moto_app


class S3Error(Exception):
    """An S3 error answer: status, code and message as S3 gives them."""

    def __init__(self, status: int, code: str, message: str, **fields: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message, self.fields = status, code, message, fields

    def body(self, resource: str) -> bytes:
        extra = "".join(f"<{k}>{escape(v)}</{k}>" for k, v in self.fields.items())
        return (
            '<?xml version="1.0" encoding="UTF-8"?>\n<Error>'
            f"<Code>{self.code}</Code><Message>{escape(self.message)}</Message>{extra}"
            f"<Resource>{escape(resource)}</Resource><RequestId>{secrets.token_hex(8).upper()}"
            "</RequestId></Error>"
        ).encode()


def _not_implemented() -> S3Error:
    return S3Error(
        501, "NotImplemented", "This operation is not supported by the RunPod S3-compatible API"
    )


@dataclass(frozen=True)
class _KeyPair:
    secret: str
    buckets: frozenset[str] | None  # None: every bucket
    volumes: bool = False  # also every folder-backed bucket (a network volume made later)

    def __repr__(self) -> str:  # never print the secret
        return f"_KeyPair(buckets={self.buckets!r})"


@dataclass(frozen=True)
class _Request:
    method: str
    dc: str
    bucket: str
    key: str
    raw_key: str  # percent-encoded, as the client sent it
    query: list[tuple[str, str]]  # decoded pairs
    raw_query: str
    headers: dict[str, str]  # lower-case names; repeated headers joined with ","
    host: str
    raw_path: str

    def q(self) -> dict[str, str]:
        return dict(self.query)


class SandboxS3:
    """RunPod's network-volume S3 API, emulated in process with credentials enforced."""

    def __init__(
        self, access_key_id: str, secret_access_key: str, *, base_url: str | None = None
    ) -> None:
        self._lock = threading.Lock()
        self._keys: dict[str, _KeyPair] = {}
        self._buckets: dict[str, str] = {}  # public name -> datacenter id
        self._created: dict[str, datetime] = {}
        self._folders: dict[str, Path] = {}  # folder-backed buckets (network volumes)
        self._synced: dict[str, dict[str, tuple[int, int]]] = {}  # key -> (mtime_ns, size)
        self._folder_locks: dict[str, threading.RLock] = {}
        # Called with a bucket name moto does not know yet: (datacenter, folder) or None, so
        # volumes created after start (REST v2) get their S3 bucket on first use.
        self.resolver: Callable[[str], tuple[str, Path] | None] | None = None
        self._token = secrets.token_hex(4)
        self._account = str(100000000000 + secrets.randbelow(899999999999))
        self._primary = access_key_id
        self.base_url = base_url.rstrip("/") if base_url else None
        self.add_credentials(access_key_id, secret_access_key, None)

    def __repr__(self) -> str:
        return f"SandboxS3(buckets={sorted(self._buckets)!r})"

    # ------------------------------------------------------------ seeding (no HTTP)

    def add_credentials(
        self,
        access_key_id: str,
        secret_access_key: str,
        buckets: set[str] | None = None,
        *,
        volumes: bool = False,
    ) -> None:
        """Register a key pair; `buckets` limits it to those buckets (None: all of them);
        `volumes`: and to every network volume's bucket, those made later included."""
        with self._lock:
            self._keys[access_key_id] = _KeyPair(
                secret_access_key, frozenset(buckets) if buckets is not None else None, volumes
            )

    def create_bucket(self, name: str, datacenter_id: str) -> None:
        """A volume (bucket) in a datacenter; the bucket answers only on that datacenter's path."""
        with self._lock:
            if name in self._buckets:
                return
            self._backend().create_bucket(self._internal(name), "us-east-1")
            self._buckets[name] = datacenter_id.upper()
            self._created[name] = datetime.now(UTC)

    def attach_folder(self, bucket: str, datacenter_id: str, folder: Path) -> None:
        """Back `bucket` by `folder` (created if missing): the same storage on both sides."""
        folder.mkdir(parents=True, exist_ok=True)
        self.create_bucket(bucket, datacenter_id)
        with self._lock:
            self._folders[bucket] = folder
            self._synced.setdefault(bucket, {})
            self._folder_locks.setdefault(bucket, threading.RLock())

    def folder(self, bucket: str) -> Path | None:
        return self._folders.get(bucket)

    def _resolve(self, bucket: str) -> None:
        if bucket in self._buckets or self.resolver is None:
            return
        found = self.resolver(bucket)
        if found is not None:
            self.attach_folder(bucket, found[0], found[1])

    def sync_in(self, bucket: str, prefix: str = "") -> None:
        """Copy the folder's new or changed files into moto; delete what is gone from disk.
        Only keys under `prefix` (the request's key or listing prefix) are looked at."""
        folder = self._folders.get(bucket)
        if folder is None:
            return
        parts = PurePosixPath(prefix).parts
        if prefix.startswith("/") or ".." in parts:
            prefix, parts = "", ()
        start = folder.joinpath(*parts[:-1]) if parts else folder
        with self._folder_locks[bucket]:
            backend, internal = self._backend(), self._internal(bucket)
            state = self._synced[bucket]
            seen: set[str] = set()
            for root, _dirs, files in os.walk(start):
                for name in files:
                    path = Path(root) / name
                    key = path.relative_to(folder).as_posix()
                    if not key.startswith(prefix):
                        continue
                    try:
                        st = path.stat()
                    except OSError:
                        continue  # renamed away meanwhile (a temp file)
                    seen.add(key)
                    stamp = (st.st_mtime_ns, st.st_size)
                    if state.get(key) == stamp:
                        continue
                    try:
                        data = path.read_bytes()
                    except OSError:
                        seen.discard(key)
                        continue
                    backend.put_object(internal, key, data)
                    state[key] = stamp
            for key in [k for k in state if k.startswith(prefix) and k not in seen]:
                del state[key]
                with contextlib.suppress(Exception):  # moto's own NoSuchKey types
                    backend.delete_object(internal, key)

    def sync_out(self, bucket: str, key: str) -> None:
        """Write one object from moto to the folder (or remove its file when it is gone)."""
        folder = self._folders.get(bucket)
        parts = PurePosixPath(key).parts
        if folder is None or not parts or key.startswith("/") or ".." in parts:
            return
        path = folder.joinpath(*parts)
        with self._folder_locks[bucket]:
            state = self._synced[bucket]
            data = self._moto_get(bucket, key)
            if data is None:
                state.pop(key, None)
                if path.is_file():
                    path.unlink()
                return
            if key.endswith("/"):
                path.mkdir(parents=True, exist_ok=True)
                return
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.s3-{secrets.token_hex(4)}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, path)
            st = path.stat()
            state[key] = (st.st_mtime_ns, st.st_size)

    def put_object(self, bucket: str, key: str, data: bytes) -> None:
        folder = self._folders.get(bucket)
        if folder is not None:
            path = folder.joinpath(*PurePosixPath(key).parts)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            return
        self._backend().put_object(self._internal(bucket), key, data)

    def get_object(self, bucket: str, key: str) -> bytes | None:
        folder = self._folders.get(bucket)
        if folder is not None:
            parts = PurePosixPath(key).parts
            path = folder.joinpath(*parts)
            if not parts or ".." in parts or not path.is_file():
                return None
            return path.read_bytes()
        return self._moto_get(bucket, key)

    def _moto_get(self, bucket: str, key: str) -> bytes | None:
        try:
            obj = self._backend().get_object(self._internal(bucket), key)
        except Exception:  # moto raises its own NoSuchBucket/NoSuchKey types
            return None
        return None if obj is None else bytes(obj.value)

    def presign_put(self, bucket: str, key: str, expires_s: int = 3600) -> str:
        """A SigV4 query-signed PUT URL under this mount (needs `base_url`)."""
        if not self.base_url:
            raise RuntimeError("SandboxS3.base_url must be set (e.g. http://127.0.0.1:PORT)")
        dc = self._buckets.get(bucket)
        if dc is None:
            raise KeyError(f"no bucket {bucket!r}")
        pair = self._keys[self._primary]
        url = f"{self.base_url}/s3/{dc.lower()}/{quote(bucket, safe='')}/{quote(key, safe='/~')}"
        request = AWSRequest(method="PUT", url=url)
        S3SigV4QueryAuth(
            Credentials(self._primary, pair.secret), "s3", dc, expires=expires_s
        ).add_auth(request)
        return str(request.url)

    def close(self) -> None:
        """Drop this sandbox's buckets from moto's process-global state."""
        backend = self._backend()
        for name in list(self._buckets):
            internal = self._internal(name)
            bucket = backend.buckets.pop(internal, None)
            s3_backends.bucket_accounts.pop(internal, None)
            if bucket is not None:
                for key in bucket.keys.values():
                    key.dispose()
        self._buckets.clear()

    def _backend(self) -> Any:
        return s3_backends[self._account]["aws"]

    def _internal(self, bucket: str) -> str:
        return f"t{self._token}-{bucket}"

    # ------------------------------------------------------------ ASGI

    def asgi_app(self) -> ASGIApp:
        """The ASGI app to mount at `/s3` (paths below it: `/{dc}/{bucket}/{key}`)."""
        return self._asgi

    async def _asgi(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                kind = (await receive())["type"]
                if kind == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif kind == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        resource = scope.get("path", "")
        try:
            request = _parse(scope)
            resource = f"/{request.bucket}/{request.key}" if request.bucket else "/"
            await self._handle(request, receive, send)
        except S3Error as exc:
            body = exc.body(resource)
            head = scope["method"] == "HEAD"  # S3 answers HEAD errors with the status alone
            await _respond(
                send,
                exc.status,
                [("content-type", "application/xml")],
                b"" if head else body,
                content_length=len(body),
            )

    async def _handle(self, request: _Request, receive: Receive, send: Send) -> None:
        pair = self._authenticate(request)
        op = _operation(request)
        if op is None:
            raise _not_implemented()
        if op == "ListBuckets":
            await _respond(
                send, 200, [("content-type", "application/xml")], self._list_buckets(request, pair)
            )
            return
        self._resolve(request.bucket)
        self._authorize(request, pair, request.bucket)
        headers = dict(request.headers)
        if "x-amz-copy-source" in headers:
            headers["x-amz-copy-source"] = self._copy_source(request, pair, headers)
        body = await _read_body(receive, op, headers)
        _verify_payload(headers, body)
        status, out_headers, out = await anyio.to_thread.run_sync(
            self._call_with_folder, request, headers, body, op
        )
        if op not in ("GetObject", "HeadObject") or status >= 300:
            out = out.replace(self._internal(request.bucket).encode(), request.bucket.encode())
        if op == "HeadBucket":
            out_headers = [(k, v) for k, v in out_headers if k.lower() != "x-amz-bucket-region"]
            out_headers.append(("x-amz-bucket-region", request.dc.upper()))
        length = None
        if request.method == "HEAD":
            length = next((v for k, v in out_headers if k.lower() == "content-length"), None)
            out = b""
        await _respond(send, status, out_headers, out, content_length=length)

    def _authenticate(self, request: _Request) -> _KeyPair:
        """Verify SigV4 (header or query) with botocore's signer; return the caller's key pair."""
        auth = _parse_auth(request)
        with self._lock:
            pair = self._keys.get(auth.access_key)
        if pair is None:
            raise S3Error(
                403,
                "InvalidAccessKeyId",
                "The AWS Access Key Id you provided does not exist in our records.",
                AWSAccessKeyId=auth.access_key,
            )
        if auth.region.upper() != request.dc.upper():
            raise S3Error(
                400,
                "AuthorizationHeaderMalformed",
                f"the region '{auth.region}' is wrong; expecting '{request.dc.upper()}'",
                Region=request.dc.upper(),
            )
        expected = _signature(request, auth, pair.secret)
        if not hmac.compare_digest(expected, auth.signature):
            raise S3Error(
                403,
                "SignatureDoesNotMatch",
                "The request signature we calculated does not match the signature you "
                "provided. Check your key and signing method.",
                AWSAccessKeyId=auth.access_key,
            )
        return pair

    def _authorize(self, request: _Request, pair: _KeyPair, bucket: str) -> None:
        with self._lock:
            dc = self._buckets.get(bucket)
        if dc is None or dc.upper() != request.dc.upper():
            raise S3Error(
                404, "NoSuchBucket", "The specified bucket does not exist", BucketName=bucket
            )
        if not self._reaches(pair, bucket):
            raise S3Error(403, "AccessDenied", "Access Denied")

    def _reaches(self, pair: _KeyPair, bucket: str) -> bool:
        if pair.buckets is None or bucket in pair.buckets:
            return True
        return pair.volumes and bucket in self._folders

    def _copy_source(self, request: _Request, pair: _KeyPair, headers: dict[str, str]) -> str:
        source = headers["x-amz-copy-source"].lstrip("/")
        raw_bucket, _, rest = source.partition("/")
        bucket = unquote(raw_bucket)
        self._resolve(bucket)
        self._authorize(request, pair, bucket)
        self.sync_in(bucket)
        return f"/{self._internal(bucket)}/{rest}"

    def _list_buckets(self, request: _Request, pair: _KeyPair) -> bytes:
        with self._lock:
            names = sorted(
                n
                for n, dc in self._buckets.items()
                if dc.upper() == request.dc.upper() and self._reaches(pair, n)
            )
            created = {n: self._created[n] for n in names}
        items = "".join(
            f"<Bucket><Name>{escape(n)}</Name><CreationDate>"
            f"{created[n].strftime('%Y-%m-%dT%H:%M:%S.000Z')}</CreationDate></Bucket>"
            for n in names
        )
        return (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            '<ListAllMyBucketsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            "<Owner><ID>sandbox</ID><DisplayName>sandbox</DisplayName></Owner>"
            f"<Buckets>{items}</Buckets></ListAllMyBucketsResult>"
        ).encode()

    def _call_with_folder(
        self, request: _Request, headers: dict[str, str], body: bytes, op: str
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        lock = self._folder_locks.get(request.bucket)
        if lock is None:
            return self._call_moto(request, headers, body)
        with lock:
            listing = op in ("ListObjects", "ListObjectsV2")
            self.sync_in(request.bucket, request.q().get("prefix", "") if listing else request.key)
            answer = self._call_moto(request, headers, body)
            if answer[0] < 300 and op in _CHANGES_OBJECT:
                self.sync_out(request.bucket, request.key)
            return answer

    def _call_moto(
        self, request: _Request, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        raw = f"/{self._internal(request.bucket)}" + (f"/{request.raw_key}" if request.key else "")
        environ: dict[str, Any] = {
            "REQUEST_METHOD": request.method,
            "SCRIPT_NAME": "",
            "PATH_INFO": unquote_to_bytes(raw).decode("latin-1"),
            "QUERY_STRING": request.raw_query,
            "REQUEST_URI": raw + (f"?{request.raw_query}" if request.raw_query else ""),
            "RAW_URI": raw + (f"?{request.raw_query}" if request.raw_query else ""),
            "SERVER_NAME": "localhost",
            "SERVER_PORT": "80",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "HTTP_HOST": "localhost",
            "HTTP_X_MOTO_ACCOUNT_ID": self._account,
            "CONTENT_LENGTH": str(len(body)),
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": "http",
            "wsgi.input": io.BytesIO(body),
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": False,
            "wsgi.run_once": False,
        }
        if "content-type" in headers:
            environ["CONTENT_TYPE"] = headers["content-type"]
        for name, value in headers.items():
            if (
                name in _DROPPED_HEADERS
                or name.startswith("x-amz-checksum-")
                or name in ("x-amz-sdk-checksum-algorithm", "x-amz-trailer")
            ):
                continue  # RunPod ignores flexible checksums; so does the sandbox
            environ["HTTP_" + name.upper().replace("-", "_")] = value
        captured: dict[str, Any] = {}

        def start_response(status: str, hdrs: list[tuple[str, str]], exc_info: Any = None) -> Any:
            captured["status"], captured["headers"] = status, hdrs
            return lambda _data: None

        result: Iterable[bytes] = _shared_moto_app()(environ, start_response)
        try:
            out = b"".join(result)
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()
        hdrs = [(k, v) for k, v in captured["headers"] if k.lower() not in _HOP_BY_HOP]
        return int(captured["status"].split()[0]), hdrs, out


# ---------------------------------------------------------------- request parsing and SigV4


@dataclass(frozen=True)
class _Auth:
    access_key: str
    date: str  # yyyymmdd of the scope
    region: str
    signed_headers: list[str]
    signature: str
    timestamp: str  # x-amz-date
    presigned: bool
    expires: int = 0


def _parse(scope: Scope) -> _Request:
    raw_path = scope.get("raw_path") or scope["path"].encode()
    path = raw_path.decode("latin-1")
    root = scope.get("root_path", "")
    rel = path[len(root) :] if root and path.startswith(root) else path
    parts = rel.lstrip("/").split("/", 2)
    if not parts[0]:
        raise S3Error(400, "InvalidRequest", "the path must start with /{datacenter}")
    dc = unquote(parts[0])
    bucket = unquote(parts[1]) if len(parts) > 1 else ""
    raw_key = parts[2] if len(parts) > 2 else ""
    raw_query = scope.get("query_string", b"").decode("latin-1")
    query = [
        (unquote(k), unquote(v))
        for k, _, v in (p.partition("=") for p in raw_query.split("&") if p)
    ]
    headers: dict[str, str] = {}
    for name_b, value_b in scope.get("headers", []):
        name, value = name_b.decode("latin-1").lower(), value_b.decode("latin-1")
        headers[name] = f"{headers[name]},{value}" if name in headers else value
    return _Request(
        method=scope["method"],
        dc=dc,
        bucket=bucket,
        key=unquote(raw_key),
        raw_key=raw_key,
        query=query,
        raw_query=raw_query,
        headers=headers,
        host=headers.get("host", ""),
        raw_path=path,
    )


def _parse_auth(request: _Request) -> _Auth:
    header = request.headers.get("authorization")
    q = request.q()
    if header:
        if not header.startswith("AWS4-HMAC-SHA256 "):
            raise S3Error(400, "InvalidArgument", "only AWS4-HMAC-SHA256 (SigV4) is supported")
        fields = dict(item.strip().partition("=")[::2] for item in header[17:].split(","))
        credential = fields.get("Credential", "")
        signed, signature = fields.get("SignedHeaders", ""), fields.get("Signature", "")
        timestamp = request.headers.get("x-amz-date", "")
        presigned, expires = False, 0
    elif "X-Amz-Signature" in q:
        credential, signed = q.get("X-Amz-Credential", ""), q.get("X-Amz-SignedHeaders", "")
        signature, timestamp = q["X-Amz-Signature"], q.get("X-Amz-Date", "")
        presigned = True
        try:
            expires = int(q.get("X-Amz-Expires", "0"))
        except ValueError:
            expires = -1
    else:
        raise S3Error(403, "AccessDenied", "Anonymous access is not allowed")
    scope = credential.split("/")
    if len(scope) != 5 or scope[3] != "s3" or scope[4] != "aws4_request" or not signed:
        raise S3Error(400, "AuthorizationHeaderMalformed", "the authorization is malformed")
    if not presigned and "x-amz-content-sha256" not in signed.split(";"):
        raise S3Error(400, "InvalidRequest", "x-amz-content-sha256 must be signed")
    try:
        when = datetime.strptime(timestamp, _SIGV4_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        raise S3Error(403, "AccessDenied", "AWS authentication requires a valid date") from None
    now = datetime.now(UTC)
    if presigned:
        if not 0 < expires <= 604800 or now > when + timedelta(seconds=expires):
            raise S3Error(403, "AccessDenied", "Request has expired")
    elif abs(now - when) > CLOCK_SKEW:
        raise S3Error(
            403,
            "RequestTimeTooSkewed",
            "The difference between the request time and the current time is too large.",
        )
    return _Auth(
        scope[0], scope[1], scope[2], signed.split(";"), signature, timestamp, presigned, expires
    )


def _signature(request: _Request, auth: _Auth, secret: str) -> str:
    """Recompute the signature with botocore's signer over what the client said it signed."""
    headers = {name: request.headers.get(name, "") for name in auth.signed_headers}
    params = [(k, v) for k, v in request.query if k != "X-Amz-Signature"]
    url = f"http://{request.host}{request.raw_path}"
    aws = AWSRequest(method=request.method, url=url, headers=headers)
    aws.params = params  # canonicalised (decoded, then re-encoded) by the signer
    aws.context["timestamp"] = auth.timestamp
    signer: SigV4Auth = (S3SigV4QueryAuth if auth.presigned else S3SigV4Auth)(
        Credentials(auth.access_key, secret), "s3", auth.region
    )
    canonical = signer.canonical_request(aws)
    if auth.date != auth.timestamp[:8]:
        return ""
    return str(signer.signature(signer.string_to_sign(aws, canonical), aws))


def _operation(request: _Request) -> str | None:  # noqa: PLR0911, PLR0912 - a routing table
    """The S3 operation RunPod supports that this request is, or None (unsupported)."""
    m, q = request.method, request.q()
    if not request.bucket:
        return "ListBuckets" if m == "GET" else None
    if not request.key:
        if m == "HEAD":
            return "HeadBucket"
        if m == "GET" and "uploads" in q:
            return "ListMultipartUploads"
        if m == "GET" and set(q) <= _LIST_PARAMS:
            return "ListObjectsV2" if q.get("list-type") == "2" else "ListObjects"
        return None  # CreateBucket, DeleteBucket, DeleteObjects, location, versioning, ACL, ...
    if set(q) & _OBJECT_SUBRESOURCES:
        return None
    if m in ("GET", "HEAD"):
        if "uploadId" in q:
            return "ListParts" if m == "GET" else None
        return "GetObject" if m == "GET" else "HeadObject"
    if m == "PUT":
        if "uploadId" in q and "partNumber" in q:
            return "UploadPart"
        return "CopyObject" if "x-amz-copy-source" in request.headers else "PutObject"
    if m == "DELETE":
        return "AbortMultipartUpload" if "uploadId" in q else "DeleteObject"
    if m == "POST":
        if "uploads" in q:
            return "CreateMultipartUpload"
        if "uploadId" in q:
            return "CompleteMultipartUpload"
    return None


async def _read_body(receive: Receive, op: str, headers: dict[str, str]) -> bytes:
    limit = MAX_PUT_BYTES if op in ("PutObject", "UploadPart") else 64 * 1024 * 1024
    too_large = S3Error(
        400,
        "EntityTooLarge",
        "Your proposed upload exceeds the maximum allowed size (500 MB; use multipart)",
    )
    declared = headers.get("x-amz-decoded-content-length") or headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _verify_payload(headers: dict[str, str], body: bytes) -> None:
    declared = headers.get("x-amz-content-sha256", "")
    hashed = len(declared) == 64 and all(c in "0123456789abcdef" for c in declared)
    if hashed and hashlib.sha256(body).hexdigest() != declared:
        raise S3Error(
            400,
            "XAmzContentSHA256Mismatch",
            "The provided 'x-amz-content-sha256' header does not match what was computed.",
        )


async def _respond(
    send: Send,
    status: int,
    headers: list[tuple[str, str]],
    body: bytes,
    content_length: str | int | None = None,
) -> None:
    out = [(k.lower(), v) for k, v in headers if k.lower() != "content-length"]
    out.append(("content-length", str(content_length if content_length is not None else len(body))))
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(k.encode("latin-1"), str(v).encode("latin-1")) for k, v in out],
        }
    )
    await send({"type": "http.response.body", "body": body})
