"""Where a consumer whose read model is not in PostgreSQL (the vector index) has got to in the
events stream, kept in PostgreSQL: on restart it resumes right after it, in order, instead of
letting JetStream redeliver what a killed process held only after the messages that follow.

Beside it, the log position the consumer has *written* up to (ahead of the durable one, which
waits for a flush): what the read model's readers name as their basis and wait on for
``min_position``. Every reader sees the same one, whichever process it runs in; its commit
announces it on ``Names.written`` (``"<durable> <position>"``), so a reader waiting for it
wakes at once rather than at its next poll.
"""

from typing import Any

from psycopg import sql
from psycopg_pool import ConnectionPool

from memledger_platform import notices
from memledger_platform.pg_locks import creating, exclusively
from memledger_platform.readmodel.schema import Names

_TABLE = """
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.memledger_consumer_positions (
    durable text PRIMARY KEY, stream_seq bigint NOT NULL);
ALTER TABLE {s}.memledger_consumer_positions
    ADD COLUMN IF NOT EXISTS written_position bigint NOT NULL DEFAULT 0;
"""


class ConsumerPositions:
    def __init__(self, pool: ConnectionPool[Any], schema: str = "public") -> None:
        self._pool = pool
        self._s = sql.Identifier(schema)
        self._channel = notices.channel(Names(schema).written)
        # services starting together create these at once: one at a time (autocommit pool)
        with pool.connection() as conn, exclusively(conn, creating(schema)):
            conn.execute(sql.SQL(_TABLE).format(s=self._s))

    def load(self, durable: str) -> int:
        """The last stream sequence written (0: none)."""
        return self._column("stream_seq", durable)

    def save(self, durable: str, stream_seq: int) -> None:
        with self._pool.connection() as conn:
            conn.execute(sql.SQL(
                "INSERT INTO {}.memledger_consumer_positions (durable, stream_seq) "
                "VALUES (%s, %s) ON CONFLICT (durable) DO UPDATE SET stream_seq = "
                "excluded.stream_seq").format(self._s), (durable, stream_seq))

    def written(self, durable: str) -> int:
        """The log position every event up to which the consumer has written (0: none)."""
        return self._column("written_position", durable)

    def written_through(self, durable: str, partition: int, events: str) -> int:
        """For a consumer of one partition's events (docs/adr/0016): the log position through
        which every event of that partition is written, i.e. up to the partition's first event
        after ``written``, since the log's other events are not its to write and a partition
        may have nothing after a position another partition reached. ``events``: the event
        store's table in this schema."""
        with self._pool.connection() as conn:
            row = conn.execute(sql.SQL(
                "SELECT greatest(w.p, coalesce((SELECT min(e.notification_id) - 1 FROM {s}.{e} e"
                " WHERE e.tenant_partition = %s AND e.notification_id > w.p), "
                "(SELECT max(notification_id) FROM {s}.{e}), 0)) FROM (SELECT coalesce(("
                "SELECT written_position FROM {s}.memledger_consumer_positions WHERE durable = "
                "%s), 0) AS p) w").format(s=self._s, e=sql.Identifier(events)),
                (partition, durable)).fetchone()
        return 0 if row is None else int(row[0])

    def record_written(self, durable: str, position: int) -> None:
        """Record that every event up to ``position`` is written, and announce the position
        recorded in the same statement (so at its commit); a lower position than the one
        recorded changes nothing (a restart derives again what it had written)."""
        with self._pool.connection() as conn:
            conn.execute(sql.SQL(
                "WITH w AS (INSERT INTO {s}.memledger_consumer_positions (durable, stream_seq, "
                "written_position) VALUES (%s, 0, %s) ON CONFLICT (durable) DO UPDATE SET "
                "written_position = greatest({s}.memledger_consumer_positions.written_position,"
                " excluded.written_position) RETURNING written_position) "
                "SELECT pg_notify(%s, %s::text || ' ' || written_position) FROM w"
            ).format(s=self._s),
                (durable, position, self._channel, durable))

    def restart_written(self, durable: str) -> None:
        """The read model starts again from nothing (its index was new or removed)."""
        with self._pool.connection() as conn:
            conn.execute(sql.SQL("UPDATE {}.memledger_consumer_positions SET written_position "
                                 "= 0 WHERE durable = %s").format(self._s), (durable,))

    def forget(self, durable: str) -> None:
        with self._pool.connection() as conn:
            conn.execute(sql.SQL("DELETE FROM {}.memledger_consumer_positions WHERE durable = %s"
                                 ).format(self._s), (durable,))

    def _column(self, column: str, durable: str) -> int:
        with self._pool.connection() as conn:
            row = conn.execute(sql.SQL("SELECT {} FROM {}.memledger_consumer_positions WHERE "
                                       "durable = %s").format(sql.Identifier(column), self._s),
                               (durable,)).fetchone()
        return 0 if row is None else int(row[0])


def written_notice(notice: str) -> tuple[str, int]:
    """(durable, position) of a notice ``record_written`` sent; ``ValueError`` if it is not
    one."""
    durable, _, position = notice.rpartition(" ")
    if not durable or not position.isdigit():
        raise ValueError(f"not a written-position notice: {notice!r}")
    return durable, int(position)
