"""Fixtures shared by the read-side integration tests."""

from collections.abc import AsyncIterator, Iterator

import pytest

from memledger_ingest.core.writer import GroupCommitWriter
from memledger_platform.endpoints import Endpoints
from memledger_platform.eventstore.postgres import PostgresEventStore
from tests.integration.ingest_support import running
from tests.integration.read_support import ReadSide, read_side


@pytest.fixture
def side(engines: Endpoints, pg_schema: str, event_store: PostgresEventStore
         ) -> Iterator[ReadSide]:
    """The read models on this test's schema (dropped afterwards)."""
    with read_side(engines.postgres_dsn, event_store, pg_schema) as found:
        yield found


@pytest.fixture
async def writer(event_store: PostgresEventStore) -> AsyncIterator[GroupCommitWriter]:
    """A running writer over this test's event store."""
    async with running(GroupCommitWriter(event_store)) as started:
        yield started
