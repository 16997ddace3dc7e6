"""Blue/green rebuild of the PostgreSQL read models from the event store.

The new version fills its own schema from position 1 while the live one keeps answering and
the projector keeps feeding it. To switch, the rebuild takes the pointer row FOR UPDATE (the
projector holds it FOR SHARE per batch, so it pauses), applies what is left, flips the pointer
and commits: the projector then continues on the new version from its checkpoint. The
previous version is kept for a rollback; older ones are dropped.
"""

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from psycopg import Connection, sql

from memledger_platform.eventstore import EventStore
from memledger_projector import schema, store
from memledger_projector.projection import Projection, event_of

Progress = Callable[[int, int], None]
"""Called with (position reached, target position)."""

_BATCH = 5_000
BULK_EVENTS = 500_000
"""How many events a rebuild folds in memory before writing (bounds its memory)."""
_HASHED = {
    "spaces": "tenant_id, space_id", "agents": "tenant_id, agent_id",
    "sessions": "tenant_id, session_id", "messages": "tenant_id, message_id",
    "preferences": "tenant_id, position",
    "items": "tenant_id, item_id", "entities": "tenant_id, space_id, entity_id",
    "relations": "tenant_id, relation_id", "changes": "position",
}


class RebuildStopped(Exception):
    """An event could not be applied; the live projection is untouched."""

    def __init__(self, first: int, last: int, error: Exception) -> None:
        super().__init__(f"rebuild stopped in the batch of positions {first}..{last}: "
                         f"{error!r}; the live projection is unchanged (find the event with "
                         f"`memledger replay --from-position {first} --to-position {last}`)")


@dataclass(frozen=True)
class Rebuilt:
    version: int
    previous: int
    position: int
    events: int


def rebuild(conn: Connection[Any], event_store: EventStore, names: schema.Names,
            progress: Progress | None = None) -> Rebuilt:
    """Rebuild into a new version and switch to it; return what was done."""
    store.tune(conn)
    live = schema.ensure_pointer(conn, names)
    version = live + 1
    conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
        sql.Identifier(names.schema(version))))  # a leftover of an interrupted rebuild
    until = event_store.max_position()
    target = schema.create(conn, names, version, indexes=False)
    events = _bulk(conn, event_store, target, until, progress)
    schema.add_indexes(conn, target)
    events += _fill(conn, event_store, target, until, progress)
    with conn.transaction():
        schema.live_version(conn, names, lock="FOR UPDATE")
        events += _fill(conn, event_store, target, None, progress)
        schema.switch(conn, names, version)
    _drop_older(conn, names, live)
    return Rebuilt(version, live, store.read_checkpoint(conn, target).position, events)


def _bulk(conn: Connection[Any], event_store: EventStore, target: str, until: int,
          progress: Progress | None, limit: int = BULK_EVENTS) -> int:
    """Fold up to ``limit`` events in memory and write them in one go into the empty
    ``target`` (no per-batch reads or updates; indexes come after). Returns how many."""
    projection, after = Projection(), 0
    while projection.position < until and len(projection.changes) < limit:
        batch = [e for e in event_store.read_all(after, _BATCH) if e.position <= until]
        if not batch:
            break
        try:
            for recorded in batch:
                projection.apply(event_of(recorded.position, recorded.recorded_at,
                                          recorded.data))
        except Exception as error:
            raise RebuildStopped(batch[0].position, batch[-1].position, error) from error
        after = batch[-1].position
        if progress is not None:
            progress(after, until)
    if not projection.changes:
        return 0
    try:
        with conn.transaction():
            store.write_fold(conn, target, projection)
    except Exception as error:
        raise RebuildStopped(1, projection.position, error) from error
    return len(projection.changes)


def _fill(conn: Connection[Any], event_store: EventStore, target: str, until: int | None,
          progress: Progress | None) -> int:
    """Apply events after ``target``'s checkpoint, up to ``until`` (``None``: all there are)."""
    count = 0
    end = until if until is not None else event_store.max_position()
    while True:
        after = store.read_checkpoint(conn, target).position
        batch = event_store.read_all(after, _BATCH)
        if until is not None:
            batch = [e for e in batch if e.position <= until]
        if not batch:
            return count
        try:
            with conn.transaction():
                store.apply_to(conn, target, [event_of(e.position, e.recorded_at, e.data)
                                              for e in batch])
        except Exception as error:
            raise RebuildStopped(batch[0].position, batch[-1].position, error) from error
        count += len(batch)
        if progress is not None:
            progress(batch[-1].position, max(end, batch[-1].position))


def _drop_older(conn: Connection[Any], names: schema.Names, keep_from: int) -> None:
    for version in range(1, keep_from):
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
            sql.Identifier(names.schema(version))))


def model_hash(conn: Connection[Any], schema_name: str) -> str:
    """A digest of a projection's content: equal for two models built from the same events
    (row ids and other storage details left out)."""
    digest = hashlib.sha256()
    for table, order in _HASHED.items():
        _hash_rows(conn, digest, sql.SQL("SELECT * FROM {}.{} ORDER BY {}").format(
            sql.Identifier(schema_name), sql.Identifier(table), sql.SQL(order)))
    _hash_rows(conn, digest, sql.SQL(
        "SELECT tenant_id, item_id, valid, sys_from, sys_to, attrs, cause FROM "
        "{}.item_versions ORDER BY tenant_id, item_id, sys_from, lower(valid)").format(
        sql.Identifier(schema_name)))
    checkpoint = store.read_checkpoint(conn, schema_name)
    digest.update(str(checkpoint.position).encode())
    return digest.hexdigest()


def _hash_rows(conn: Connection[Any], digest: "hashlib._Hash", query: sql.Composed) -> None:
    with conn.cursor() as cur:
        cur.execute(query)
        for row in cur:
            digest.update(repr(row).encode())
