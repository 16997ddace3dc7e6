"""A read-your-writes wait that runs out leaves nothing polling behind it."""

import asyncio
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from memledger_platform.endpoints import Endpoints
from memledger_query.core.reader import NotYetVisible
from tests.integration.read_support import CountingReader, ReadSide
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
