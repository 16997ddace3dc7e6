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


def read_checkpoint(conn: Connection[Any], schema_name: str, *, lock: bool = False,
                    partition: int | None = None) -> Checkpoint:
    """The checkpoint of ``partition``'s events; ``None``: the one the read models have
    reached in every partition (the lowest; with one partition, its only row)."""
    which = sql.SQL(" ORDER BY position LIMIT 1" if partition is None
                    else " WHERE tenant_partition = %s")
    query = sql.SQL("SELECT position, stream_seq, recorded_at FROM {}.checkpoint").format(
        sql.Identifier(schema_name)) + which + sql.SQL(" FOR UPDATE" if lock else "")
    row = conn.execute(query, () if partition is None else (partition,)).fetchone()
    if row is None:
        raise LookupError(f"no checkpoint for partition {partition} in {schema_name}: start "
                          "the projector with the same MEMLEDGER_EVENT_PARTITIONS")
    return Checkpoint(row[0], row[1], row[2])
