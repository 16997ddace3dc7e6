"""Reading the live projection: pooled connections, the live schema, read-your-writes."""

import asyncio
import time
from collections.abc import Callable
from typing import Any, TypeVar

from psycopg_pool import ConnectionPool

from memledger_platform.eventstore import EventStore
from memledger_projector import schema
from memledger_projector.store import read_checkpoint

T = TypeVar("T")

_SCHEMA_TTL_SECONDS = 0.5


class NotYetVisible(Exception):
    def __init__(self, wanted: int, reached: int) -> None:
        super().__init__(f"the read models reached position {reached}, not {wanted}, in time")
        self.wanted, self.reached = wanted, reached


class Reader:
    """Runs plain read functions ``fn(conn, schema_name, *args)`` on the live projection."""

    def __init__(self, pool: ConnectionPool[Any], names: schema.Names) -> None:
        self._pool = pool
        self._names = names
        self._schema: tuple[float, str] | None = None

    def run(self, fn: Callable[..., T], *args: Any) -> T:
        with self._pool.connection() as conn:
            return fn(conn, self._live(conn), *args)

    def position(self) -> int:
        return self.run(lambda conn, s: read_checkpoint(conn, s).position)

    async def wait_for(self, position: int | None, wait_ms: int) -> None:
        """Return once the projection has reached ``position``; ``NotYetVisible`` after
        ``wait_ms``."""
        if position is None:
            return
        deadline = time.monotonic() + wait_ms / 1000
        while (reached := await asyncio.to_thread(self.position)) < position:
            if time.monotonic() >= deadline:
                raise NotYetVisible(position, reached)
            await asyncio.sleep(0.005)

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
