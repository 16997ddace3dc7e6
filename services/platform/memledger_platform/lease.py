"""At most one process of a role works on a thing (the relay on an events stream, the projector
on an event store's read models, the vectors service on a model's index): the one holding a
PostgreSQL advisory lock named for the role and the thing, on a connection it keeps open.
Another waits as a standby, saying which process holds the lock, and takes over when that
one's session ends.

Two projectors on one stream would each delete and remake the other's consumer from its own
checkpoint, and two vector projectors would split the events between them; the lease makes the
second one harmless. Two relays would fight over every batch (the stream's
Expected-Last-Sequence guard already keeps them from ordering or doubling an event)."""

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

log = logging.getLogger(__name__)

Work = Callable[[asyncio.Event], Awaitable[None]]

_HOLDER = """
SELECT a.application_name, a.client_addr::text, a.pid
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
  AND l.classid = (hashtext(%(cls)s)::bigint & 4294967295)::oid
  AND l.objid = (hashtext(%(name)s)::bigint & 4294967295)::oid
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
"""
CHECK_SECONDS = 1.0
"""How often a holder checks that its lease's session is alive."""


def holder_name(role: str) -> str:
    """How a process of ``role`` names itself to the others (its PostgreSQL application_name)."""
    return f"memledger-{role} {socket.gethostname()} pid {os.getpid()}"[:63]


class Lease:
    """The lease of ``role`` on ``name`` (e.g. the event store's schema and its stream)."""

    def __init__(self, dsn: str, role: str, name: str, retry_seconds: float = 2.0) -> None:
        self._dsn = dsn
        self.role = role
        self._class = f"memledger {role}"
        self.name = name
        self._retry = retry_seconds
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._told: str | None = None

    async def acquire(self, stop: asyncio.Event) -> bool:
        """Wait until this process holds the lease (True) or ``stop`` is set (False)."""
        while not stop.is_set():
            with contextlib.suppress(psycopg.Error, OSError):
                if await self._try():
                    log.info("%s holds the lease on %s", self.role, self.name)
                    self._told = None
                    return True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self._retry)
        return False

    async def held(self) -> bool:
        """Whether the lease is still this process's (its session is alive)."""
        if self._conn is None or self._conn.closed:
            return False
        try:
            await self._conn.execute("SELECT 1")
        except (psycopg.Error, OSError):
            await self.release()
            return False
        return True

    async def while_held(self, stop: asyncio.Event) -> asyncio.Event:
        """An event set when ``stop`` is, or when the lease is lost (checked every second);
        the watching task ends with it."""
        turn_over = asyncio.Event()

        async def watch() -> None:
            while not stop.is_set() and await self.held():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), CHECK_SECONDS)
            turn_over.set()

        _watchers.add(task := asyncio.create_task(watch()))
        task.add_done_callback(_watchers.discard)
        return turn_over

    async def release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error, OSError):
                await conn.close()

    async def _try(self) -> bool:
        if self._conn is None or self._conn.closed:
            self._conn = await psycopg.AsyncConnection.connect(
                self._dsn, autocommit=True, application_name=holder_name(self.role))
        row = await (await self._conn.execute(
            "SELECT pg_try_advisory_lock(hashtext(%s), hashtext(%s))",
            (self._class, self.name))).fetchone()
        if row is not None and row[0]:
            return True
        await self._tell_holder()
        return False

    async def _tell_holder(self) -> None:
        assert self._conn is not None
        row = await (await self._conn.execute(
            _HOLDER, {"cls": self._class, "name": self.name})).fetchone()
        other = f"another {self.role}"
        holder = other if row is None else (
            f"{row[0] or other} (PostgreSQL backend {row[2]}"
            f"{f' from {row[1]}' if row[1] else ''})")
        if holder != self._told:
            log.warning("another %s works on %s: %s holds its lease; this %s stands by and "
                        "takes over if that one stops", self.role, self.name, holder,
                        self.role)
            self._told = holder


_watchers: set["asyncio.Task[None]"] = set()


async def while_leased(lease: Lease, stop: asyncio.Event, work: Work) -> None:
    """Run ``work`` each time this process holds ``lease``, until ``stop`` is set; ``work``
    is given an event set when it must end (``stop``, or the lease lost)."""
    try:
        while await lease.acquire(stop):
            await work(await lease.while_held(stop))
            if stop.is_set():
                return
            log.warning("%s lost its lease on %s (its PostgreSQL session ended); taking it "
                        "again", lease.role, lease.name)
    finally:
        await lease.release()
