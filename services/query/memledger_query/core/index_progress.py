"""How far the vector index has got, as every query process sees it: the log position the vector
projector (the vectors service) has written up to, which it records in PostgreSQL after every
batch. A search names it as its basis and waits on it for ``min_position``, so two query
replicas answer alike whichever one is asked."""

import asyncio
import time
from collections.abc import Callable
from typing import Protocol

from memledger_platform.partitions import read_partition

REFRESH_SECONDS = 0.05
"""How old the position a search names may be (it is read again after that)."""
POLL_SECONDS = 0.005
"""How often the position is read while a request waits for one it has not reached."""


class Progress(Protocol):
    """How far the vector index has got: every event up to ``reached()`` is in it."""

    async def reached(self) -> int: ...

    async def wait_for(self, position: int, seconds: float) -> bool:
        """Whether the index reaches ``position`` within ``seconds``."""
        ...


class IndexProgress:
    """``Progress`` read with ``read`` (a blocking lookup, run in a thread): at most every
    ``REFRESH_SECONDS`` for a search, every ``POLL_SECONDS`` while requests wait. Concurrent
    requests share one lookup, so waiting costs the database one query per poll, not one per
    request. The position never goes back."""

    def __init__(self, read: Callable[[], int]) -> None:
        self._read = read
        self._known = 0
        self._read_at = float("-inf")
        self._reading: asyncio.Task[int] | None = None

    async def reached(self) -> int:
        if time.monotonic() - self._read_at < REFRESH_SECONDS:
            return self._known
        return await self._fresh()

    async def wait_for(self, position: int, seconds: float) -> bool:
        """Looks once before the deadline counts: no time to wait still asks "is it there now?"."""
        deadline = time.monotonic() + seconds
        while self._known < position:
            await self._fresh()
            if self._known >= position:
                break
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(POLL_SECONDS)
        return True

    async def _fresh(self) -> int:
        """The position read now, or by the lookup already under way."""
        if self._reading is None or self._reading.done():
            self._reading = asyncio.ensure_future(self._lookup())
        return await asyncio.shield(self._reading)

    async def _lookup(self) -> int:
        started = time.monotonic()
        self._known = max(self._known, await asyncio.to_thread(self._read))
        self._read_at = started
        return self._known


class PartitionProgress:
    """``Progress`` of an index fed from partitioned events (docs/adr/0016): one vector
    projector per partition records how far it has written, and a request names (and waits on)
    its tenant's partition's. Without a tenant: the least of them, never ahead of any."""

    def __init__(self, partitions: list[IndexProgress]) -> None:
        self._partitions = partitions

    def _mine(self) -> IndexProgress | None:
        partition = read_partition(len(self._partitions))
        return None if partition is None else self._partitions[partition]

    async def reached(self) -> int:
        mine = self._mine()
        if mine is not None:
            return await mine.reached()
        return min([await progress.reached() for progress in self._partitions])

    async def wait_for(self, position: int, seconds: float) -> bool:
        mine = self._mine()
        if mine is not None:
            return await mine.wait_for(position, seconds)
        waits = [progress.wait_for(position, seconds) for progress in self._partitions]
        return all(await asyncio.gather(*waits))
