"""How far the vector index has got, as every query process sees it: the log position the vector
projector (the vectors service) has written up to, which it records in PostgreSQL after every
batch. A search names it as its basis and waits on it for ``min_position``, so two query
replicas answer alike whichever one is asked.

The record's commit also announces it (``ConsumerPositions.record_written``): while
``WrittenNotices.follow`` hears those notices, a waiting search is woken by the commit that
reaches it, and the position is read only as the safety net for a lost notice."""

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from typing import Protocol

from memledger_platform import notices
from memledger_platform.consumer_positions import written_notice
from memledger_platform.partitions import read_partition

REFRESH_SECONDS = 0.05
"""How old the position a search names may be before it is read again: in the background,
the search going on with the one known (up to ``STALE_SECONDS``)."""
STALE_SECONDS = 0.5
"""How old the known position may be and still be named without waiting for the lookup (the
first search after a quiet spell waits for it): a search at a steady rate never waits on the
database for its basis (a thread hop and a round trip, every few searches)."""
POLL_SECONDS = 0.005
"""How often the position is read while a request waits for one it has not reached, while no
notices are heard."""
NOTICED_POLL_SECONDS = 0.1
"""How often it is read while a request waits and notices are heard: only a lost one waits
this long."""


class Progress(Protocol):
    """How far the vector index has got: every event up to ``reached()`` is in it."""

    async def reached(self) -> int: ...

    async def wait_for(self, position: int, seconds: float) -> bool:
        """Whether the index reaches ``position`` within ``seconds``."""
        ...


class IndexProgress:
    """``Progress`` read with ``read`` (a blocking lookup, run in a thread): at most every
    ``REFRESH_SECONDS`` for a search; while requests wait, every ``POLL_SECONDS``, or while
    notices are heard every ``NOTICED_POLL_SECONDS`` (a notice wakes them at once). Concurrent
    requests share one lookup, so waiting costs the database one query per poll, not one per
    request. The position never goes back.

    ``exact``: a notice's position is the one ``read`` would return (the whole log's); else
    (a partition's, which ``read`` extends through the log) a notice only wakes the waiters
    to read."""

    def __init__(self, read: Callable[[], int], *, exact: bool = True) -> None:
        self._read = read
        self._exact = exact
        self._known = 0
        self._read_at = float("-inf")
        self._reading: asyncio.Task[int] | None = None
        self._listening = False
        self._unread_notice = False
        """a notice arrived whose reach only a read tells (not ``exact``)"""
        self._pulse: asyncio.Future[None] | None = None
        """what the waiters sleep on: done (and replaced) by the next notice"""

    @property
    def listening(self) -> bool:
        """Notices are heard (``heard(None)`` came, and no ``lost()`` since)."""
        return self._listening

    async def reached(self) -> int:
        age = time.monotonic() - self._read_at
        if age >= STALE_SECONDS:
            return await self._fresh()
        if age >= REFRESH_SECONDS:
            self._lookup_soon()
        return self._known

    async def wait_for(self, position: int, seconds: float) -> bool:
        """Looks once before the deadline counts unless notices keep the position known: no
        time to wait still asks "is it there now?"."""
        deadline = time.monotonic() + seconds
        while self._known < position:
            if self._must_look():
                await self._fresh()
                if self._known >= position:
                    break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            await self._pause(min(remaining, NOTICED_POLL_SECONDS if self._listening
                                  else POLL_SECONDS))
        return True

    def heard(self, position: int | None) -> None:
        """A notice: the recorded position's commit announced ``position``; ``None``:
        listening (again), so what was announced meanwhile is unheard and is read."""
        if position is None:
            self._listening, self._read_at = True, float("-inf")
        elif position > self._known:
            self._known = position
            if self._exact:  # as fresh as a read now: a search need not look
                self._read_at = time.monotonic()
            else:
                self._unread_notice = True
        self._wake()

    def lost(self) -> None:
        """Notices are no longer heard: the waiters poll again."""
        self._listening = False
        self._wake()

    def _must_look(self) -> bool:
        if not self._listening or self._unread_notice:
            return True
        return time.monotonic() - self._read_at >= NOTICED_POLL_SECONDS

    async def _pause(self, seconds: float) -> None:
        """Until the next notice, or ``seconds``."""
        if self._pulse is None or self._pulse.done():
            self._pulse = asyncio.get_running_loop().create_future()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._pulse), seconds)

    def _wake(self) -> None:
        if self._pulse is not None and not self._pulse.done():
            self._pulse.set_result(None)

    async def _fresh(self) -> int:
        """The position read now, or by the lookup already under way."""
        return await asyncio.shield(self._lookup_soon())

    def _lookup_soon(self) -> "asyncio.Task[int]":
        """The lookup under way, started if none is. One nobody awaits may fail unseen: the
        position then ages until a search waits for a lookup of its own, which raises."""
        if self._reading is None or self._reading.done():
            self._unread_notice = False  # this lookup starts after it: it reads its reach
            self._reading = asyncio.ensure_future(self._lookup())
            self._reading.add_done_callback(_seen)
        return self._reading

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


class WrittenNotices:
    """Hears the vector projectors' notices (``ConsumerPositions.record_written``) for the
    ``IndexProgress`` of each durable name it is given."""

    def __init__(self, by_durable: Mapping[str, IndexProgress]) -> None:
        self._by_durable = by_durable

    async def follow(self, dsn: str, channel: str, stop: asyncio.Event) -> None:
        """Listen on ``channel`` until ``stop`` is set."""
        await notices.listen_until(stop, dsn, channel, self.noticed, self.lost)

    def noticed(self, notice: str | None) -> None:
        if notice is None:
            for each in self._by_durable.values():
                each.heard(None)
            return
        try:
            durable, position = written_notice(notice)
        except ValueError:  # not one of ours: the channel is open to any client
            return
        progress = self._by_durable.get(durable)
        if progress is not None:  # another model's index: not what these searches wait on
            progress.heard(position)

    def lost(self) -> None:
        for each in self._by_durable.values():
            each.lost()


def _seen(task: "asyncio.Task[int]") -> None:
    if not task.cancelled():
        task.exception()  # retrieved: a background lookup's failure is not logged as lost
