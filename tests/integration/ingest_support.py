"""Helpers for integration tests that drive ingest's writer against real engines."""

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from uuid import UUID

from memledger_ingest.core.writer import GroupCommitWriter
from memledger_platform.eventstore.postgres import PostgresEventStore, datastore_from_dsn
from memledger_schemas.commands import AppendMessage, CreateSpace, StartSession

TENANT = "acme"
SPACE = "main"


@contextmanager
def store_on(dsn: str, schema: str, pool_size: int = 4) -> Iterator[PostgresEventStore]:
    """Another store (own connection pool) over an existing schema, as another process has."""
    store = PostgresEventStore(datastore_from_dsn(dsn, schema=schema, pool_size=pool_size))
    try:
        yield store
    finally:
        store.close()


@asynccontextmanager
async def running(writer: GroupCommitWriter) -> AsyncIterator[GroupCommitWriter]:
    writer.start()
    try:
        yield writer
    finally:
        writer.stop()


@asynccontextmanager
async def two_writers(dsn: str, schema: str, store: PostgresEventStore
                      ) -> AsyncIterator[tuple[GroupCommitWriter, GroupCommitWriter]]:
    """Two running writers on the same schema, each with its own pool (two ingest processes):
    the first on ``store``, the second on a store of its own."""
    with store_on(dsn, schema) as second_store:
        first, second = GroupCommitWriter(store), GroupCommitWriter(second_store)
        async with running(first), running(second):
            yield first, second


async def open_session(writer: GroupCommitWriter, tenant: str = TENANT, space: str = SPACE
                       ) -> UUID:
    """Create ``space`` and start a session in it; return the session id."""
    await writer.submit(tenant, [CreateSpace(space_id=space)])
    started = await writer.submit(tenant, [StartSession(space_id=space)])
    return UUID(started[0].ids["session_id"])


def message(session: UUID, text: str, *, space: str = SPACE,
            expected_version: int | None = None) -> AppendMessage:
    return AppendMessage(space_id=space, session_id=session, role="user", content=text,
                         expected_version=expected_version)
