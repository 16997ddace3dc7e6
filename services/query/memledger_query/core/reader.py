"""Reading the live projection: pooled connections, the live schema, read-your-writes."""

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool

from memledger_platform import notices, partitions
from memledger_platform.eventstore import EventStore
from memledger_platform.eventstore.postgres import EVENTS_TABLE
from memledger_platform.readmodel import schema
from memledger_platform.readmodel.checkpoint import read_checkpoint

T = TypeVar("T")

_SCHEMA_TTL_SECONDS = 0.5
_WATCH_SECONDS = 0.002
_NOTICED_WATCH_SECONDS = 0.1
"""How often the checkpoint is read while notices are heard: only a lost one waits this long."""
_LAG_SECONDS = 0.1


class NotYetVisible(Exception):
    def __init__(self, wanted: int, reached: int) -> None:
        super().__init__(f"the read models reached position {reached}, not {wanted}, in time")
        self.wanted, self.reached = wanted, reached


class _Broken(psycopg.OperationalError):
    """The connection a read ran on turned out broken (the message is the driver's)."""


class Reader:
    """Runs plain read functions ``fn(conn, schema_name, *args)`` on the live projection."""

    def __init__(self, pool: ConnectionPool[Any], names: schema.Names) -> None:
        self._pool = pool
        self._names = names
        self._schema: tuple[float, str] | None = None
        self._known: dict[int | None, int] = {}
        """the checkpoint last read, per partition (``None``: the lowest of all)"""
        self._waiters: list[tuple[int | None, int, asyncio.Future[None]]] = []
        self._wake: asyncio.Event | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._lag: tuple[float, int, int] = (0.0, 0, 0)
        self._head = 0
        self._listening = False
        """``follow`` hears the projector's notices"""
        self._looked_at = -float("inf")

    @property
    def base_schema(self) -> str:
        """The schema of the event store and of what lives beside it (erasure receipts)."""
        return self._names.base

    def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(conn, live schema, *args)`` on a pooled connection. A connection found broken
        (PostgreSQL restarted since it was pooled) is dropped, the pool's idle ones are
        checked, and ``fn`` runs again once: reads can be repeated, and checking on failure
        spares every read the round trip of checking on borrow."""
        try:
            return self._run(fn, *args)
        except _Broken:
            self._pool.check()
        return self._run(fn, *args)

    def _run(self, fn: Callable[..., T], *args: Any) -> T:
        with self._pool.connection() as conn, partitions.checkpoint_of(self.partition()):
            try:
                s = self._live(conn)
                self._refresh_lag(conn, s)
                return fn(conn, s, *args)
            except psycopg.OperationalError as error:
                if conn.broken:
                    raise _Broken(str(error)) from error
                raise

    def lag(self) -> tuple[int, int]:
        """(projected position, positions committed but not yet projected), as of the last
        read (at most ``_LAG_SECONDS`` old)."""
        return self._lag[1], self._lag[2]

    def _refresh_lag(self, conn: Any, s: str) -> None:
        now = time.monotonic()
        if now - self._lag[0] < _LAG_SECONDS:
            return
        projected = (read_checkpoint(conn, s).position if self._names.partitions == 1
                     else self._through(conn, s, None))
        committed = self._committed(conn, s)
        self._lag = (now, projected, max(0, committed - projected))

    def _committed(self, conn: Any, s: str) -> int:
        row = conn.execute(sql.SQL("SELECT max(notification_id) FROM {}.{}").format(
            sql.Identifier(self._names.base), sql.Identifier(EVENTS_TABLE))).fetchone()
        committed = int(row[0] or 0) if row else 0
        self._head = max(self._head, committed)
        return committed

    def partition(self) -> int | None:
        """The partition the current request reads (its tenant's), if the events are
        partitioned: its checkpoint is the read's basis and what ``wait_for`` waits on."""
        return partitions.read_partition(self._names.partitions)

    def position(self, partition: int | None = None) -> int:
        """The position the read models have projected through: the checkpoint; with the
        events partitioned (ADR 0016), ``partition``'s (``None``: every partition's) as far
        as the log goes before its first event not projected yet, since a tenant's partition
        may have nothing after a position another partition reached."""
        if self._names.partitions == 1:
            return self.run(lambda conn, s: read_checkpoint(conn, s).position)
        return self.run(self._through, partition)

    def _through(self, conn: Any, s: str, partition: int | None) -> int:
        # The log's positions are gapless-safe: every event up to its highest is committed.
        row = conn.execute(sql.SQL(
            "SELECT min(greatest(c.position, coalesce((SELECT min(e.notification_id) - 1 "
            "FROM {events} e WHERE e.tenant_partition = c.tenant_partition AND "
            "e.notification_id > c.position), (SELECT max(notification_id) FROM {events}), 0)))"
            " FROM {s}.checkpoint c WHERE %s::int IS NULL OR c.tenant_partition = %s").format(
            events=sql.Identifier(self._names.base, EVENTS_TABLE), s=sql.Identifier(s)),
            (partition, partition)).fetchone()
        return 0 if row is None or row[0] is None else int(row[0])

    async def beyond_head(self, position: int) -> int | None:
        """``None`` if the event store has committed ``position``, else the last position it
        has committed. The store is asked only about a position past the last one seen there
        (positions only grow), so a read-your-writes read costs one lookup at most."""
        if position <= self._head:
            return None
        await asyncio.to_thread(self.run, self._committed)
        return None if position <= self._head else self._head

    async def wait_for(self, position: int | None, wait_ms: int) -> None:
        """Return once the projection has reached ``position``; ``NotYetVisible`` after
        ``wait_ms``. One watcher serves all waiters: released by the projector's notices
        while ``follow`` hears them, else polling the checkpoint every 2 ms while any wait,
        so waiting costs the database nothing per request."""
        partition = self.partition()
        if position is None or position <= self._known.get(partition, 0):
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((partition, position, future))
        self._start_watching()
        try:
            await asyncio.wait_for(asyncio.shield(future), wait_ms / 1000)
        except TimeoutError:
            # Done, so the watcher drops it: a waiter left behind kept it polling every 2 ms
            # for good (found by fuzzing: a min_position never reached).
            future.cancel()
            raise NotYetVisible(position, self._known.get(partition, 0)) from None

    async def follow(self, dsn: str, stop: asyncio.Event) -> None:
        """Hear the projector's notices (each batch's commit announces its checkpoint) until
        ``stop`` is set: a waiting read is then released by the notice of the batch that made
        its position visible, not by the next poll, and the checkpoint is polled only as the
        fallback for a lost notice."""
        await notices.listen_until(stop, dsn, self._names.projected, self._noticed, self._lost)

    def _noticed(self, notice: str | None) -> None:
        position = None if notice is None else schema.whole_log_position(notice)
        if notice is None:  # listening (again): what was announced meanwhile is unheard
            self._listening, self._looked_at = True, -float("inf")
        elif position is not None and self._names.partitions == 1:
            self._known[None] = max(self._known.get(None, 0), position)
            self._release()
            return
        if self._wake is not None:  # a partition's checkpoint: every reach is read again
            self._wake.set()

    def _lost(self) -> None:
        self._listening = False
        if self._wake is not None:
            self._wake.set()

    def _start_watching(self) -> None:
        if self._wake is None:
            self._wake = asyncio.Event()
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.create_task(self._watch(self._wake))
        self._wake.set()

    async def _watch(self, wake: asyncio.Event) -> None:
        while True:
            await wake.wait()
            wake.clear()
            while self._release():
                if self._must_look():
                    await self._look()
                if self._release():
                    await self._next_look(wake)

    def _must_look(self) -> bool:
        # Heard notices of the whole log's checkpoint release the waiters themselves.
        if not self._listening or self._names.partitions > 1:
            return True
        return time.monotonic() - self._looked_at >= _NOTICED_WATCH_SECONDS

    async def _look(self) -> None:
        self._looked_at = time.monotonic()
        for partition in {waiter[0] for waiter in self._waiters}:
            reached = await asyncio.to_thread(self.position, partition)
            # A notice heard meanwhile may be ahead of what this read found.
            self._known[partition] = max(self._known.get(partition, 0), reached)

    async def _next_look(self, wake: asyncio.Event) -> None:
        seconds = _NOTICED_WATCH_SECONDS if self._listening else _WATCH_SECONDS
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), seconds)
        wake.clear()

    def _release(self) -> bool:
        """Release the waits the known positions reach, drop those that ran out; whether any
        is left."""
        pending = []
        for partition, wanted, future in self._waiters:
            if future.done():
                continue
            if wanted <= self._known.get(partition, 0):
                future.set_result(None)
            else:
                pending.append((partition, wanted, future))
        self._waiters = pending
        return bool(pending)

    def health(self, store: EventStore) -> dict[str, Any]:
        projected, committed = self.position(), store.max_position()
        return {"status": "ok", "projected_position": projected,
                "committed_position": committed, "projection_lag": committed - projected}

    def _live(self, conn: Any) -> str:
        # The live schema changes only at a blue/green switch: look it up twice a second.
        now = time.monotonic()
        if self._schema is None or now - self._schema[0] > _SCHEMA_TTL_SECONDS:
            self._schema = (now, self._names.schema(schema.live_version(conn, self._names)))
        return self._schema[1]
