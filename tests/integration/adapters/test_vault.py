"""C6: the secret vault encrypts per organization, rotates master keys and shreds, on both DBs."""

from __future__ import annotations

import secrets
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.vault import (
    SqlSecretVault,
    load_or_create_master_key,
    master_key_from_env,
    new_master_key_text,
)
from application.errors import SecretUnavailable
from tests.conftest import POSTGRES_URL, require_postgres

PG_CONNINFO = POSTGRES_URL
PLAINTEXT = "rpa_PLAINTEXT_api_key_7f3e9a"
MASTER = secrets.token_bytes(32)


def postgres_or_skip() -> None:
    require_postgres()


class Backend:
    """Opens vaults over one database and one table prefix, and reads the raw rows back."""

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.kind = kind
        self.prefix = f"t{secrets.token_hex(4)}_"
        self.path = tmp_path / "vault.sqlite3"
        self.opened: list[SqlSecretVault] = []

    def vault(self, master: bytes = MASTER, **kwargs: object) -> SqlSecretVault:
        target = self.path if self.kind == "sqlite" else PG_CONNINFO
        factory = SqlSecretVault.sqlite if self.kind == "sqlite" else SqlSecretVault.postgres
        vault = factory(target, master, table_prefix=self.prefix, **kwargs)
        self.opened.append(vault)
        return vault

    def raw_bytes(self) -> bytes:
        """Every stored byte: the whole SQLite file (and its journal), or every PostgreSQL row."""
        if self.kind == "sqlite":
            return b"".join(p.read_bytes() for p in self.path.parent.glob("vault.sqlite3*"))
        vault = self.opened[0]
        with vault._transaction() as tx:
            rows = tx.rows("SELECT * FROM {K}") + tx.rows("SELECT * FROM {S}")
        return b"".join(
            bytes(v) if isinstance(v, bytes | memoryview) else str(v).encode()
            for row in rows
            for v in row
        )


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "postgres":
        postgres_or_skip()
    b = Backend(request.param, tmp_path)
    yield b
    if b.opened:
        b.opened[0].drop_tables()
    for vault in b.opened:
        vault.close()


def test_a_secret_roundtrips(backend: Backend) -> None:
    vault = backend.vault()
    vault.put("org-1", "runpod_api_key", PLAINTEXT)
    vault.put("org-1", "s3_secret", "rps_other")
    assert vault.get("org-1", "runpod_api_key") == PLAINTEXT
    vault.put("org-1", "runpod_api_key", "rpa_replaced")
    assert vault.get("org-1", "runpod_api_key") == "rpa_replaced"
    assert backend.vault().get("org-1", "s3_secret") == "rps_other"  # a second instance reads it


def test_the_plaintext_is_not_stored(backend: Backend) -> None:
    vault = backend.vault()
    vault.put("org-1", "runpod_api_key", PLAINTEXT)
    stored = backend.raw_bytes()
    assert b"runpod_api_key" in stored  # the scan does see the rows
    assert PLAINTEXT.encode() not in stored
    assert MASTER not in stored


def test_organizations_are_isolated(backend: Backend) -> None:
    vault = backend.vault()
    vault.put("org-1", "k", "one")
    vault.put("org-2", "k", "two")
    assert (vault.get("org-1", "k"), vault.get("org-2", "k")) == ("one", "two")
    with pytest.raises(SecretUnavailable):
        vault.get("org-3", "k")


def test_delete_removes_one_secret(backend: Backend) -> None:
    vault = backend.vault()
    vault.put("org-1", "a", "1")
    vault.put("org-1", "b", "2")
    vault.delete("org-1", "a")
    vault.delete("org-1", "never")
    with pytest.raises(SecretUnavailable, match="no secret"):
        vault.get("org-1", "a")
    assert vault.get("org-1", "b") == "2"


def test_a_key_another_process_rotates_or_deletes_reaches_the_next_read(backend: Backend) -> None:
    """C2: the API rotates the key, the worker reads it per call; a vault that keeps its reads
    open (or anything it keeps in memory) must still see another instance's writes at once."""
    worker, api = backend.vault(), backend.vault()
    api.put("org-1", "runpod_api_key", "rpa_first_key_0000")
    assert worker.get("org-1", "runpod_api_key") == "rpa_first_key_0000"
    api.put("org-1", "runpod_api_key", "rpa_rotated_key_1111")
    assert worker.get("org-1", "runpod_api_key") == "rpa_rotated_key_1111"
    api.delete("org-1", "runpod_api_key")
    with pytest.raises(SecretUnavailable, match="no secret"):
        worker.get("org-1", "runpod_api_key")
    api.put("org-2", "k", "two")
    assert worker.get("org-2", "k") == "two"
    api.shred("org-2")
    with pytest.raises(SecretUnavailable):
        worker.get("org-2", "k")


def test_a_closed_sqlite_vault_reads_again_on_a_fresh_connection(tmp_path: Path) -> None:
    vault = SqlSecretVault.sqlite(tmp_path / "vault.sqlite3", MASTER)
    vault.put("org-1", "k", "one")
    assert vault.get("org-1", "k") == "one"
    vault.close()
    assert vault.get("org-1", "k") == "one"
    vault.close()


def test_threads_read_while_another_instance_writes(backend: Backend) -> None:
    """The API's request threads share one vault: concurrent reads all answer, and a writer
    is not starved by them."""
    reader, writer = backend.vault(), backend.vault()
    writer.put("org-1", "k", "v0")
    seen: list[str] = []
    errors: list[BaseException] = []

    def read() -> None:
        try:
            for _ in range(50):
                seen.append(reader.get("org-1", "k"))
        except BaseException as e:  # reported by the assert below
            errors.append(e)

    threads = [threading.Thread(target=read) for _ in range(4)]
    for t in threads:
        t.start()
    for i in range(1, 11):
        writer.put("org-1", "k", f"v{i}")
    for t in threads:
        t.join()
    assert not errors
    assert len(seen) == 200 and set(seen) <= {f"v{i}" for i in range(11)}
    assert reader.get("org-1", "k") == "v10"


def test_a_write_that_fails_part_way_leaves_nothing(backend: Backend) -> None:
    """Reads run on autocommit connections; a write is still one transaction (shred's two
    deletes, a put's data key and secret)."""
    vault = backend.vault()
    vault.put("org-1", "k", "one")

    def delete_then_fail() -> None:
        with vault._transaction() as tx:
            tx.run("DELETE FROM {S} WHERE org_id = ?", ("org-1",))
            raise RuntimeError("the second statement failed")

    with pytest.raises(RuntimeError):
        delete_then_fail()
    assert vault.get("org-1", "k") == "one"


def test_rotation_rewraps_every_data_key_and_only_the_new_master_reads(backend: Backend) -> None:
    vault = backend.vault()
    vault.put("org-1", "k", "one")
    vault.put("org-2", "k", "two")
    new = secrets.token_bytes(32)
    assert vault.rotate_master_key(new) == 2
    assert vault.get("org-1", "k") == "one"
    assert backend.vault(new).get("org-2", "k") == "two"
    with pytest.raises(SecretUnavailable) as exc:
        backend.vault(MASTER).get("org-1", "k")
    assert "one" not in str(exc.value)
    assert vault.rotate_master_key(new) == 0  # already wrapped by it


def test_an_instance_holding_old_and_new_keys_reads_during_a_rotation(backend: Backend) -> None:
    backend.vault().put("org-1", "k", "one")
    new = secrets.token_bytes(32)
    both = backend.vault(new, previous_master_keys=[MASTER])
    assert both.get("org-1", "k") == "one"
    assert both.rotate_master_key(new) == 1
    assert backend.vault(new).get("org-1", "k") == "one"


def test_shred_makes_the_secrets_unrecoverable(backend: Backend) -> None:
    vault = backend.vault()
    vault.put("org-1", "k", PLAINTEXT)
    vault.put("org-2", "k", "kept")
    vault.shred("org-1")
    with pytest.raises(SecretUnavailable):
        vault.get("org-1", "k")
    assert vault.get("org-2", "k") == "kept"
    assert PLAINTEXT.encode() not in backend.raw_bytes()


def test_shred_leaves_ciphertext_useless_even_if_a_copy_survived(backend: Backend) -> None:
    vault = backend.vault()
    vault.put("org-1", "k", PLAINTEXT)
    with vault._transaction() as tx:
        saved = tx.rows("SELECT org_id, name, nonce, ciphertext FROM {S}")
    vault.shred("org-1")
    with vault._transaction() as tx:  # a backup restores the ciphertext, not the data key
        tx.run("INSERT INTO {S} (org_id, name, nonce, ciphertext) VALUES (?, ?, ?, ?)", saved[0])
    with pytest.raises(SecretUnavailable) as exc:
        vault.get("org-1", "k")
    assert PLAINTEXT not in str(exc.value)


def test_a_wrong_master_key_fails_clearly_without_plaintext(backend: Backend) -> None:
    backend.vault().put("org-1", "k", PLAINTEXT)
    with pytest.raises(SecretUnavailable, match="master key") as exc:
        backend.vault(secrets.token_bytes(32)).get("org-1", "k")
    assert PLAINTEXT not in str(exc.value)


def test_repr_shows_no_key_material(backend: Backend) -> None:
    vault = backend.vault()
    vault.put("org-1", "k", PLAINTEXT)
    for text in (repr(vault), repr(vault._keys), repr(vault._db)):
        assert MASTER.hex() not in text
        assert repr(MASTER) not in text
        assert PLAINTEXT not in text


def test_master_key_from_env_decodes_32_bytes() -> None:
    text = new_master_key_text()
    assert len(master_key_from_env(text)) == 32
    assert len(master_key_from_env(text.rstrip("="))) == 32
    with pytest.raises(ValueError, match="32 bytes") as exc:
        master_key_from_env("c2hvcnQ=")
    assert "c2hvcnQ" not in str(exc.value)
    with pytest.raises(ValueError, match="base64"):
        master_key_from_env("not base64 at all!")


def test_load_or_create_master_key_creates_a_private_file_once(tmp_path: Path) -> None:
    path = tmp_path / "master.key"
    key = load_or_create_master_key(path)
    assert len(key) == 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_or_create_master_key(path) == key


def test_load_or_create_master_key_refuses_a_world_readable_file(tmp_path: Path) -> None:
    path = tmp_path / "master.key"
    path.write_text(new_master_key_text())
    path.chmod(0o644)
    with pytest.raises(PermissionError, match="chmod 600"):
        load_or_create_master_key(path)
    path.chmod(0o640)
    with pytest.warns(UserWarning, match="group"):
        load_or_create_master_key(path)


def test_a_bad_table_prefix_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="table_prefix"):
        SqlSecretVault.sqlite(tmp_path / "v.db", MASTER, table_prefix="x; DROP TABLE y")


def stored_rows(vault: SqlSecretVault) -> dict[tuple[str, str], tuple[bytes, bytes]]:
    """(org, name) -> (nonce, ciphertext), as stored."""
    with vault._transaction() as tx:
        rows = tx.rows("SELECT org_id, name, nonce, ciphertext FROM {S}")
    return {(str(o), str(n)): (bytes(nonce), bytes(ct)) for o, n, nonce, ct in rows}


def test_a_ciphertext_moved_to_another_name_does_not_decrypt(backend: Backend) -> None:
    """The secret's name is bound to its ciphertext (AES-GCM associated data): a row copied
    over another secret's row of the same organization fails authentication, never yields the
    first secret under the second name."""
    vault = backend.vault()
    vault.put("org-1", "runpod_api_key", PLAINTEXT)
    vault.put("org-1", "s3_secret", "rps_other")
    nonce, ciphertext = stored_rows(vault)[("org-1", "runpod_api_key")]
    with vault._transaction() as tx:
        tx.run(
            "UPDATE {S} SET nonce = ?, ciphertext = ? WHERE org_id = ? AND name = ?",
            (nonce, ciphertext, "org-1", "s3_secret"),
        )
    with pytest.raises(SecretUnavailable, match="failed authentication") as exc:
        vault.get("org-1", "s3_secret")
    assert PLAINTEXT not in str(exc.value)
    assert vault.get("org-1", "runpod_api_key") == PLAINTEXT  # the original still reads


def test_a_ciphertext_moved_to_another_organization_does_not_decrypt(backend: Backend) -> None:
    """Moved with or without its organization's data key, a ciphertext does not decrypt for
    another organization."""
    vault = backend.vault()
    vault.put("org-1", "k", PLAINTEXT)
    vault.put("org-2", "k", "theirs")
    nonce, ciphertext = stored_rows(vault)[("org-1", "k")]
    with vault._transaction() as tx:
        tx.run(
            "UPDATE {S} SET nonce = ?, ciphertext = ? WHERE org_id = ? AND name = ?",
            (nonce, ciphertext, "org-2", "k"),
        )
    with pytest.raises(SecretUnavailable, match="failed authentication"):
        vault.get("org-2", "k")
    with vault._transaction() as tx:  # the data key too: its wrapping names the organization
        [(kid, wrapped)] = tx.rows(
            "SELECT key_id, wrapped_key FROM {K} WHERE org_id = ?", ("org-1",)
        )
        tx.run(
            "UPDATE {K} SET key_id = ?, wrapped_key = ? WHERE org_id = ?", (kid, wrapped, "org-2")
        )
    with pytest.raises(SecretUnavailable, match="failed authentication") as exc:
        vault.get("org-2", "k")
    assert PLAINTEXT not in str(exc.value)


def test_two_writes_never_share_a_nonce(backend: Backend) -> None:
    """AES-GCM with a repeated nonce under one key leaks the XOR of the plaintexts and the
    authentication key: every write, even of the same secret again, draws a new nonce."""
    vault = backend.vault()
    nonces: list[bytes] = []
    ciphertexts: list[bytes] = []
    for org, name in [("org-1", "a"), ("org-1", "b"), ("org-2", "a"), ("org-1", "a")] * 3:
        vault.put(org, name, PLAINTEXT)
        nonce, ciphertext = stored_rows(vault)[(org, name)]
        assert len(nonce) == 12
        nonces.append(nonce)
        ciphertexts.append(ciphertext)
    assert len(set(nonces)) == len(nonces)
    assert len(set(ciphertexts)) == len(ciphertexts)  # one plaintext, never one ciphertext
    assert vault.get("org-1", "a") == PLAINTEXT
