"""Where an erased token could still be found in PostgreSQL below SQL: in any tuple of a table
or of its btree indexes, live or dead (``pageinspect``), in the planner's statistics, and in
the write-ahead log's files."""

from pathlib import Path
from typing import Any

import psycopg
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError
from psycopg import sql

from memledger_schemas.subjects import Subjects


def relations_of(conn: psycopg.Connection[Any], tables: list[str]) -> list[str]:
    """``tables`` (qualified names), their TOAST tables and their indexes."""
    rows = conn.execute(
        "SELECT c.oid::regclass::text FROM pg_class c WHERE c.oid = ANY(%(t)s::regclass[]) "
        "UNION SELECT c.reltoastrelid::regclass::text FROM pg_class c WHERE c.oid = "
        "ANY(%(t)s::regclass[]) AND c.reltoastrelid <> 0 UNION SELECT i.indexrelid::regclass"
        "::text FROM pg_index i WHERE i.indrelid = ANY(%(t)s::regclass[]) ORDER BY 1",
        {"t": tables}).fetchall()
    return [r[0] for r in rows]


def tables_of(conn: psycopg.Connection[Any], schema: str) -> list[str]:
    rows = conn.execute("SELECT format('%%I.%%I', schemaname, tablename) FROM pg_tables WHERE "
                        "schemaname = %s ORDER BY 1", (schema,)).fetchall()
    return [r[0] for r in rows]


def tuple_hits(conn: psycopg.Connection[Any], tables: list[str], needle: bytes) -> list[str]:
    """Those of ``tables`` (with their TOAST tables and btree indexes) that have a tuple,
    live or dead, whose bytes hold ``needle``: what a superuser reading pages still finds
    once SQL shows nothing. (Free space between tuples is not a tuple: a plain VACUUM leaves
    freed bytes there until the page is written again.)"""
    conn.execute("CREATE EXTENSION IF NOT EXISTS pageinspect")
    relations = conn.execute(
        "SELECT c.oid::regclass::text, c.relkind, coalesce(am.amname, '') FROM pg_class c "
        "LEFT JOIN pg_am am ON am.oid = c.relam WHERE c.oid = ANY(%s::regclass[]) ORDER BY 1",
        (relations_of(conn, tables),)).fetchall()
    found = []
    for name, kind, method in relations:
        heap = kind in ("r", "t") and _heap_hits(conn, name, needle)
        if heap or (method == "btree" and _btree_hits(conn, name, needle)):
            found.append(name)
    return found


def _heap_hits(conn: psycopg.Connection[Any], relation: str, needle: bytes) -> int:
    row = conn.execute(
        "SELECT count(*) FROM generate_series(0, pg_relation_size(%s::regclass) / 8192 - 1) b, "
        "heap_page_items(get_raw_page(%s, b::int)) WHERE position(%s::bytea IN t_data) > 0",
        (relation, relation, needle)).fetchone()
    return int(row[0]) if row else 0


def _btree_hits(conn: psycopg.Connection[Any], relation: str, needle: bytes) -> int:
    """Index tuples whose key holds ``needle`` (``bt_page_items`` shows a key as hex bytes);
    block 0 is the metapage, and deleted pages hold no items."""
    pattern = "%" + " ".join(f"{b:02x}" for b in needle) + "%"
    pages = conn.execute("SELECT pg_relation_size(%s::regclass) / 8192",
                         (relation,)).fetchone()
    hits = 0
    for block in range(1, int(pages[0]) if pages else 0):
        kind = conn.execute("SELECT type FROM bt_page_stats(%s, %s)", (relation, block)
                            ).fetchone()
        if kind is None or kind[0] == "d":
            continue
        row = conn.execute("SELECT count(*) FROM bt_page_items(get_raw_page(%s, %s)) WHERE "
                           "data LIKE %s", (relation, block, pattern)).fetchone()
        hits += int(row[0]) if row else 0
    return hits


def statistics_hits(conn: psycopg.Connection[Any], schema: str, needle: str) -> list[str]:
    """Columns of ``schema``'s tables whose planner statistics (most common values, histogram
    bounds) hold ``needle``."""
    rows = conn.execute(
        "SELECT tablename, attname FROM pg_stats WHERE schemaname = %s AND concat_ws(' ', "
        "most_common_vals::text, histogram_bounds::text, most_common_elems::text) LIKE %s",
        (schema, f"%{needle}%")).fetchall()
    return [f"{table}.{column}" for table, column in rows]


def analyze(conn: psycopg.Connection[Any], schema: str) -> None:
    for table in tables_of(conn, schema):
        conn.execute(sql.SQL("ANALYZE {}").format(sql.SQL(table)))


def wal_hits(conn: psycopg.Connection[Any], needle: bytes) -> list[str]:
    """The write-ahead log's segment files holding ``needle``."""
    row = conn.execute("SHOW data_directory").fetchone()
    assert row is not None
    wal = Path(row[0]) / "pg_wal"
    return sorted(p.name for p in wal.iterdir() if p.is_file() and needle in p.read_bytes())


async def stream_hits(js: JetStreamContext, subjects: Subjects, needles: tuple[str, ...]
                      ) -> list[str]:
    """Every message of the test's streams holding a needle, as ``<stream>#<seq>: needle``.
    Read by sequence: it works for every retention (the intake stream is a work queue)."""
    hits = []
    for stream in (subjects.events_stream, subjects.intake_stream,
                   subjects.dead_letter_stream):
        state = (await js.stream_info(stream)).state
        if not state.messages:
            continue
        for seq in range(max(1, state.first_seq), state.last_seq + 1):
            try:
                msg = await js.get_msg(stream, seq)
            except NotFoundError:
                continue  # deleted (a work queue's consumed message)
            text = (msg.data or b"").decode("utf-8", errors="ignore") + str(msg.headers)
            hits += [f"{stream}#{seq}: {n}" for n in needles if n in text]
    return hits
