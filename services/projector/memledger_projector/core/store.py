"""Writing a batch of events to the PostgreSQL read models, with the checkpoint, atomically.

A batch is folded by the pure ``Projection``, seeded with the rows the batch will change (read
in a few queries), and the result is written back in the same transaction as the checkpoint.
A redelivered event (position at or below the checkpoint) changes nothing.
"""

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import orjson
from psycopg import Connection, sql
from psycopg.types import json
from psycopg.types.json import Jsonb

from memledger_platform import notices
from memledger_platform.events import Event
from memledger_platform.readmodel import schema, temporal
from memledger_platform.readmodel.checkpoint import Checkpoint, read_checkpoint
from memledger_platform.readmodel.projection import ITEM_CHANGES, Projection
from memledger_platform.readmodel.temporal import Version
from memledger_projector.core.copytext import (
    CHANGE_COLUMNS,
    ITEM_COLUMNS,
    VERSION_COLUMNS,
    attrs_json,
    change_line_of,
    copy_lines,
    copy_rows,
    item_line,
    valid_range,
    version_line,
    version_lines,
)
from memledger_projector.core.statements import rendered
from memledger_schemas.event_types import EventType


def tune(conn: Connection[Any]) -> Connection[Any]:
    """Use orjson for jsonb on this connection (the stdlib's json was the projector's biggest
    CPU cost after the database itself)."""
    json.set_json_loads(orjson.loads, conn)
    json.set_json_dumps(orjson.dumps, conn)
    return conn


def apply_batch(conn: Connection[Any], names: schema.Names, events: Sequence[Event],
                stream_seq: int | None = None, partition: int | None = None) -> Checkpoint:
    """Apply ``events`` (in position order) to the live projection in one transaction; return
    the new checkpoint. ``stream_seq``: the JetStream sequence of the last event, if any;
    ``partition``: the events are that partition's, checkpointed on its row. The commit
    notifies ``names.projected`` with the checkpoint, so a read waiting for it wakes at once."""
    with conn.transaction():
        version = schema.live_version(conn, names, lock="FOR SHARE")
        checkpoint = apply_to(conn, names.schema(version), events, stream_seq, partition)
        notices.notify(conn, names.projected, schema.projected_notice(checkpoint.position,
                                                                      partition))
        return checkpoint


def write_fold(conn: Connection[Any], schema_name: str, projection: Projection) -> Checkpoint:
    """Write a whole fold into an empty projection schema, with its checkpoint, inside the
    caller's transaction."""
    write_rows(conn, schema_name, projection)
    return write_checkpoint(conn, schema_name, projection.position, projection.recorded_at)


def write_rows(conn: Connection[Any], schema_name: str, projection: Projection) -> None:
    """Write a fold's rows into an empty projection schema, inside the caller's transaction.
    A bulk load: every row is new, so each table is one COPY (the change log only if the
    fold kept it)."""
    s = schema_name
    copy_lines(conn, s, "items", ITEM_COLUMNS, [item_line(r) for r in projection.items.values()])
    for table in ("spaces", "agents", "sessions", "relations"):
        copy_rows(conn, s, table, list(getattr(projection, table).values()))
    _upsert(conn, s, "entities", _UPSERTS["entities"][1],  # aliases: a text[] column
            list(projection.entities.values()))
    copy_lines(conn, s, "item_versions", VERSION_COLUMNS, version_lines(projection.rows))
    _write_logs(conn, s, projection)


def write_checkpoint(conn: Connection[Any], schema_name: str, position: int,
                     recorded_at: datetime | None) -> Checkpoint:
    conn.execute(sql.SQL("UPDATE {}.checkpoint SET position = %s, recorded_at = %s").format(
        sql.Identifier(schema_name)), (position, recorded_at))
    return Checkpoint(position, 0, recorded_at)


def apply_to(conn: Connection[Any], schema_name: str, events: Sequence[Event],
             stream_seq: int | None = None, partition: int | None = None) -> Checkpoint:
    """Apply ``events`` to the projection in ``schema_name`` (inside the caller's transaction):
    one partition's (its checkpoint row moves), or (``None``) the whole log's (every row)."""
    before = read_checkpoint(conn, schema_name, lock=True, partition=partition)
    fresh = [e for e in events if e.position > before.position]
    if not fresh:
        return before
    projection = _seed(conn, schema_name, fresh, before.position)
    for event in fresh:
        projection.apply(event)
    _flush(conn, schema_name, projection)
    after = Checkpoint(fresh[-1].position, stream_seq or before.stream_seq, fresh[-1].recorded_at)
    if partition is None:
        # the whole log's events: every partition's row, each keeping its stream's sequence
        conn.execute(_checkpoint_sql(schema_name, False),
                     (after.position, stream_seq, after.recorded_at))
    else:
        conn.execute(_checkpoint_sql(schema_name, True),
                     (after.position, after.stream_seq, after.recorded_at, partition))
    return after


@rendered
def _checkpoint_sql(s: str, partitioned: bool) -> sql.Composed:
    if partitioned:
        return sql.SQL("UPDATE {}.checkpoint SET position = %s, stream_seq = %s, "
                       "recorded_at = %s WHERE tenant_partition = %s").format(sql.Identifier(s))
    return sql.SQL("UPDATE {}.checkpoint SET position = %s, stream_seq = coalesce(%s, "
                   "stream_seq), recorded_at = %s").format(sql.Identifier(s))


# --- seeding: the rows this batch will change ----------------------------------------------

def _seed(conn: Connection[Any], s: str, events: Sequence[Event], position: int) -> Projection:
    projection = Projection(position=position)
    items = {(e.tenant_id, str(e.payload["item_id"])) for e in events
             if e.event_type in ITEM_CHANGES}
    spaces = {(e.tenant_id, e.space_id) for e in events if e.event_type.startswith("space.")}
    sessions = {(e.tenant_id, str(e.payload["session_id"])) for e in events
                if e.event_type == EventType.SESSION_ENDED}
    relations = {(e.tenant_id, str(e.payload["relation_id"])) for e in events
                 if e.event_type == EventType.RELATION_RETRACTED}
    projection.items.update(_rows(conn, s, "items", "item_id", items))
    projection.spaces.update(_rows(conn, s, "spaces", "space_id", spaces))
    projection.sessions.update(_rows(conn, s, "sessions", "session_id", sessions))
    projection.relations.update(_rows(conn, s, "relations", "relation_id", relations))
    projection.rows.update(_current_versions(conn, s, items))
    return projection


def _rows(conn: Connection[Any], s: str, table: str, id_column: str,
          keys: set[tuple[str, str]]) -> dict[tuple[str, str], dict[str, Any]]:
    if not keys:
        return {}
    tenants, ids = zip(*keys, strict=True)
    with conn.cursor() as cur:
        cur.execute(rows_query(conn, s, table, id_column), (list(tenants), list(ids)))
        columns = [c.name for c in cur.description or ()]
        found = [dict(zip(columns, row, strict=True)) for row in cur.fetchall()]
    return {(r["tenant_id"], str(r[id_column])): _stringify(r, id_column) for r in found}


def rows_query(conn: Connection[Any], s: str, table: str, id_column: str) -> bytes:
    """The rows of ``table`` with the (tenant, id) pairs of two array parameters."""
    return _rows_sql(s, table, id_column, _column_types(conn, s, table)[id_column])


@rendered
def _rows_sql(s: str, table: str, id_column: str, id_type: str) -> sql.Composed:
    # The ids are cast to the column's type, not the column to text: a cast column cannot use
    # the primary key, and every batch read the whole table (quadratic in the model's size).
    return sql.SQL("SELECT * FROM {}.{} WHERE (tenant_id, {}) IN (SELECT * FROM "
                   "unnest(%s::text[], %s::{}[]))").format(
        sql.Identifier(s), sql.Identifier(table), sql.Identifier(id_column), sql.SQL(id_type))


@rendered
def versions_query(s: str) -> sql.Composed:
    """The current rows of the items with the (tenant, item id) pairs of two array
    parameters (by ``versions_by_item``, as ``rows_query`` by the primary key)."""
    return sql.SQL(
        "SELECT row_id, tenant_id, item_id::text, lower(valid), upper(valid), sys_from, attrs, "
        "cause FROM {}.item_versions WHERE sys_to IS NULL AND (tenant_id, item_id) IN "
        "(SELECT * FROM unnest(%s::text[], %s::uuid[])) ORDER BY lower(valid)").format(
        sql.Identifier(s))


def _stringify(row: dict[str, Any], *columns: str) -> dict[str, Any]:
    uuid_columns = {"item_id", "session_id", "relation_id", "superseded_by", *columns}
    return {k: (str(v) if k in uuid_columns and v is not None and k != "space_id" else v)
            for k, v in row.items()}


def _current_versions(conn: Connection[Any], s: str, keys: set[tuple[str, str]]
                      ) -> dict[tuple[str, str], list[Version]]:
    if not keys:
        return {}
    tenants, ids = zip(*keys, strict=True)
    query = versions_query(s)
    found: dict[tuple[str, str], list[Version]] = {}
    for row_id, tenant, item, lower, upper, sys_from, attrs, cause in conn.execute(
            query, (list(tenants), list(ids))).fetchall():
        found.setdefault((tenant, item), []).append(Version(
            lower, upper, sys_from, None, temporal.attrs_of(attrs), temporal.attrs_of(cause),
            row_id))
    return found


# --- flushing --------------------------------------------------------------------------------

_UPSERTS = {
    "spaces": ("spaces", ("tenant_id", "space_id")),
    "agents": ("agents", ("tenant_id", "agent_id")),
    "sessions": ("sessions", ("tenant_id", "session_id")),
    "items": ("items", ("tenant_id", "item_id")),
    "entities": ("entities", ("tenant_id", "space_id", "entity_id")),
    "relations": ("relations", ("tenant_id", "relation_id")),
}


def _flush(conn: Connection[Any], s: str, projection: Projection) -> None:
    for kind, (table, key_columns) in _UPSERTS.items():
        rows = [getattr(projection, kind)[key] for dirty_kind, key in projection.dirty
                if dirty_kind == kind]
        _upsert(conn, s, table, key_columns, rows)
    _write_versions(conn, s, projection)
    _write_logs(conn, s, projection)


def _write_logs(conn: Connection[Any], s: str, projection: Projection) -> None:
    """The append-only tables: every row in them is new."""
    copy_rows(conn, s, "messages", projection.messages)
    copy_rows(conn, s, "preferences", projection.preferences)
    copy_rows(conn, s, "signals", projection.signals)
    copy_rows(conn, s, "mentions", projection.mentions)
    copy_lines(conn, s, "changes", CHANGE_COLUMNS, [change_line_of(c)
                                                    for c in projection.changes])


def _upsert(conn: Connection[Any], s: str, table: str, key: tuple[str, ...],
            rows: list[dict[str, Any]]) -> None:
    """Insert or update ``rows`` in one statement (one array per column, cast to the column's
    type), rather than one statement per row."""
    if not rows:
        return
    columns = list(rows[0])
    types = _column_types(conn, s, table)
    if any(types[c].endswith("[]") for c in columns):
        _upsert_rows(conn, s, table, key, rows)  # unnest would flatten an array column
        return
    query = _upsert_sql(s, table, tuple(columns), key, tuple(types[c] for c in columns))
    conn.execute(query, [[_adapt(r[c]) for r in rows] for c in columns])


@rendered
def _upsert_sql(s: str, table: str, columns: tuple[str, ...], key: tuple[str, ...],
                types: tuple[str, ...]) -> sql.Composed:
    return sql.SQL("INSERT INTO {}.{} ({}) SELECT * FROM unnest({}) ON CONFLICT ({}) "
                   "DO UPDATE SET {}").format(
        sql.Identifier(s), sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, columns)),
        sql.SQL(", ").join(sql.SQL("%s::{}[]").format(sql.SQL(t)) for t in types),
        sql.SQL(", ").join(map(sql.Identifier, key)), _updates(list(columns), key))


def _upsert_rows(conn: Connection[Any], s: str, table: str, key: tuple[str, ...],
                 rows: list[dict[str, Any]]) -> None:
    columns = list(rows[0])
    query = sql.SQL("INSERT INTO {}.{} ({}) VALUES ({}) ON CONFLICT ({}) DO UPDATE SET {}").format(
        sql.Identifier(s), sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, columns)),
        sql.SQL(", ").join(sql.Placeholder() * len(columns)),
        sql.SQL(", ").join(map(sql.Identifier, key)), _updates(columns, key))
    with conn.cursor() as cur:
        cur.executemany(query, [[_adapt(r[c]) for c in columns] for r in rows])


def _updates(columns: list[str], key: tuple[str, ...]) -> sql.Composed:
    # created_* columns keep their first value: a later upsert (an entity renamed) must not
    # move when the thing first existed.
    return sql.SQL(", ").join(sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c))
                              for c in columns if c not in key and not c.startswith("created_"))


_TYPES: dict[tuple[str, str], dict[str, str]] = {}


def _column_types(conn: Connection[Any], s: str, table: str) -> dict[str, str]:
    if (s, table) not in _TYPES:  # fixed by the schema: read once per process
        rows = conn.execute(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
            "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped",
            (f'"{s}"."{table}"',)).fetchall()
        _TYPES[(s, table)] = dict(rows)
    return _TYPES[(s, table)]


def _write_versions(conn: Connection[Any], s: str, projection: Projection) -> None:
    closes: list[tuple[int, int]] = []
    inserts: list[tuple[Any, ...]] = []
    for dirty_kind, key in projection.dirty:
        if dirty_kind != "rows":
            continue
        for row in projection.rows[key]:
            if row.row_id is not None and row.sys_to is not None:
                closes.append((row.sys_to, row.row_id))
            elif row.row_id is None:
                inserts.append((key[0], key[1], valid_range(row.valid_from, row.valid_to),
                                row.sys_from, row.sys_to, attrs_json(row.attrs),
                                attrs_json(row.cause)))
    with conn.cursor() as cur:
        if closes:  # close first: the exclusion constraint holds for current rows only
            cur.execute(_close_sql(s), ([c[0] for c in closes], [c[1] for c in closes]))
    copy_lines(conn, s, "item_versions", VERSION_COLUMNS, [
        version_line(*values) for values in inserts])


@rendered
def _close_sql(s: str) -> sql.Composed:
    return sql.SQL("UPDATE {}.item_versions v SET sys_to = c.sys_to FROM unnest(%s::bigint[], "
                   "%s::bigint[]) AS c(sys_to, row_id) WHERE v.row_id = c.row_id").format(
        sql.Identifier(s))


def _adapt(value: Any) -> Any:
    return Jsonb(value) if isinstance(value, dict) else value
