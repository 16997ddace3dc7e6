"""A read model's checkpoint: the log position (and JetStream sequence) its projection has
reached, kept in the same transaction as its rows. The projector writes it; query waits on it
for read-your-writes and reports it as the projection's position."""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import Connection, sql


@dataclass(frozen=True)
class Checkpoint:
    position: int
    stream_seq: int
    recorded_at: datetime | None


def read_checkpoint(conn: Connection[Any], schema_name: str, *, lock: bool = False
                    ) -> Checkpoint:
    query = "SELECT position, stream_seq, recorded_at FROM {}.checkpoint"
    row = conn.execute(sql.SQL(query + (" FOR UPDATE" if lock else "")).format(
        sql.Identifier(schema_name))).fetchone()
    assert row is not None
    return Checkpoint(row[0], row[1], row[2])
