"""Pooled connections that PostgreSQL dropped (a restart, an administrator's terminate) cost
the read that finds them a second try, never an error; other errors are not retried."""

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from memledger_platform.endpoints import Endpoints
from memledger_platform.readmodel.checkpoint import read_checkpoint
from memledger_query.core.reader import Reader
from tests.integration.read_support import ReadSide


@pytest.fixture
def pool(engines: Endpoints) -> Iterator[ConnectionPool[psycopg.Connection[Any]]]:
    with ConnectionPool(engines.postgres_dsn, min_size=3, max_size=3, open=True,
                        kwargs={"autocommit": True,
                                "application_name": "reader-under-test"}) as opened:
        opened.wait()
        yield opened


def _terminate_pooled(admin: psycopg.Connection[Any]) -> int:
    row = admin.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                        "WHERE application_name = 'reader-under-test'").fetchone()
    assert row is not None
    return int(row[0])


def test_a_read_on_connections_the_server_dropped_is_answered(
        pool: ConnectionPool[psycopg.Connection[Any]], side: ReadSide) -> None:
    reader = Reader(pool, side.names)
    before = reader.run(lambda conn, s: read_checkpoint(conn, s).position)
    assert _terminate_pooled(side.conn) == 3

    assert reader.run(lambda conn, s: read_checkpoint(conn, s).position) == before
    # The other dropped connections were replaced too: the next reads find live ones.
    calls = []
    for _ in range(3):
        reader.run(lambda conn, s: calls.append(conn.execute("SELECT 1").fetchone()))
    assert calls == [(1,)] * 3


def test_an_error_that_is_not_a_dropped_connection_is_raised_after_one_try(
        pool: ConnectionPool[psycopg.Connection[Any]], side: ReadSide) -> None:
    reader = Reader(pool, side.names)
    tries = []

    def too_slow(conn: psycopg.Connection[Any], _: str) -> None:
        tries.append(1)
        conn.execute("SET statement_timeout = 10")
        try:
            conn.execute("SELECT pg_sleep(1)")
        finally:
            conn.execute("RESET statement_timeout")

    with pytest.raises(psycopg.errors.QueryCanceled):
        reader.run(too_slow)
    assert tries == [1]
