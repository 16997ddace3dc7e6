"""Rows as lines of PostgreSQL's COPY text format, written here rather than adapted value by
value by psycopg (which cost more than the rest of a rebuild's write).

The big tables get line builders of their own: bytes formatting, escaping only where text is
free (ids, slugs, positions and ISO times never hold a tab or a backslash).
"""

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from itertools import islice
from typing import Any

import orjson
from psycopg import Connection, Copy, sql
from psycopg.types.json import Jsonb

from memledger_platform.events import Event
from memledger_platform.readmodel.projection import subject_of
from memledger_platform.readmodel.temporal import Attrs, Version
from memledger_projector.core.statements import rendered

VERSION_COLUMNS = ("tenant_id", "item_id", "valid", "sys_from", "sys_to", "attrs", "cause")
CHANGE_COLUMNS = ("position", "tenant_id", "space_id", "event_type", "event_id", "subject",
                  "actor", "reason", "recorded_at", "valid_from", "valid_to", "payload")
ITEM_COLUMNS = ("tenant_id", "space_id", "item_id", "kind", "status", "superseded_by",
                "session_id", "agent_id", "version", "created_position", "updated_position",
                "created_at", "updated_at", "reaffirmed_at", "retracted_position",
                "superseded_position", "archived_position")

_CHUNK = 2_000
_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})
_NULL = b"\\N"
_dumps = orjson.dumps


@contextmanager
def copy_into(conn: Connection[Any], s: str, table: str, columns: Sequence[str]
              ) -> Iterator[Copy]:
    """An open ``COPY s.table (columns) FROM STDIN``: write lines to it as they are made, so
    the server parses them while the caller goes on."""
    with conn.cursor() as cur, cur.copy(_copy_sql(s, table, tuple(columns))) as copy:
        yield copy


@rendered
def _copy_sql(s: str, table: str, columns: tuple[str, ...]) -> sql.Composed:
    return sql.SQL("COPY {}.{} ({}) FROM STDIN").format(
        sql.Identifier(s), sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, columns)))


def copy_lines(conn: Connection[Any], s: str, table: str, columns: Sequence[str],
               lines: Iterable[bytes]) -> None:
    """COPY ``lines``, sent in chunks as they come (none: no statement)."""
    chunks = _chunks(lines)
    first = next(chunks, None)
    if first is None:
        return
    with copy_into(conn, s, table, columns) as copy:
        copy.write(first)
        for chunk in chunks:
            copy.write(chunk)


def _chunks(lines: Iterable[bytes]) -> Iterator[bytes]:
    iterator = iter(lines)
    while chunk := b"".join(islice(iterator, _CHUNK)):
        yield chunk


def copy_rows(conn: Connection[Any], s: str, table: str, rows: Sequence[dict[str, Any]]
              ) -> None:
    """COPY dict rows (all with the same keys, the table's column names)."""
    if rows:
        columns = tuple(rows[0])
        copy_lines(conn, s, table, columns, [
            b"\t".join([value(r[c]) for c in columns]) + b"\n" for r in rows])


def value(v: Any) -> bytes:
    """One value in COPY text format (``\\N`` for null; backslash, tab, newline escaped)."""
    if v is None:
        return _NULL
    if isinstance(v, dict | list | Jsonb):
        return json(v.obj if isinstance(v, Jsonb) else v)
    if isinstance(v, datetime):
        return iso(v)
    if isinstance(v, bool):
        return b"t" if v else b"f"
    return str(v).translate(_ESCAPES).encode()


def json(v: Any) -> bytes:
    return orjson.dumps(v).replace(b"\\", b"\\\\")


def iso(v: datetime) -> bytes:
    """``v.isoformat()``, encoded. orjson writes the same 4x faster, except that it drops the
    seconds of an offset (which only a historical local mean time has). Most times of a
    rebuild are in ``UTC`` (``logshare.read_share``, ISO times read back): no offset to
    check, which halves the cost."""
    if v.tzinfo is UTC:
        return _dumps(v)[1:-1]
    offset = v.utcoffset()
    if offset is None or not offset.seconds % 60:
        return orjson.dumps(v)[1:-1]
    return v.isoformat().encode()


def _text(v: Any) -> bytes:
    return v.translate(_ESCAPES).encode() if type(v) is str else value(v)


def _time(v: datetime | None) -> bytes:
    return _NULL if v is None else iso(v)


def _int(v: int | None) -> bytes:
    return _NULL if v is None else b"%d" % v


def change_line(e: Event) -> bytes:
    """The change-log row of ``e`` (the line of ``projection._change_row(e)``)."""
    payload = e.payload if "vector" not in e.payload else {
        k: v for k, v in e.payload.items() if k != "vector"}
    reason = e.payload.get("reason")
    return b"%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n" % (
        e.position, e.tenant_id.encode(), e.space_id.encode(), e.event_type.encode(),
        e.event_id.encode(), _text(subject_of(e)), _text(e.actor),
        _text(reason), iso(e.recorded_at),
        _time(e.valid_from), _time(e.valid_to), json(payload))


def change_line_of(c: dict[str, Any]) -> bytes:
    """A change-log row (as ``Projection.changes`` holds them) as a line."""
    return b"%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n" % (
        c["position"], c["tenant_id"].encode(), c["space_id"].encode(),
        c["event_type"].encode(), c["event_id"].encode(), value(c["subject"]),
        value(c["actor"]), value(c["reason"]), iso(c["recorded_at"]),
        value(c["valid_from"]), value(c["valid_to"]), json(c["payload"]))


def version_line(tenant: str, item: str, valid: bytes, sys_from: int, sys_to: int | None,
                 attrs: bytes, cause: bytes) -> bytes:
    """An ``item_versions`` row; ``valid``, ``attrs`` and ``cause`` already encoded (rows of
    one item share them, so callers encode each once)."""
    return b"%s\t%s\t%s\t%d\t%s\t%s\t%s\n" % (
        tenant.encode(), item.encode(), valid, sys_from, _int(sys_to), attrs, cause)


def version_lines(rows: dict[tuple[str, str], list[Version]]) -> Iterator[bytes]:
    """Every row of every item (a bulk load: none written yet)."""
    # An item's rows share their attrs and cause tuples (a remainder keeps its row's attrs;
    # an event's rows share its cause) and the instants that bound them (a row cut in two
    # keeps its own and the cutting event's): each is encoded once, found by identity, which
    # is safe while the rows hold every object alive. One small cache per item: one for the
    # whole load grows so large that it costs more than the encoding it saves.
    for (tenant, item), versions in rows.items():
        key = b"%s\t%s\t" % (tenant.encode(), _text(item))
        encoded: dict[int, bytes] = {}
        for r in versions:
            attrs = encoded.get(id(r.attrs))
            if attrs is None:
                attrs = encoded[id(r.attrs)] = attrs_json(r.attrs)
            cause = encoded.get(id(r.cause))
            if cause is None:
                cause = encoded[id(r.cause)] = attrs_json(r.cause)
            start = encoded.get(id(r.valid_from))
            if start is None:
                start = encoded[id(r.valid_from)] = iso(r.valid_from)
            end = encoded.get(id(r.valid_to))
            if end is None:
                end = encoded[id(r.valid_to)] = b"" if r.valid_to is None else iso(r.valid_to)
            yield b"%s[%s,%s)\t%d\t%s\t%s\t%s\n" % (key, start, end, r.sys_from,
                                                      _int(r.sys_to), attrs, cause)


def valid_range(start: datetime, end: datetime | None) -> bytes:
    return b"[%s,%s)" % (iso(start), b"" if end is None else iso(end))


def attrs_json(attrs: Attrs) -> bytes:
    return json(dict(attrs))


def item_line(r: dict[str, Any]) -> bytes:
    return b"%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n" % (
        r["tenant_id"].encode(), r["space_id"].encode(), _text(r["item_id"]),
        _text(r["kind"]), _text(r["status"]), _text(r["superseded_by"]),
        _text(r["session_id"]), _text(r["agent_id"]), r["version"], r["created_position"],
        r["updated_position"], _time(r["created_at"]), _time(r["updated_at"]),
        _time(r["reaffirmed_at"]), _int(r["retracted_position"]),
        _int(r["superseded_position"]), _int(r["archived_position"]))
