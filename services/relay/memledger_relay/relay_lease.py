"""At most one relay publishes an events stream: the one holding a PostgreSQL advisory lock
named for the event store and the stream, on a connection it keeps open. Another relay waits
as a standby, saying which relay holds the lock, and takes over when that one's session ends.

The stream's Expected-Last-Sequence guard already keeps two publishers from ordering or
doubling an event; the lease keeps them from fighting over every batch."""

import asyncio
import contextlib
import logging
import os
import socket
from typing import Any

import psycopg

log = logging.getLogger(__name__)

_LOCK_CLASS = "memledger relay"
_HOLDER = """
SELECT a.application_name, a.client_addr::text, a.pid
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
  AND l.classid = (hashtext(%(cls)s)::bigint & 4294967295)::oid
  AND l.objid = (hashtext(%(name)s)::bigint & 4294967295)::oid
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
"""


def relay_name() -> str:
    """How this relay names itself to the others (its PostgreSQL application_name)."""
    return f"memledger-relay {socket.gethostname()} pid {os.getpid()}"[:63]


class RelayLease:
    """The lease on one stream of one event store (``schema``)."""

    def __init__(self, dsn: str, schema: str, stream: str, retry_seconds: float = 2.0) -> None:
        self._dsn = dsn
        self._name = f"{schema} {stream}"
        self._stream = stream
        self._retry = retry_seconds
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._told: str | None = None

    async def acquire(self, stop: asyncio.Event) -> bool:
        """Wait until this relay holds the lease (True) or ``stop`` is set (False)."""
        while not stop.is_set():
            with contextlib.suppress(psycopg.Error, OSError):
                if await self._try():
                    log.info("relay holds the lease on %s", self._stream)
                    self._told = None
                    return True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self._retry)
        return False

    async def held(self) -> bool:
        """Whether the lease is still this relay's (its session is alive)."""
        if self._conn is None or self._conn.closed:
            return False
        try:
            await self._conn.execute("SELECT 1")
        except (psycopg.Error, OSError):
            await self.release()
            return False
        return True

    async def release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error, OSError):
                await conn.close()

    async def _try(self) -> bool:
        if self._conn is None or self._conn.closed:
            self._conn = await psycopg.AsyncConnection.connect(
                self._dsn, autocommit=True, application_name=relay_name())
        row = await (await self._conn.execute(
            "SELECT pg_try_advisory_lock(hashtext(%s), hashtext(%s))",
            (_LOCK_CLASS, self._name))).fetchone()
        if row is not None and row[0]:
            return True
        await self._tell_holder()
        return False

    async def _tell_holder(self) -> None:
        assert self._conn is not None
        row = await (await self._conn.execute(
            _HOLDER, {"cls": _LOCK_CLASS, "name": self._name})).fetchone()
        holder = "another relay" if row is None else (
            f"{row[0] or 'another relay'} (PostgreSQL backend {row[2]}"
            f"{f' from {row[1]}' if row[1] else ''})")
        if holder != self._told:
            log.warning("another relay publishes %s: %s holds its lease; this relay stands "
                        "by and takes over if that one stops", self._stream, holder)
            self._told = holder
