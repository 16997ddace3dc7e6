"""Writing a batch of events to the PostgreSQL read models, with the checkpoint, atomically.

A batch is folded by the pure ``Projection``, seeded with the rows the batch will change (read
in a few queries), and the result is written back in the same transaction as the checkpoint.
A redelivered event (position at or below the checkpoint) changes nothing.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from psycopg import Connection, sql
from psycopg.types import json
from psycopg.types.json import Jsonb

from memledger_projector import schema, temporal
from memledger_projector.projection import Event, Projection
from memledger_projector.temporal import Version


@dataclass(frozen=True)
class Checkpoint:
    position: int
    stream_seq: int
    recorded_at: datetime | None


def tune(conn: Connection[Any]) -> Connection[Any]:
    """Use orjson for jsonb on this connection (the stdlib's json was the projector's biggest
    CPU cost after the database itself)."""
    json.set_json_loads(orjson.loads, conn)
    json.set_json_dumps(orjson.dumps, conn)
    return conn


def read_checkpoint(conn: Connection[Any], schema_name: str, *, lock: bool = False
                    ) -> Checkpoint:
    query = "SELECT position, stream_seq, recorded_at FROM {}.checkpoint"
    row = conn.execute(sql.SQL(query + (" FOR UPDATE" if lock else "")).format(
        sql.Identifier(schema_name))).fetchone()
    assert row is not None
    return Checkpoint(row[0], row[1], row[2])


def apply_batch(conn: Connection[Any], names: schema.Names, events: Sequence[Event],
                stream_seq: int | None = None) -> Checkpoint:
    """Apply ``events`` (in position order) to the live projection in one transaction; return
    the new checkpoint. ``stream_seq``: the JetStream sequence of the last event, if any."""
    with conn.transaction():
        version = schema.live_version(conn, names, lock="FOR SHARE")
        return apply_to(conn, names.schema(version), events, stream_seq)


def write_fold(conn: Connection[Any], schema_name: str, projection: Projection) -> Checkpoint:
    """Write a whole fold into an empty projection schema (a bulk load: every row is new),
    with its checkpoint, inside the caller's transaction."""
    _flush(conn, schema_name, projection)
    last = projection.changes[-1] if projection.changes else None
    after = Checkpoint(projection.position, 0, last["recorded_at"] if last else None)
    conn.execute(sql.SQL("UPDATE {}.checkpoint SET position = %s, recorded_at = %s").format(
        sql.Identifier(schema_name)), (after.position, after.recorded_at))
    return after


def apply_to(conn: Connection[Any], schema_name: str, events: Sequence[Event],
             stream_seq: int | None = None) -> Checkpoint:
    """Apply ``events`` to the projection in ``schema_name`` (inside the caller's transaction)."""
    before = read_checkpoint(conn, schema_name, lock=True)
    fresh = [e for e in events if e.position > before.position]
    if not fresh:
        return before
    projection = _seed(conn, schema_name, fresh, before.position)
    for event in fresh:
        projection.apply(event)
    _flush(conn, schema_name, projection)
    after = Checkpoint(fresh[-1].position, stream_seq or before.stream_seq, fresh[-1].recorded_at)
    conn.execute(sql.SQL("UPDATE {}.checkpoint SET position = %s, stream_seq = %s, "
                         "recorded_at = %s").format(sql.Identifier(schema_name)),
                 (after.position, after.stream_seq, after.recorded_at))
    return after


# --- seeding: the rows this batch will change ----------------------------------------------

def _seed(conn: Connection[Any], s: str, events: Sequence[Event], position: int) -> Projection:
    projection = Projection(position=position)
    items = {(e.tenant_id, str(e.payload["item_id"])) for e in events if "item_id" in e.payload
             and e.event_type.startswith("memory.") and e.event_type != "memory.asserted"}
    spaces = {(e.tenant_id, e.space_id) for e in events if e.event_type.startswith("space.")}
    sessions = {(e.tenant_id, str(e.payload["session_id"])) for e in events
                if e.event_type == "session.ended"}
    relations = {(e.tenant_id, str(e.payload["relation_id"])) for e in events
                 if e.event_type == "relation.retracted"}
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
    query = sql.SQL("SELECT * FROM {}.{} WHERE (tenant_id, {}::text) IN (SELECT * FROM "
                    "unnest(%s::text[], %s::text[]))").format(
        sql.Identifier(s), sql.Identifier(table), sql.Identifier(id_column))
    tenants, ids = zip(*keys, strict=True)
    with conn.cursor() as cur:
        cur.execute(query, (list(tenants), list(ids)))
        columns = [c.name for c in cur.description or ()]
        found = [dict(zip(columns, row, strict=True)) for row in cur.fetchall()]
    return {(r["tenant_id"], str(r[id_column])): _stringify(r, id_column) for r in found}


def _stringify(row: dict[str, Any], *columns: str) -> dict[str, Any]:
    uuid_columns = {"item_id", "session_id", "relation_id", "superseded_by", *columns}
    return {k: (str(v) if k in uuid_columns and v is not None and k != "space_id" else v)
            for k, v in row.items()}


def _current_versions(conn: Connection[Any], s: str, keys: set[tuple[str, str]]
                      ) -> dict[tuple[str, str], list[Version]]:
    if not keys:
        return {}
    tenants, ids = zip(*keys, strict=True)
    query = sql.SQL(
        "SELECT row_id, tenant_id, item_id::text, lower(valid), upper(valid), sys_from, attrs, "
        "cause FROM {}.item_versions WHERE sys_to IS NULL AND (tenant_id, item_id::text) IN "
        "(SELECT * FROM unnest(%s::text[], %s::text[])) ORDER BY lower(valid)").format(
        sql.Identifier(s))
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
    _copy(conn, s, "messages", projection.messages)
    _copy(conn, s, "preferences", projection.preferences)
    _copy_lines(conn, s, "changes", _CHANGE_COLUMNS, [_change_line(c)
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
    query = sql.SQL("INSERT INTO {}.{} ({}) SELECT * FROM unnest({}) ON CONFLICT ({}) "
                    "DO UPDATE SET {}").format(
        sql.Identifier(s), sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, columns)),
        sql.SQL(", ").join(sql.SQL("%s::{}[]").format(sql.SQL(types[c])) for c in columns),
        sql.SQL(", ").join(map(sql.Identifier, key)), _updates(columns, key))
    conn.execute(query, [[_adapt(r[c]) for r in rows] for c in columns])


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
                inserts.append((key[0], key[1], _range(row.valid_from, row.valid_to),
                                row.sys_from, row.sys_to, dict(row.attrs), dict(row.cause)))
    with conn.cursor() as cur:
        if closes:  # close first: the exclusion constraint holds for current rows only
            cur.execute(sql.SQL(
                "UPDATE {}.item_versions v SET sys_to = c.sys_to FROM unnest(%s::bigint[], "
                "%s::bigint[]) AS c(sys_to, row_id) WHERE v.row_id = c.row_id").format(
                sql.Identifier(s)), ([c[0] for c in closes], [c[1] for c in closes]))
    _copy_lines(conn, s, "item_versions", _VERSION_COLUMNS,
                [_version_line(*values) for values in inserts])


def _copy(conn: Connection[Any], s: str, table: str, rows: list[dict[str, Any]]) -> None:
    if rows:
        columns = tuple(rows[0])
        _copy_rows(conn, s, table, columns, [tuple(r[c] for c in columns) for r in rows])


def _copy_rows(conn: Connection[Any], s: str, table: str, columns: tuple[str, ...],
               rows: Sequence[tuple[Any, ...]]) -> None:
    """COPY ``rows`` in PostgreSQL's text format, written here rather than adapted value by
    value by psycopg (which cost more than the rest of a rebuild's write)."""
    _copy_lines(conn, s, table, columns,
                [b"\t".join(map(_copy_value, row)) + b"\n" for row in rows])


def _copy_lines(conn: Connection[Any], s: str, table: str, columns: tuple[str, ...],
                lines: Sequence[bytes]) -> None:
    if not lines:
        return
    query = sql.SQL("COPY {}.{} ({}) FROM STDIN").format(
        sql.Identifier(s), sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, columns)))
    with conn.cursor() as cur, cur.copy(query) as copy:
        for start in range(0, len(lines), _COPY_CHUNK):
            copy.write(b"".join(lines[start:start + _COPY_CHUNK]))


# The two big tables get line builders of their own (bytes formatting, escaping only where
# text is free: ids, slugs, positions and ISO times never hold a tab or a backslash).
_VERSION_COLUMNS = ("tenant_id", "item_id", "valid", "sys_from", "sys_to", "attrs", "cause")
_CHANGE_COLUMNS = ("position", "tenant_id", "space_id", "event_type", "event_id", "subject",
                   "actor", "reason", "recorded_at", "valid_from", "valid_to", "payload")


def _version_line(tenant: str, item: str, valid: str, sys_from: int, sys_to: int | None,
                  attrs: dict[str, Any], cause: dict[str, Any]) -> bytes:
    return b"%s\t%s\t%s\t%d\t%s\t%s\t%s\n" % (
        tenant.encode(), item.encode(), valid.encode(), sys_from,
        b"\\N" if sys_to is None else b"%d" % sys_to, _json(attrs), _json(cause))


def _change_line(c: dict[str, Any]) -> bytes:
    return b"%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n" % (
        c["position"], c["tenant_id"].encode(), c["space_id"].encode(),
        c["event_type"].encode(), c["event_id"].encode(), _copy_value(c["subject"]),
        _copy_value(c["actor"]), _copy_value(c["reason"]), c["recorded_at"].isoformat().encode(),
        _copy_value(c["valid_from"]), _copy_value(c["valid_to"]), _json(c["payload"]))


def _json(value: Any) -> bytes:
    return orjson.dumps(value).replace(b"\\", b"\\\\")


_COPY_CHUNK = 2_000
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _copy_value(value: Any) -> bytes:
    """One value in COPY text format (``\\N`` for null; backslash, tab, newline escaped)."""
    if value is None:
        return b"\\N"
    if isinstance(value, dict | list | Jsonb):
        encoded = orjson.dumps(value.obj if isinstance(value, Jsonb) else value)
        return encoded.replace(b"\\", b"\\\\")
    if isinstance(value, datetime):
        return value.isoformat().encode()
    if isinstance(value, bool):
        return b"t" if value else b"f"
    return str(value).translate(_COPY_ESCAPES).encode()


def _range(start: datetime, end: datetime | None) -> str:
    return f"[{start.isoformat()},{end.isoformat() if end else ''})"


def _adapt(value: Any) -> Any:
    return Jsonb(value) if isinstance(value, dict) else value
