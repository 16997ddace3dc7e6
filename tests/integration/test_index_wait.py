"""A search waiting for the vector index to reach its ``min_position``: woken by the commit of
the vectors service's record of the position it has written (``record_written`` announces it),
the record read only as the safety net for a lost notice."""

import asyncio
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from memledger_platform import notices
from memledger_platform.consumer_positions import ConsumerPositions, written_notice
from memledger_platform.endpoints import Endpoints
from memledger_platform.readmodel.schema import Names
from memledger_query.core import index_progress
from memledger_query.core.index_progress import IndexProgress, WrittenNotices
from tests.support import eventually

DURABLE = "vectors-test"


@pytest.fixture
def positions(engines: Endpoints, pg_schema: str) -> Iterator[ConsumerPositions]:
    pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
        engines.postgres_dsn, min_size=1, max_size=2, kwargs={"autocommit": True}, open=True)
    try:
        yield ConsumerPositions(pool, pg_schema)
    finally:
        pool.close()


async def test_recording_a_written_position_announces_the_position_recorded(
        engines: Endpoints, pg_schema: str, positions: ConsumerPositions) -> None:
    heard: list[str | None] = []
    listening = asyncio.create_task(notices.listen(engines.postgres_dsn,
                                                   Names(pg_schema).written, heard.append))
    try:
        await eventually(lambda: _equal(heard, [None]))
        await asyncio.to_thread(positions.record_written, DURABLE, 12)
        await asyncio.to_thread(positions.record_written, DURABLE, 5)  # a restart's replay
        await eventually(lambda: _equal([written_notice(n) for n in heard[1:] if n],
                                        [(DURABLE, 12), (DURABLE, 12)]))
    finally:
        listening.cancel()


async def test_a_search_waiting_on_the_index_is_woken_by_the_record_of_its_position(
        engines: Endpoints, pg_schema: str, positions: ConsumerPositions,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_progress, "NOTICED_POLL_SECONDS", 3600.0)  # no poll to save it
    reads = 0

    def read() -> int:
        nonlocal reads
        reads += 1
        return positions.written(DURABLE)

    progress = IndexProgress(read)
    stop = asyncio.Event()
    following = asyncio.create_task(WrittenNotices({DURABLE: progress}).follow(
        engines.postgres_dsn, Names(pg_schema).written, stop))
    try:
        await eventually(lambda: _listened(progress))
        waiting = asyncio.create_task(progress.wait_for(7, 30.0))
        await eventually(lambda: _equal(reads, 1))  # its first look, then it sleeps
        await asyncio.to_thread(positions.record_written, DURABLE, 7)
        assert await waiting
        assert reads == 1
    finally:
        stop.set()
        await following


async def _listened(progress: IndexProgress) -> None:
    assert progress.listening


async def _equal(found: object, wanted: object) -> None:
    assert found == wanted
