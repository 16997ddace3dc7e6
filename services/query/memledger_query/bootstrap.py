"""The composition root of the query service."""

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import psycopg
from fastapi import FastAPI
from psycopg_pool import ConnectionPool

from memledger_platform import http_server
from memledger_platform.eventstore.postgres import PostgresEventStore, datastore_from_dsn
from memledger_platform.settings import Settings
from memledger_projector import schema
from memledger_query.http import create_app
from memledger_query.reader import Reader

QUERY_PORT = 8421


@dataclass
class QueryService:
    app: FastAPI
    pool: ConnectionPool[psycopg.Connection[object]]
    store: PostgresEventStore

    def close(self) -> None:
        self.pool.close()
        self.store.close()


def build(settings: Settings, dsn: str) -> QueryService:
    """The query app over ``dsn`` (its pool opens here; ``close`` it)."""
    names = schema.Names(settings.postgres_schema)
    with psycopg.connect(dsn, autocommit=True) as conn:
        schema.ensure_pointer(conn, names)
    pool: ConnectionPool[psycopg.Connection[object]] = ConnectionPool(
        dsn, min_size=2, max_size=settings.postgres_pool_size, open=True,
        kwargs={"autocommit": True})
    store = PostgresEventStore(datastore_from_dsn(dsn, schema=settings.postgres_schema,
                                                  pool_size=2))
    app = create_app(Reader(pool, names), store, settings.tenant_fallback)
    return QueryService(app, pool, store)


async def serve(settings: Settings, dsn: str, stop: asyncio.Event,
                on_ready: Callable[[str], None] | None = None) -> None:
    """The query service on its own port (distributed mode)."""
    service = await asyncio.to_thread(build, settings, dsn)
    sock = http_server.bind(settings.http_host, settings.http_port, fallback=QUERY_PORT,
                            setting="MEMLEDGER_HTTP_PORT")
    if on_ready is not None:
        on_ready(http_server.address(sock))
    try:
        await http_server.serve(service.app, sock, stop)
    finally:
        await asyncio.to_thread(service.close)


async def run(settings: Settings) -> None:
    from memledger_platform.lifecycle import run_until_signalled

    if not settings.postgres_dsn:
        raise ValueError("set MEMLEDGER_POSTGRES_DSN")
    dsn = settings.postgres_dsn
    await run_until_signalled(lambda stop: serve(settings, dsn, stop, print))
