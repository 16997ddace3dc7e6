"""PostgreSQL LISTEN/NOTIFY: a writer's commit wakes the processes that wait on it.

A notice sent in a transaction is delivered at its commit, and only then, so a listener that
hears it can read what the transaction wrote. Notices are a wake-up, never the record: one sent
while a listener reconnects is lost, so every listener keeps a polling fallback (and is told,
by a ``None`` notice, when it starts listening again, to look at what it may have missed).
"""

import asyncio
import hashlib
import logging
from collections.abc import Callable

import psycopg
from psycopg import Connection, sql

log = logging.getLogger(__name__)

_MAX_CHANNEL = 63
"""PostgreSQL's longest identifier (NAMEDATALEN - 1); a longer channel is refused."""
RECONNECT_SECONDS = 1.0


def channel(name: str) -> str:
    """``name`` as a channel PostgreSQL accepts: itself, or if too long a digest of it (two
    deployments in one database keep channels of their own)."""
    if len(name.encode()) <= _MAX_CHANNEL:
        return name
    return f"memledger_{hashlib.sha256(name.encode()).hexdigest()[:40]}"


def notify(conn: Connection[object], name: str, payload: str) -> None:
    """Send ``payload`` on ``name`` (delivered when the caller's transaction commits)."""
    conn.execute("SELECT pg_notify(%s, %s)", (channel(name), payload))


async def listen(dsn: str, name: str, on_notice: Callable[[str | None], None],
                 on_lost: Callable[[], None] | None = None) -> None:
    """Call ``on_notice(payload)`` for every notice on ``name``, and ``on_notice(None)`` each
    time listening (re)starts; ``on_lost()`` when the connection fails. Reconnects forever,
    until cancelled."""
    while True:
        try:
            async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
                await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel(name))))
                on_notice(None)  # whatever was sent while we were not listening
                async for notice in conn.notifies():
                    on_notice(notice.payload)
        except psycopg.Error as error:
            log.warning("listener on %s reconnecting (polling meanwhile): %s", name, error)
        if on_lost is not None:
            on_lost()
        await asyncio.sleep(RECONNECT_SECONDS)


async def listen_until(stop: asyncio.Event, dsn: str, name: str,
                       on_notice: Callable[[str | None], None],
                       on_lost: Callable[[], None]) -> None:
    """``listen`` until ``stop`` is set; then ``on_lost()``, as nothing more will be heard."""
    listening = asyncio.create_task(listen(dsn, name, on_notice, on_lost))
    try:
        await stop.wait()
    finally:
        listening.cancel()
        await asyncio.gather(listening, return_exceptions=True)
        on_lost()
