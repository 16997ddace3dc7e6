"""The key store in PostgreSQL, beside the event store (its own two tables)."""

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from psycopg import sql
from psycopg_pool import ConnectionPool

from memledger_platform.auth import Gate, KeyRecord, KeyStore, issue
from memledger_platform.pg_locks import creating, exclusively
from memledger_platform.settings import Settings

_TABLES = """
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.memledger_tenants (
    tenant_id text PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS {s}.memledger_api_keys (
    key_id text PRIMARY KEY, tenant_id text NOT NULL REFERENCES {s}.memledger_tenants,
    role text NOT NULL CHECK (role IN ('read', 'write', 'admin')), spaces text[],
    secret_sha256 text NOT NULL, label text, created_at timestamptz NOT NULL,
    revoked_at timestamptz);
"""
_COLUMNS = "key_id, tenant_id, role, spaces, secret_sha256, label, created_at, revoked_at"


class PostgresKeyStore(KeyStore):
    def __init__(self, pool: ConnectionPool[Any], schema: str = "public") -> None:
        self._pool = pool
        self._s = sql.Identifier(schema)
        # services starting together create these at once: one at a time (autocommit pool)
        with pool.connection() as conn, exclusively(conn, creating(schema)):
            conn.execute(sql.SQL(_TABLES).format(s=self._s))

    def find(self, key_id: str) -> KeyRecord | None:
        with self._pool.connection() as conn:
            row = conn.execute(sql.SQL(
                "SELECT " + _COLUMNS + " FROM {}.memledger_api_keys WHERE key_id = %s"  # noqa: S608
            ).format(self._s), (key_id,)).fetchone()
        return None if row is None else _record(row)

    def create_tenant(self, tenant: str) -> bool:
        with self._pool.connection() as conn:
            cur = conn.execute(sql.SQL("INSERT INTO {}.memledger_tenants (tenant_id) VALUES (%s) "
                                       "ON CONFLICT DO NOTHING").format(self._s), (tenant,))
            return bool(cur.rowcount == 1)

    def tenant_exists(self, tenant: str) -> bool:
        with self._pool.connection() as conn:
            return conn.execute(sql.SQL("SELECT 1 FROM {}.memledger_tenants WHERE tenant_id = %s"
                                        ).format(self._s), (tenant,)).fetchone() is not None

    def add(self, record: KeyRecord) -> None:
        with self._pool.connection() as conn:
            conn.execute(sql.SQL("INSERT INTO {}.memledger_api_keys (" + _COLUMNS + ") VALUES "  # noqa: S608
                                 "(%s, %s, %s, %s, %s, %s, %s, %s)").format(self._s),
                         (record.key_id, record.tenant, record.role,
                          None if record.spaces is None else sorted(record.spaces),
                          record.secret_sha256, record.label, record.created_at,
                          record.revoked_at))

    def revoke(self, key_id: str, at: datetime) -> bool:
        with self._pool.connection() as conn:
            cur = conn.execute(sql.SQL("UPDATE {}.memledger_api_keys SET revoked_at = %s WHERE "
                                       "key_id = %s AND revoked_at IS NULL").format(self._s),
                               (at, key_id))
            return bool(cur.rowcount == 1)

    def keys(self, tenant: str) -> list[KeyRecord]:
        with self._pool.connection() as conn:
            rows = conn.execute(sql.SQL(
                "SELECT " + _COLUMNS + " FROM {}.memledger_api_keys WHERE tenant_id = %s "  # noqa: S608
                "ORDER BY created_at").format(self._s), (tenant,)).fetchall()
        return [_record(r) for r in rows]


def _record(row: tuple[Any, ...]) -> KeyRecord:
    key_id, tenant, role, spaces, digest, label, created_at, revoked_at = row
    return KeyRecord(key_id, tenant, role, None if spaces is None else frozenset(spaces),
                     digest, label, created_at, revoked_at)


@dataclass
class OpenGate:
    """The gate the settings ask for, and the connections its key store holds."""

    gate: Gate
    pool: ConnectionPool[Any] | None = None

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()


def open_gate(settings: Settings, dsn: str) -> OpenGate:
    """API keys checked against PostgreSQL when authentication is required, else an open
    gate (tenant from the header or the default tenant)."""
    limits = settings.rate_limits
    if not settings.auth_required:
        return OpenGate(Gate(None, settings.tenant_fallback, limits))
    pool: ConnectionPool[Any] = ConnectionPool(dsn, min_size=1, max_size=4, open=True,
                                               kwargs={"autocommit": True})
    return OpenGate(Gate(PostgresKeyStore(pool, settings.postgres_schema),
                         settings.tenant_fallback, limits), pool)


def ensure_local_admin(settings: Settings, dsn: str, key_file: Path) -> str | None:
    """Embedded mode with keys required: the default tenant and an admin key for it, made on
    the first start and kept in ``key_file`` (readable by its owner only); the token, or
    ``None`` when authentication is off."""
    if not settings.auth_required:
        return None
    if key_file.exists():
        return key_file.read_text().strip()
    tenant = settings.tenant_fallback or "default"
    with ConnectionPool(dsn, min_size=1, max_size=1, open=True,
                        kwargs={"autocommit": True}) as pool:
        store = PostgresKeyStore(pool, settings.postgres_schema)
        store.create_tenant(tenant)
        _, token = issue(store, tenant, "admin", None, datetime.now(UTC), "local admin (up)")
    key_file.parent.mkdir(parents=True, exist_ok=True)
    key_file.touch(mode=0o600)
    key_file.write_text(token + "\n")
    return token
