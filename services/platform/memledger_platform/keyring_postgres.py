"""Subject keys in PostgreSQL, wrapped by the master key, beside the event store."""

import base64
import os
from collections import OrderedDict
from collections.abc import Collection
from pathlib import Path
from typing import Any

from psycopg import sql
from psycopg_pool import ConnectionPool

from memledger_platform.crypto import (
    Keyring,
    SourceErased,
    SubjectKey,
    digest_secret,
    keyed_digest,
    new_key,
    unwrap,
    wrap,
)
from memledger_platform.pg_locks import creating, exclusively
from memledger_platform.pg_vacuum import vacuum_until_removed
from memledger_platform.settings import Settings

_TABLE = """
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.memledger_subject_keys (
    key_id text PRIMARY KEY, tenant_id text NOT NULL, subject_id text NOT NULL,
    wrapped bytea, spaces text[] NOT NULL DEFAULT '{{}}', created_at timestamptz NOT NULL
    DEFAULT now(), destroyed_at timestamptz,
    CHECK ((wrapped IS NULL) = (destroyed_at IS NOT NULL)));
CREATE UNIQUE INDEX IF NOT EXISTS memledger_subject_keys_live
    ON {s}.memledger_subject_keys (tenant_id, subject_id) WHERE destroyed_at IS NULL;
"""
_CACHE = 10_000


class PostgresKeyring(Keyring):
    """Reads cache keys by id (a key never changes; a destroyed one is evicted by ``forget``,
    which readers call when they apply ``subject.erased``)."""

    def __init__(self, pool: ConnectionPool[Any], master: bytes, schema: str = "public") -> None:
        self._pool = pool
        self._master = master
        self._s = sql.Identifier(schema)
        self._cache: OrderedDict[str, bytes] = OrderedDict()
        self._digests = digest_secret(master)
        # services starting together create these at once: one at a time (autocommit pool)
        with pool.connection() as conn, exclusively(conn, creating(schema)):
            conn.execute(sql.SQL(_TABLE).format(s=self._s))

    def for_writing(self, tenant: str, subject: str, space: str, source: str | None = None
                    ) -> SubjectKey:
        with self._pool.connection() as conn:
            # The usual case reads only: a live key that already seals data in this space
            # (an UPDATE per commit group would serialise every writer on the key's row).
            found = conn.execute(sql.SQL(
                "SELECT key_id, wrapped FROM {}.memledger_subject_keys WHERE tenant_id = %s "
                "AND subject_id = %s AND destroyed_at IS NULL AND %s = ANY(spaces)").format(
                self._s), (tenant, subject, space)).fetchone()
            if found is not None:
                return SubjectKey(found[0], self._unwrapped(found[0], bytes(found[1])))
            row = conn.execute(sql.SQL(
                "UPDATE {}.memledger_subject_keys SET spaces = CASE WHEN %(space)s = ANY(spaces) "
                "THEN spaces ELSE array_append(spaces, %(space)s) END WHERE tenant_id = "
                "%(tenant)s AND subject_id = %(subject)s AND destroyed_at IS NULL "
                "RETURNING key_id, wrapped").format(self._s),
                {"tenant": tenant, "subject": subject, "space": space}).fetchone()
            if row is None:
                key_id, key = os.urandom(8).hex(), new_key()
                # Never while ``source`` is destroyed: learned data's source is usually this
                # subject's key, so finding none live here means its destroy committed before
                # this statement, which sees it.
                row = conn.execute(sql.SQL(
                    "INSERT INTO {}.memledger_subject_keys (key_id, tenant_id, subject_id, "
                    "wrapped, spaces) SELECT %(key_id)s, %(tenant)s, %(subject)s, %(wrapped)s, "
                    "ARRAY[%(space)s] WHERE %(source)s::text IS NULL OR EXISTS (SELECT 1 FROM "
                    "{}.memledger_subject_keys WHERE key_id = %(source)s AND destroyed_at IS "
                    "NULL) ON CONFLICT (tenant_id, subject_id) WHERE destroyed_at IS NULL DO "
                    "UPDATE SET spaces = {}.memledger_subject_keys.spaces RETURNING key_id, "
                    "wrapped").format(self._s, self._s, self._s),
                    {"key_id": key_id, "tenant": tenant, "subject": subject, "space": space,
                     "wrapped": wrap(self._master, key_id, key), "source": source}).fetchone()
                if row is None:
                    raise SourceErased(str(source))
        assert row is not None
        return SubjectKey(row[0], self._unwrapped(row[0], bytes(row[1])))

    def existing_for_writing(self, wanted: Collection[tuple[str, str, str]]
                             ) -> dict[tuple[str, str, str], SubjectKey]:
        # One query for a commit group's subjects (one each was a round trip per subject).
        pairs = sorted({(t, s) for t, s, _ in wanted})
        if not pairs:
            return {}
        with self._pool.connection() as conn:
            rows = conn.execute(sql.SQL(
                "SELECT tenant_id, subject_id, key_id, wrapped, spaces FROM "
                "{}.memledger_subject_keys WHERE destroyed_at IS NULL AND (tenant_id, "
                "subject_id) IN (SELECT * FROM unnest(%s::text[], %s::text[]))").format(self._s),
                ([t for t, _ in pairs], [s for _, s in pairs])).fetchall()
        live = {(r[0], r[1]): (r[2], bytes(r[3]), set(r[4])) for r in rows}
        return {(t, s, space): SubjectKey(found[0], self._unwrapped(found[0], found[1]))
                for t, s, space in wanted
                if (found := live.get((t, s))) is not None and space in found[2]}

    def _unwrapped(self, key_id: str, wrapped: bytes) -> bytes:
        cached = self._cache.get(key_id)
        if cached is None:
            cached = unwrap(self._master, key_id, wrapped)
            self._cache[key_id] = cached
        return cached

    def key(self, key_id: str) -> bytes | None:
        cached = self._cache.get(key_id)
        if cached is not None:
            return cached
        with self._pool.connection() as conn:
            row = conn.execute(sql.SQL("SELECT wrapped FROM {}.memledger_subject_keys WHERE "
                                       "key_id = %s").format(self._s), (key_id,)).fetchone()
        if row is None or row[0] is None:
            return None
        key = unwrap(self._master, key_id, bytes(row[0]))
        self._cache[key_id] = key
        if len(self._cache) > _CACHE:
            self._cache.popitem(last=False)
        return key

    def live(self, key_ids: Collection[str]) -> set[str]:
        if not key_ids:
            return set()
        with self._pool.connection() as conn:
            rows = conn.execute(sql.SQL("SELECT key_id FROM {}.memledger_subject_keys WHERE "
                                        "key_id = ANY(%s) AND destroyed_at IS NULL").format(
                self._s), (list(key_ids),)).fetchall()
        return {r[0] for r in rows}

    def forget(self, key_ids: list[str]) -> None:
        for key_id in key_ids:
            self._cache.pop(key_id, None)

    def digest(self, tenant: str, text: str) -> str:
        return keyed_digest(self._digests, tenant, text)

    def compact(self) -> list[str]:
        """VACUUM the key table: a destroyed key's row loses its wrapped key, but the row's
        old versions (that one's and those each new space left) keep it until vacuumed, and
        with the master key it would open everything the subject's key sealed."""
        with self._pool.connection() as conn:
            done = vacuum_until_removed(
                conn, sql.SQL("{}.memledger_subject_keys").format(self._s))
        return ["memledger_subject_keys"] if done else []

    def spaces_of(self, tenant: str, subject: str) -> list[str]:
        with self._pool.connection() as conn:
            rows = conn.execute(sql.SQL(
                "SELECT DISTINCT unnest(spaces) FROM {}.memledger_subject_keys WHERE tenant_id = "
                "%s AND subject_id = %s AND destroyed_at IS NULL ORDER BY 1").format(self._s),
                (tenant, subject)).fetchall()
        return [r[0] for r in rows]

    def destroy(self, tenant: str, subject: str) -> list[str]:
        with self._pool.connection() as conn:
            rows = conn.execute(sql.SQL(
                "UPDATE {}.memledger_subject_keys SET wrapped = NULL, destroyed_at = now() "
                "WHERE tenant_id = %s AND subject_id = %s AND destroyed_at IS NULL "
                "RETURNING key_id").format(self._s), (tenant, subject)).fetchall()
        destroyed = [r[0] for r in rows]
        self.forget(destroyed)
        return destroyed


def keyring_for(settings: Settings, dsn: str) -> tuple[PostgresKeyring | None,
                                                       ConnectionPool[Any] | None]:
    """The keyring the settings ask for (none without a master key), and its pool to close."""
    master = settings.master_key_bytes
    if master is None:
        return None, None
    pool: ConnectionPool[Any] = ConnectionPool(dsn, min_size=1, max_size=4, open=True,
                                               kwargs={"autocommit": True})
    return PostgresKeyring(pool, master, settings.postgres_schema), pool


def ensure_master_key(home: Path) -> str:
    """The embedded mode's master key: made once under ``home`` (owner-only), then reused."""
    path = home / "master.key"
    if not path.exists():
        home.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(base64.b64encode(os.urandom(32)).decode() + "\n")
    return path.read_text().strip()


def with_home_master_key(settings: Settings) -> Settings:
    """``settings`` with the embedded mode's master key when none is set and one exists under
    the home (operator commands attached to a running ``memledger up``)."""
    path = settings.home.expanduser() / "master.key"
    if settings.master_key is not None or not path.exists():
        return settings
    from pydantic import SecretStr

    return settings.model_copy(update={"master_key": SecretStr(path.read_text().strip())})
