"""A read-your-writes wait that runs out leaves nothing polling behind it."""

import asyncio
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from memledger_platform.endpoints import Endpoints
from memledger_query.core.reader import NotYetVisible
from tests.integration.read_support import CountingReader, ReadSide


async def test_a_wait_for_a_position_never_reached_stops_polling_once_it_times_out(
        engines: Endpoints, side: ReadSide) -> None:
    pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
        engines.postgres_dsn, min_size=1, max_size=2, kwargs={"autocommit": True}, open=True)
    try:
        reader = CountingReader(pool, side.names)
        with pytest.raises(NotYetVisible):
            await reader.wait_for(10**9, 50)
        await asyncio.sleep(0.05)  # let the watcher see the timed-out waiter
        polls = reader.polls

        await asyncio.sleep(0.3)  # at one poll per 2 ms, a leftover waiter would poll ~150x

        assert reader.polls - polls <= 1
    finally:
        pool.close()
