"""What each read model purged for an erasure, kept beside the event store so the receipt can
be assembled from any service: one row per (tenant, subject, erasure position, projection)."""

import json
from typing import Any

from psycopg import Connection, sql

PROJECTIONS = ("postgres", "vectors")
"""Every read model that must report before an erasure's receipt is complete."""

_TABLE = """
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.memledger_erasure_receipts (
    tenant_id text NOT NULL, subject_id text NOT NULL, position bigint NOT NULL,
    projection text NOT NULL, purged jsonb NOT NULL, recorded_at timestamptz NOT NULL
    DEFAULT now(), PRIMARY KEY (tenant_id, subject_id, position, projection));
"""


def ensure(conn: Connection[Any], schema: str) -> None:
    conn.execute(sql.SQL(_TABLE).format(s=sql.Identifier(schema)))


def record(conn: Connection[Any], schema: str, tenant: str, subject: str, position: int,
           projection: str, purged: dict[str, Any]) -> None:
    """Idempotent: an erasure applied again (a redelivery, a rebuild) keeps the first counts,
    which are what was actually purged from the live model."""
    conn.execute(sql.SQL(
        "INSERT INTO {}.memledger_erasure_receipts (tenant_id, subject_id, position, "
        "projection, purged) VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING").format(
        sql.Identifier(schema)), (tenant, subject, position, projection, json.dumps(purged)))


def read(conn: Connection[Any], schema: str, tenant: str, subject: str
         ) -> dict[int, dict[str, dict[str, Any]]]:
    """Erasure position → projection → what it purged (row counts, and what it vacuumed)."""
    rows = conn.execute(sql.SQL(
        "SELECT position, projection, purged FROM {}.memledger_erasure_receipts WHERE "
        "tenant_id = %s AND subject_id = %s ORDER BY position, projection").format(
        sql.Identifier(schema)), (tenant, subject)).fetchall()
    found: dict[int, dict[str, dict[str, Any]]] = {}
    for position, projection, purged in rows:
        found.setdefault(int(position), {})[projection] = purged
    return found


def recent(conn: Connection[Any], schema: str, tenant: str, limit: int
           ) -> list[tuple[int, str, Any, dict[str, dict[str, int]]]]:
    """The tenant's last ``limit`` erasures, newest first: (position, subject, first
    recorded_at, projection → what it purged)."""
    rows = conn.execute(sql.SQL(
        "SELECT position, subject_id, projection, purged, recorded_at FROM "
        "{0}.memledger_erasure_receipts WHERE tenant_id = %s AND position IN (SELECT DISTINCT "
        "position FROM {0}.memledger_erasure_receipts WHERE tenant_id = %s ORDER BY position "
        "DESC LIMIT %s) ORDER BY position DESC, projection").format(sql.Identifier(schema)),
        (tenant, tenant, limit)).fetchall()
    found: dict[tuple[int, str], tuple[Any, dict[str, dict[str, int]]]] = {}
    for position, subject, projection, purged, recorded_at in rows:
        found.setdefault((int(position), subject), (recorded_at, {}))[1][projection] = purged
    return [(p, subject, at, by) for (p, subject), (at, by) in found.items()]


def wait_for(dsn: str, schema: str, tenant: str, subject: str, position: int,
             seconds: float) -> tuple[dict[str, dict[str, Any]], bool]:
    """What each read model purged for the erasure at ``position``, waiting up to ``seconds``
    for all of them to report; and whether all did."""
    import time

    import psycopg

    deadline = time.monotonic() + seconds
    with psycopg.connect(dsn, autocommit=True) as conn:
        ensure(conn, schema)
        while True:
            found = read(conn, schema, tenant, subject).get(position, {})
            complete = set(PROJECTIONS) <= set(found)
            if complete or time.monotonic() > deadline:
                return found, complete
            time.sleep(0.1)
