"""``memledger verify``: the PostgreSQL read models against a rebuild from the log.

The log is rebuilt into a scratch schema with the rebuild's own function (the bulk path: one
fold, then COPY), so the live model, which the projector built batch by batch with upserts, is
checked against a second way of computing it; memory stays bounded by the rebuild's own limit.
The rebuild reads the log only up to the live checkpoint, and if the projector moves on
meanwhile the scratch model is brought to the same position (by the projector's ``apply_to``)
before both are read in one snapshot. Then PostgreSQL itself counts and hashes every table per
(tenant, space) on both sides (a sum of row hashes), so only those sums reach this process.

A live checkpoint behind the committed position is reported as lag, apart from differences.
"""

import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import psycopg
from psycopg import IsolationLevel, sql

from memledger_platform.crypto import ERASED
from memledger_platform.events import VECTOR, decode
from memledger_platform.eventstore import EventStore, RecordedEvent
from memledger_platform.eventstore.port import Committed, IdempotentResult
from memledger_platform.eventstore.postgres import EVENTS_TABLE
from memledger_platform.readmodel import schema
from memledger_platform.readmodel.checkpoint import read_checkpoint
from memledger_projector.core import rebuild, store
from memledger_query.core.vector_summary import Digests, Row, micros, summarize

_TABLES = ("spaces", "agents", "sessions", "messages", "preferences", "signals", "mentions",
           "items", "item_versions", "entities", "relations", "changes")
_VERSION_ROW = "(t.tenant_id, t.item_id, t.valid, t.sys_from, t.sys_to, t.attrs, t.cause)"
_BATCH = 5_000

Key = tuple[str, str, str]
"""(table, tenant, space); ``*`` for the space of a table that has none (agents)."""


@dataclass
class ModelComparison:
    live_schema: str
    position: int
    """The position both models were compared at."""
    committed: int
    tables: dict[Key, tuple[tuple[int, int], tuple[int, int]]] = field(default_factory=dict)
    """(rows, digest) live and expected, for every key either side has."""
    vectors: Digests = field(default_factory=dict)
    """What the vector index should hold as of ``position`` (from the rebuild)."""
    items: list[tuple[str, str, str]] = field(default_factory=list)
    missing: str = ""
    """Why there was nothing to compare (no read model yet), if so."""

    @property
    def lag(self) -> int:
        return max(0, self.committed - self.position)

    def differences(self) -> list[dict[str, Any]]:
        found = []
        for (table, tenant, space), (live, expected) in sorted(self.tables.items()):
            if live != expected:
                what = "content differs" if live[0] == expected[0] else "row count differs"
                found.append({"table": table, "tenant": tenant, "space": space,
                              "rows": live[0], "expected_rows": expected[0], "what": what})
        return found


class LogUpTo(EventStore):
    """A read-only view of the log through ``last`` (what the rebuild is given)."""

    def __init__(self, inner: EventStore, last: int) -> None:
        self._inner, self._last = inner, last

    def read_all(self, after: int, limit: int) -> list[RecordedEvent]:
        return [e for e in self._inner.read_all(after, limit) if e.position <= self._last]

    def read_partition(self, partition: int, after: int, limit: int) -> list[RecordedEvent]:
        return [e for e in self._inner.read_partition(partition, after, limit)
                if e.position <= self._last]

    def max_position(self) -> int:
        return min(self._last, self._inner.max_position())

    def append(self, events: Sequence[Any], keys: Sequence[Any] = ()) -> list[Committed]:
        raise TypeError("a read-only view of the log")

    def read_streams(self, stream_ids: Sequence[UUID]) -> dict[UUID, list[RecordedEvent]]:
        return self._inner.read_streams(stream_ids)

    def find_idempotent(self, tenant_id: str, keys: Sequence[str]
                        ) -> dict[str, IdempotentResult]:
        return self._inner.find_idempotent(tenant_id, keys)

    def interrupt(self) -> None:
        self._inner.interrupt()


def projected_through(conn: psycopg.Connection[Any], names: schema.Names, live: str) -> int:
    """The position through which the live model holds every event: its checkpoint; with the
    events partitioned (docs/adr/0016), each partition has its own, so it is the highest one
    short of the first event a partition has not projected yet."""
    if names.partitions == 1:
        return read_checkpoint(conn, live).position
    events = sql.SQL("{}.{}").format(sql.Identifier(names.base), sql.Identifier(EVENTS_TABLE))
    rows = conn.execute(sql.SQL(
        "SELECT c.position, (SELECT min(e.notification_id) FROM {events} e WHERE "
        "e.tenant_partition = c.tenant_partition AND e.notification_id > c.position) "
        "FROM {live}.checkpoint c").format(events=events, live=sql.Identifier(live))
    ).fetchall()
    return int(min([max(r[0] for r in rows), *(r[1] - 1 for r in rows if r[1] is not None)]))


def compare(dsn: str, event_store: EventStore, names: schema.Names, committed: int,
            progress: rebuild.Progress | None = None, *, vectors: bool = True,
            items: bool = False) -> ModelComparison:
    """The live model against a rebuild of the log, at the live checkpoint; with the vector
    digests the rebuild implies (``vectors``) and its item ids (``items``)."""
    with psycopg.connect(dsn, autocommit=True) as conn, _scratch(conn) as scratch:
        try:
            live = names.schema(schema.live_version(conn, names))
            position = projected_through(conn, names, live)
        except (LookupError, psycopg.errors.UndefinedTable):
            return ModelComparison("", 0, committed, missing="no read model yet (has the "
                                   "projector ever run?)")
        built = rebuild.rebuild(conn, LogUpTo(event_store, position), scratch, progress)
        target = scratch.schema(built.version)
        with _snapshot(dsn) as snap:
            position = projected_through(snap, names, live)
            _catch_up(conn, event_store, target, position)
            result = ModelComparison(live, position, committed)
            mine, theirs = table_digests(snap, live), table_digests(conn, target)
        for key in set(mine) | set(theirs):
            result.tables[key] = (mine.get(key, (0, 0)), theirs.get(key, (0, 0)))
        if vectors:
            result.vectors = summarize(version_rows(conn, target), position)
        if items:
            result.items = items_of(conn, target)
        return result


def table_digests(conn: psycopg.Connection[Any], s: str) -> dict[Key, tuple[int, int]]:
    """(rows, digest) per table and (tenant, space), computed by PostgreSQL."""
    found: dict[Key, tuple[int, int]] = {}
    for table in _TABLES:
        row = _VERSION_ROW if table == "item_versions" else "t"
        space = {"agents": "'*'", "item_versions": "coalesce(i.space_id, '?')"}.get(
            table, "t.space_id")
        join = ("LEFT JOIN {s}.items i ON i.tenant_id = t.tenant_id AND i.item_id = t.item_id"
                if table == "item_versions" else "")
        query = sql.SQL(
            "SELECT t.tenant_id, " + space + ", count(*), sum(('x' || left(md5(" + row +  # noqa: S608
            "::text), 15))::bit(60)::bigint) FROM {s}.{t} t " + join + " GROUP BY 1, 2"
        ).format(s=sql.Identifier(s), t=sql.Identifier(table))
        for tenant, scope, rows, digest in conn.execute(query).fetchall():
            found[(table, tenant, scope)] = (int(rows), int(digest or 0))
    return found


def version_rows(conn: psycopg.Connection[Any], s: str) -> Iterator[tuple[str, str, Row]]:
    """Every item version and every message as a vector-index row, streamed."""
    yield from _item_rows(conn, s)
    yield from _message_rows(conn, s)


def _item_rows(conn: psycopg.Connection[Any], s: str) -> Iterator[tuple[str, str, Row]]:
    """Every item version as a vector-index row, streamed (a server-side cursor)."""
    query = sql.SQL(
        "SELECT t.tenant_id, i.space_id, t.item_id::text, t.sys_from, t.sys_to, lower(t.valid), "
        "upper(t.valid), i.archived_position, t.attrs->>'content' FROM {s}.item_versions t "
        "JOIN {s}.items i ON i.tenant_id = t.tenant_id AND i.item_id = t.item_id "
        # An erased subject's rows stay (scrubbed) in PostgreSQL but leave the vector index.
        "WHERE t.attrs->>'content' IS DISTINCT FROM %s").format(s=sql.Identifier(s))
    with conn.transaction(), conn.cursor(name=f"verify_{uuid.uuid4().hex[:8]}") as cur:
        cur.itersize = _BATCH
        cur.execute(query, (ERASED,))
        for tenant, space, item, sys_from, sys_to, lower, upper, archived, content in cur:
            yield tenant, space, Row(item, sys_from, sys_to, micros(lower),
                                     None if upper is None else micros(upper), archived,
                                     content or "")


def _message_rows(conn: psycopg.Connection[Any], s: str) -> Iterator[tuple[str, str, Row]]:
    """Every message as a vector-index row: one point, valid from when it was said, known
    from its position, never closed (an erased subject's messages leave the index)."""
    query = sql.SQL(
        "SELECT tenant_id, space_id, message_id::text, position, coalesce(said_at, recorded_at), "
        "content FROM {s}.messages WHERE content IS DISTINCT FROM %s").format(
        s=sql.Identifier(s))
    with conn.transaction(), conn.cursor(name=f"verify_{uuid.uuid4().hex[:8]}") as cur:
        cur.itersize = _BATCH
        cur.execute(query, (ERASED,))
        for tenant, space, message, position, said, content in cur:
            yield tenant, space, Row(message, position, None, micros(said), None, None, content)


def items_of(conn: psycopg.Connection[Any], s: str) -> list[tuple[str, str, str]]:
    """Every item and every message, as (tenant, space, id): the ids of the index's points."""
    return [(t, sp, i) for t, sp, i in conn.execute(sql.SQL(
        "SELECT tenant_id, space_id, item_id::text FROM {s}.items UNION ALL "
        "SELECT tenant_id, space_id, message_id::text FROM {s}.messages").format(
        s=sql.Identifier(s))).fetchall()]


def _catch_up(conn: psycopg.Connection[Any], event_store: EventStore, target: str,
              until: int) -> None:
    """Apply the events after ``target``'s checkpoint through ``until``."""
    while (after := read_checkpoint(conn, target).position) < until:
        batch = [e for e in event_store.read_all(after, _BATCH) if e.position <= until]
        if not batch:
            return
        with conn.transaction():
            store.apply_to(conn, target, [decode(e.data, position=e.position,
                                                 recorded_at=e.recorded_at, skip=VECTOR)
                                          for e in batch])


@contextmanager
def _scratch(conn: psycopg.Connection[Any]) -> Iterator[schema.Names]:
    """Names for a rebuild of our own, dropped afterwards whatever happens."""
    names = schema.Names(f"memledger_verify_{uuid.uuid4().hex[:8]}")
    try:
        yield names
    finally:
        found = conn.execute("SELECT nspname FROM pg_namespace WHERE nspname = %s OR "
                             "starts_with(nspname, %s)", (names.base, f"{names.base}_rm_"))
        for (name,) in found.fetchall():
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                sql.Identifier(name)))


@contextmanager
def _snapshot(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection whose reads all see one snapshot (repeatable read, rolled back)."""
    with psycopg.connect(dsn) as conn:
        conn.isolation_level = IsolationLevel.REPEATABLE_READ
        try:
            yield conn
        finally:
            conn.rollback()
