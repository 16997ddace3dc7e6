"""Taking turns across processes with PostgreSQL advisory locks."""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from psycopg import Connection
from psycopg.pq import TransactionStatus


def creating(schema: str) -> str:
    """The lock name under which the objects of ``schema`` are created."""
    return f"memledger create {schema}"


@contextmanager
def exclusively(conn: Connection[Any], name: str) -> Iterator[None]:
    """Hold the session advisory lock ``name`` on ``conn`` while the block runs.

    Processes that start together create the same schema objects (``memledger up``'s ingest,
    query, relay and projector), and PostgreSQL's IF NOT EXISTS does not serialise concurrent
    creations: they failed on catalogue uniqueness ("pg_namespace_nspname_index") or deadlocked
    on ``pg_proc``. Under the lock they take turns; the later ones find everything there."""
    conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (name,))
    try:
        yield
    finally:
        # In a failed transaction the unlock cannot run; the lock then goes with the session.
        if conn.info.transaction_status != TransactionStatus.INERROR:
            conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (name,))
