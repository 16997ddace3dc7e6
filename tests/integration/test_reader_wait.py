"""A read-your-writes wait: released by the projector's notice of the commit that reaches its
position (the checkpoint polled only as the fallback), and one that runs out leaves nothing
polling behind it."""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from memledger_ingest.core.writer import GroupCommitWriter
from memledger_platform import notices
from memledger_platform.endpoints import Endpoints
from memledger_platform.readmodel import schema
from memledger_query.core.reader import NotYetVisible
from memledger_schemas import commands as c
from tests.integration.read_support import SPACE, CountingReader, ReadSide, write
from tests.support import eventually


async def test_a_wait_for_a_position_never_reached_stops_polling_once_it_times_out(
        engines: Endpoints, side: ReadSide) -> None:
    pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
        engines.postgres_dsn, min_size=1, max_size=2, kwargs={"autocommit": True}, open=True)
    try:
        reader = CountingReader(pool, side.names)
        with pytest.raises(NotYetVisible):
            await reader.wait_for(10**9, 50)
        async def dropped() -> None:
            assert reader.waiting == 0

        await eventually(dropped)
        polls = reader.polls

        # A window to show an absence: at one poll per 2 ms, a leftover waiter would poll ~150x.
        await asyncio.sleep(0.3)

        assert reader.polls - polls <= 1
    finally:
        pool.close()


async def test_a_projector_batch_announces_the_checkpoint_it_committed(
        engines: Endpoints, side: ReadSide, writer: GroupCommitWriter) -> None:
    heard: list[str | None] = []
    listening = asyncio.create_task(notices.listen(engines.postgres_dsn, side.names.projected,
                                                   heard.append))
    try:
        async def started() -> None:
            assert heard == [None]

        await eventually(started)
        await write(writer, c.CreateSpace(space_id=SPACE))
        asserted = await write(writer, c.AssertMemory(space_id=SPACE, kind="fact",
                                                      content="blue"))
        reached = side.project()

        async def announced() -> None:
            assert heard[1:] == [str(reached)]

        await eventually(announced)
        assert reached == asserted.position
    finally:
        listening.cancel()


async def test_a_heard_notice_releases_a_wait_the_checkpoint_has_not_reached(
        engines: Endpoints, side: ReadSide) -> None:
    # The checkpoint stays at 0: only the notice can tell the watcher about position 7.
    async with _following(engines, side) as reader:
        waiting = asyncio.create_task(reader.wait_for(7, 10_000))
        await eventually(_waits(reader))
        _notify(engines, side, "7")
        await waiting
        assert side.position() == 0


async def test_a_partitions_notice_wakes_the_watcher_to_read_but_releases_nothing_itself(
        engines: Endpoints, side: ReadSide) -> None:
    async with _following(engines, side) as reader:
        waiting = asyncio.create_task(reader.wait_for(7, 3_000))
        await eventually(_waits(reader))
        polls = reader.polls
        _notify(engines, side, schema.projected_notice(7, 0))

        async def read_again() -> None:
            assert reader.polls > polls

        await eventually(read_again)
        with pytest.raises(NotYetVisible):
            await waiting


async def test_a_wait_heard_by_notices_reads_the_checkpoint_only_as_a_fallback(
        engines: Endpoints, side: ReadSide) -> None:
    async with _following(engines, side) as reader:
        polls = reader.polls
        with pytest.raises(NotYetVisible):
            await reader.wait_for(10**9, 300)
        # Polling every 2 ms, as without notices, would have read it ~150 times.
        assert reader.polls - polls <= 5


async def test_a_reader_that_stops_hearing_notices_polls_again(
        engines: Endpoints, side: ReadSide) -> None:
    pool = _pool(engines)
    stop = asyncio.Event()
    try:
        reader = CountingReader(pool, side.names)
        following = asyncio.create_task(reader.follow(engines.postgres_dsn, stop))
        await eventually(_listening(reader))
        stop.set()
        await following
        polls = reader.polls
        with pytest.raises(NotYetVisible):
            await reader.wait_for(10**9, 300)
        assert reader.polls - polls > 5
    finally:
        pool.close()


def _pool(engines: Endpoints) -> ConnectionPool[psycopg.Connection[Any]]:
    return ConnectionPool(engines.postgres_dsn, min_size=1, max_size=2,
                          kwargs={"autocommit": True}, open=True)


@asynccontextmanager
async def _following(engines: Endpoints, side: ReadSide) -> AsyncIterator[CountingReader]:
    """A reader whose watcher is listening for the projector's notices, stopped on exit."""
    pool = _pool(engines)
    stop = asyncio.Event()
    try:
        reader = CountingReader(pool, side.names)
        following = asyncio.create_task(reader.follow(engines.postgres_dsn, stop))
        try:
            await eventually(_listening(reader))
            yield reader
        finally:
            stop.set()
            await following
    finally:
        pool.close()


def _notify(engines: Endpoints, side: ReadSide, payload: str) -> None:
    with psycopg.connect(engines.postgres_dsn, autocommit=True) as conn:
        notices.notify(conn, side.names.projected, payload)


def _listening(reader: CountingReader) -> Callable[[], Awaitable[None]]:
    async def check() -> None:
        assert reader.listening

    return check


def _waits(reader: CountingReader) -> Callable[[], Awaitable[None]]:
    async def check() -> None:
        assert reader.waiting == 1

    return check
