"""The secret vault of C6: envelope encryption over SQLite or PostgreSQL.

Each organization has a random 256-bit data key (AES-GCM) that encrypts its secrets with the
associated data `org_id|name`; the data key is stored wrapped (AES-GCM) by a master key, tagged
with the master key's id so several master keys can coexist while one rotates to another.
Shredding an organization deletes its data key, which leaves nothing that can decrypt its secrets.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import secrets
import sqlite3
import stat
import threading
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from application.errors import SecretUnavailable
from projections.store.pg import take_ddl_lock

KEY_BYTES = 32
_NONCE_BYTES = 12
_PREFIX_RE = re.compile(r"^[a-z_][a-z0-9_]{0,40}$")


# ---------------------------------------------------------------- master keys


def master_key_from_env(value: str) -> bytes:
    """Decode a urlsafe-base64 master key (32 bytes); the message never repeats the value."""
    text = value.strip()
    try:
        key = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
    except (ValueError, TypeError):
        raise ValueError("the master key is not urlsafe base64") from None
    if len(key) != KEY_BYTES:
        raise ValueError(f"the master key must decode to {KEY_BYTES} bytes, not {len(key)}")
    return key


def new_master_key_text() -> str:
    """A fresh master key as urlsafe base64 text (what the key file and env variable hold)."""
    return base64.urlsafe_b64encode(secrets.token_bytes(KEY_BYTES)).decode()


def load_or_create_master_key(path: Path) -> bytes:
    """Read the key file, creating it with mode 0600 when missing; refuse one others can read."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as handle:
            handle.write(new_master_key_text() + "\n")
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & stat.S_IRWXO:
        raise PermissionError(f"{path} is accessible to other users (mode {mode:o}); chmod 600 it")
    if mode & stat.S_IRWXG:
        warnings.warn(f"{path} is readable by its group (mode {mode:o})", stacklevel=2)
    return master_key_from_env(path.read_text())


def key_id(master_key: bytes) -> str:
    """A short public id of a master key (a domain-separated digest; reveals nothing usable)."""
    return hashlib.sha256(b"tensorant-vault-master-key-id\x00" + master_key).hexdigest()[:16]


class _MasterKeys:
    """The master keys this vault holds; the first one wraps new data keys."""

    def __init__(self, keys: Sequence[bytes]) -> None:
        if not keys:
            raise ValueError("at least one master key is needed")
        for key in keys:
            if len(key) != KEY_BYTES:
                raise ValueError(f"a master key must be {KEY_BYTES} bytes")
        self._by_id = {key_id(k): AESGCM(k) for k in keys}
        self.current = key_id(keys[0])

    def __repr__(self) -> str:
        return f"_MasterKeys(current={self.current}, held={len(self._by_id)})"

    def wrap(self, org_id: str, data_key: bytes) -> tuple[str, bytes]:
        nonce = secrets.token_bytes(_NONCE_BYTES)
        aad = f"{org_id}|{self.current}".encode()
        return self.current, nonce + self._by_id[self.current].encrypt(nonce, data_key, aad)

    def unwrap(self, org_id: str, kid: str, wrapped: bytes) -> bytes:
        aes = self._by_id.get(kid)
        if aes is None:
            raise SecretUnavailable(
                f"the organization's data key is wrapped by master key {kid}, which this vault "
                f"does not hold (it holds {', '.join(sorted(self._by_id))})"
            )
        try:
            return aes.decrypt(
                wrapped[:_NONCE_BYTES], wrapped[_NONCE_BYTES:], f"{org_id}|{kid}".encode()
            )
        except InvalidTag:
            raise SecretUnavailable("the organization's data key failed authentication") from None


# ---------------------------------------------------------------- storage


class _Db(Protocol):
    """A tiny SQL seam: `?` placeholders, one transaction per `transaction()` block (a read
    block, `write=False`, holds one statement)."""

    kind: str
    blob: str
    timestamp: str

    def transaction(self, write: bool = True) -> Any: ...  # yields an object with .execute


class _SqliteDb:
    kind, blob, timestamp = "sqlite", "BLOB", "TEXT"

    def __init__(self, path: str | Path) -> None:
        self._path = str(path)
        # Reads (every draft and launch reads the RunPod key) share one open connection: opening
        # one costs more than the read (a statement cache, the schema parsed again). Writes keep
        # their own short-lived connection, so a reader never holds a writer's lock.
        self._reader: sqlite3.Connection | None = None
        self._reader_pid = 0
        self._reader_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"_SqliteDb({self._path!r})"

    @contextmanager
    def transaction(self, write: bool = True) -> Iterator[_Cursor]:
        if not write:
            with self._reader_lock:
                conn = self._read_connection()
                try:
                    # A read block holds one statement, atomic on its own in autocommit mode
                    # (it takes no write lock, so key reads need not queue behind writers):
                    # no BEGIN and ROLLBACK around it, two statements fewer per key read.
                    yield _Cursor(conn.execute)
                except sqlite3.Error:
                    self._drop_reader()  # opened afresh by the next read
                    raise
            return
        conn = sqlite3.connect(self._path, timeout=10, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield _Cursor(conn.execute)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        finally:
            conn.close()

    def _read_connection(self) -> sqlite3.Connection:
        # a forked child must not use its parent's connection: it opens its own
        if self._reader is None or self._reader_pid != os.getpid():
            self._reader = sqlite3.connect(
                self._path, timeout=10, isolation_level=None, check_same_thread=False
            )
            self._reader_pid = os.getpid()
        return self._reader

    def _drop_reader(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None and self._reader_pid == os.getpid():
            reader.close()

    def close(self) -> None:
        with self._reader_lock:
            self._drop_reader()


class _PostgresDb:
    kind, blob, timestamp = "postgres", "BYTEA", "TIMESTAMPTZ"

    def __init__(self, pool_or_conninfo: Any) -> None:
        if isinstance(pool_or_conninfo, str):
            from psycopg_pool import ConnectionPool

            # autocommit: a read is one statement and one round trip (not BEGIN, SELECT,
            # COMMIT); a write still runs in the explicit transaction `transaction()` opens
            self._pool = ConnectionPool(
                pool_or_conninfo,
                min_size=1,
                max_size=4,
                open=True,
                kwargs={"autocommit": True},
            )
            self._owned = True
        else:
            self._pool, self._owned = pool_or_conninfo, False

    def __repr__(self) -> str:
        return "_PostgresDb()"  # the conninfo may carry a password

    @contextmanager
    def transaction(self, write: bool = True) -> Iterator[_Cursor]:
        with self._pool.connection() as conn:

            def execute(sql: str, params: Sequence[Any] = ()) -> Any:
                return conn.execute(sql.replace("?", "%s"), tuple(params))

            if not write:  # a read is one statement: on an autocommit connection, its own
                yield _Cursor(execute)  # transaction (a pool we were given rolls back after)
                return
            with conn.transaction():
                yield _Cursor(execute)

    def close(self) -> None:
        if self._owned:
            self._pool.close()


class _Cursor:
    """Runs statements whose `{K}`/`{S}`/`{BLOB}`/`{TS}` marks name validated tables and types."""

    def __init__(self, execute: Any, names: dict[str, str] | None = None) -> None:
        self._execute = execute
        self._names = names or {}

    def naming(self, names: dict[str, str]) -> _Cursor:
        return _Cursor(self._execute, names)

    def _sql(self, sql: str) -> str:
        for mark, name in self._names.items():
            sql = sql.replace(mark, name)
        return sql

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in self._execute(self._sql(sql), params).fetchall()]

    def run(self, sql: str, params: Sequence[Any] = ()) -> None:
        self._execute(self._sql(sql), params)


# ---------------------------------------------------------------- the vault


class SqlSecretVault:
    """SecretVault over SQLite (a file path) or PostgreSQL (a conninfo string or psycopg pool)."""

    def __init__(
        self,
        db: _Db,
        master_key: bytes,
        *,
        previous_master_keys: Sequence[bytes] = (),
        table_prefix: str = "",
    ) -> None:
        if table_prefix and not _PREFIX_RE.match(table_prefix):
            raise ValueError("table_prefix must be lower-case letters, digits and underscores")
        self._db = db
        self._keys = _MasterKeys([master_key, *previous_master_keys])
        self._keys_table = f"{table_prefix}vault_data_keys"
        self._secrets_table = f"{table_prefix}vault_secrets"
        self._schema_lock = threading.Lock()
        self._schema_ready = False

    @classmethod
    def sqlite(cls, path: str | Path, master_key: bytes, **kwargs: Any) -> SqlSecretVault:
        return cls(_SqliteDb(path), master_key, **kwargs)

    @classmethod
    def postgres(cls, pool_or_conninfo: Any, master_key: bytes, **kwargs: Any) -> SqlSecretVault:
        return cls(_PostgresDb(pool_or_conninfo), master_key, **kwargs)

    def __repr__(self) -> str:
        return (
            f"SqlSecretVault(db={self._db.kind}, table={self._keys_table}, "
            f"master_key_id={self._keys.current})"
        )

    @property
    def master_key_id(self) -> str:
        return self._keys.current

    def put(self, org_id: str, name: str, secret: str) -> None:
        with self._transaction() as tx:
            aes = AESGCM(self._data_key(tx, org_id, create=True))
            nonce = secrets.token_bytes(_NONCE_BYTES)
            ciphertext = aes.encrypt(nonce, secret.encode(), _aad(org_id, name))
            tx.run(
                "INSERT INTO {S} (org_id, name, nonce, ciphertext) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (org_id, name) DO UPDATE SET "
                "nonce = excluded.nonce, ciphertext = excluded.ciphertext",
                (org_id, name, nonce, ciphertext),
            )

    def get(self, org_id: str, name: str) -> str:
        # One statement reads the secret and its wrapped data key: every draft and launch reads
        # the organization's RunPod key, and each round trip counts.
        with self._transaction(write=False) as tx:
            rows = tx.rows(
                "SELECT s.nonce, s.ciphertext, k.key_id, k.wrapped_key FROM {S} s"
                " LEFT JOIN {K} k ON k.org_id = s.org_id WHERE s.org_id = ? AND s.name = ?",
                (org_id, name),
            )
        if not rows:
            raise SecretUnavailable(f"no secret {name!r} is stored for this organization")
        nonce, ciphertext, kid, wrapped = rows[0]
        if kid is None:
            raise SecretUnavailable("the organization has no data key (shredded or never stored)")
        data_key = self._keys.unwrap(org_id, str(kid), bytes(wrapped))
        nonce, ciphertext = bytes(nonce), bytes(ciphertext)
        try:
            return AESGCM(data_key).decrypt(nonce, ciphertext, _aad(org_id, name)).decode()
        except InvalidTag:
            raise SecretUnavailable(f"the secret {name!r} failed authentication") from None

    def delete(self, org_id: str, name: str) -> None:
        with self._transaction() as tx:
            tx.run("DELETE FROM {S} WHERE org_id = ? AND name = ?", (org_id, name))

    def shred(self, org_id: str) -> None:
        """Delete the organization's data key (and its now undecryptable ciphertexts)."""
        with self._transaction() as tx:
            tx.run("DELETE FROM {K} WHERE org_id = ?", (org_id,))
            tx.run("DELETE FROM {S} WHERE org_id = ?", (org_id,))

    def rotate_master_key(self, new_master_key: bytes) -> int:
        """Re-wrap every data key with `new_master_key` (secrets untouched); return how many."""
        rotated = _MasterKeys([new_master_key])
        unwrapper = self._keys
        count = 0
        with self._transaction() as tx:
            rows = tx.rows("SELECT org_id, key_id, wrapped_key FROM {K}{LOCK}")
            for org_id, kid, wrapped in rows:
                if kid == rotated.current:
                    continue
                data_key = unwrapper.unwrap(org_id, kid, bytes(wrapped))
                new_kid, new_wrapped = rotated.wrap(org_id, data_key)
                tx.run(
                    "UPDATE {K} SET key_id = ?, wrapped_key = ? WHERE org_id = ?",
                    (new_kid, new_wrapped, org_id),
                )
                count += 1
        self._keys = rotated
        return count

    def drop_tables(self) -> None:
        """Remove the vault's tables (tests and teardown)."""
        with self._transaction(ensure=False) as tx:
            tx.run("DROP TABLE IF EXISTS {S}")
            tx.run("DROP TABLE IF EXISTS {K}")
        self._schema_ready = False

    def close(self) -> None:
        close = getattr(self._db, "close", None)
        if close is not None:
            close()

    # ------------------------------------------------------------ internals

    @contextmanager
    def _transaction(self, *, ensure: bool = True, write: bool = True) -> Iterator[_Cursor]:
        if ensure:
            self._ensure_schema()
        names = {
            "{K}": self._keys_table,
            "{S}": self._secrets_table,
            "{BLOB}": self._db.blob,
            "{TS}": self._db.timestamp,
            # SQLite's BEGIN IMMEDIATE already locks the database for writing
            "{LOCK}": " FOR UPDATE" if self._db.kind == "postgres" else "",
        }
        with self._db.transaction(write) as tx:
            yield tx.naming(names)

    def _ensure_schema(self) -> None:
        with self._schema_lock:
            if self._schema_ready:
                return
            with self._transaction(ensure=False) as tx:
                if self._db.kind == "postgres":
                    take_ddl_lock(tx.run)
                tx.run(
                    "CREATE TABLE IF NOT EXISTS {K} (org_id TEXT PRIMARY KEY, "
                    "key_id TEXT NOT NULL, wrapped_key {BLOB} NOT NULL, created_at {TS} NOT NULL)"
                )
                tx.run(
                    "CREATE TABLE IF NOT EXISTS {S} (org_id TEXT NOT NULL, "
                    "name TEXT NOT NULL, nonce {BLOB} NOT NULL, ciphertext {BLOB} NOT NULL, "
                    "PRIMARY KEY (org_id, name))"
                )
            self._schema_ready = True

    def _data_key(self, tx: _Cursor, org_id: str, *, create: bool) -> bytes:
        query = "SELECT key_id, wrapped_key FROM {K} WHERE org_id = ?"
        rows = tx.rows(query, (org_id,))
        if not rows and create:
            kid, wrapped = self._keys.wrap(org_id, AESGCM.generate_key(bit_length=256))
            now: Any = datetime.now(UTC)
            if self._db.kind == "sqlite":
                now = now.isoformat()
            tx.run(
                "INSERT INTO {K} (org_id, key_id, wrapped_key, created_at) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (org_id) DO NOTHING",
                (org_id, kid, wrapped, now),
            )
            rows = tx.rows(query, (org_id,))
        if not rows:
            raise SecretUnavailable("the organization has no data key (shredded or never stored)")
        return self._keys.unwrap(org_id, str(rows[0][0]), bytes(rows[0][1]))


def _aad(org_id: str, name: str) -> bytes:
    return f"{org_id}|{name}".encode()
