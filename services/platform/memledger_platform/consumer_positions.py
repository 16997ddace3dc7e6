"""Where a consumer whose read model is not in PostgreSQL (the vector index) has got to in the
events stream, kept in PostgreSQL: on restart it resumes right after it, in order, instead of
letting JetStream redeliver what a killed process held only after the messages that follow."""

from typing import Any

from psycopg import sql
from psycopg_pool import ConnectionPool

from memledger_platform.pg_locks import creating, exclusively

_TABLE = """
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.memledger_consumer_positions (
    durable text PRIMARY KEY, stream_seq bigint NOT NULL);
"""


class ConsumerPositions:
    def __init__(self, pool: ConnectionPool[Any], schema: str = "public") -> None:
        self._pool = pool
        self._s = sql.Identifier(schema)
        # services starting together create these at once: one at a time (autocommit pool)
        with pool.connection() as conn, exclusively(conn, creating(schema)):
            conn.execute(sql.SQL(_TABLE).format(s=self._s))

    def load(self, durable: str) -> int:
        """The last stream sequence written (0: none)."""
        with self._pool.connection() as conn:
            row = conn.execute(sql.SQL("SELECT stream_seq FROM {}.memledger_consumer_positions "
                                       "WHERE durable = %s").format(self._s),
                               (durable,)).fetchone()
        return 0 if row is None else int(row[0])

    def save(self, durable: str, stream_seq: int) -> None:
        with self._pool.connection() as conn:
            conn.execute(sql.SQL(
                "INSERT INTO {}.memledger_consumer_positions VALUES (%s, %s) ON CONFLICT "
                "(durable) DO UPDATE SET stream_seq = excluded.stream_seq").format(self._s),
                (durable, stream_seq))

    def forget(self, durable: str) -> None:
        with self._pool.connection() as conn:
            conn.execute(sql.SQL("DELETE FROM {}.memledger_consumer_positions WHERE durable = %s"
                                 ).format(self._s), (durable,))
