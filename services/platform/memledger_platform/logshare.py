"""Part of the event log, read straight from its PostgreSQL table: what each of a rebuild's
two processes reads. Apart from the event store package on purpose: without the store's
imports (eventsourcing, pydantic and the event schemas), the rebuild's fold worker starts in
about half the CPU time, and so folds its share sooner (ADR 0005)."""

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import psycopg
from psycopg.rows import tuple_row
from psycopg.sql import SQL, Identifier

Record = tuple[int, datetime, bytes]
"""An event as a rebuild reads it: (position, recorded_at, its stored JSON)."""


@dataclass(frozen=True)
class StreamShare:
    """Part of the log, split by stream so that a stream's events are all on one side: the
    events whose type starts with ``prefix`` and whose stream id's last byte, modulo
    ``modulus``, is below ``below``; or, with ``rest``, every other event."""

    prefix: str
    modulus: int
    below: int
    rest: bool = False

    def holds(self, stream_id: UUID, event_type: str) -> bool:
        inside = (event_type.startswith(self.prefix)
                  and stream_id.bytes[15] % self.modulus < self.below)
        return inside != self.rest

    def other(self) -> "StreamShare":
        """Every event this share does not hold."""
        return replace(self, rest=not self.rest)


@dataclass(frozen=True)
class Address:
    """Where a PostgreSQL event store's log is, for another process to read it."""

    conninfo: str
    schema: str
    table: str


def read_share(conn: psycopg.Connection[Any], schema: str, table: str, after: int,
               until: int, limit: int, share: StreamShare) -> list[Record]:
    """The events of ``share`` in the log ``schema.table`` (``conn``: to its database) after
    position ``after`` up to ``until``, ``limit`` at most, in position order (the server
    leaves the others out: two processes can each read their own share), as tuples: a
    rebuild needs no more, and reading only these columns takes about half the time. Times
    are in ``datetime.UTC``, whatever the session's time zone."""
    inside = SQL("(topic LIKE %s AND get_byte(uuid_send(originator_id), 15) %% %s < %s)")
    query = SQL("SELECT notification_id, recorded_at AT TIME ZONE 'UTC', state FROM {0}.{1} WHERE "
                "notification_id > %s AND notification_id <= %s AND {side}{inside} "
                "ORDER BY notification_id LIMIT %s").format(
        Identifier(schema), Identifier(table), inside=inside,
        side=SQL("NOT " if share.rest else ""))
    prefix = share.prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    with conn.cursor(binary=True, row_factory=tuple_row) as curs:
        curs.execute(query, (after, until, f"{prefix}%", share.modulus, share.below, limit))
        # Read as UTC wall time and tagged ``UTC`` here: a time in a ``zoneinfo`` zone (what
        # psycopg makes of a server zone named otherwise, e.g. Etc/UTC) is formatted about
        # ten times slower, and a rebuild formats each event's time once or twice.
        return [(position, at.replace(tzinfo=UTC), data)
                for position, at, data in curs.fetchall()]
