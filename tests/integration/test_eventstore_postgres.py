"""The ``EventStore`` contract against PostgreSQL (one fresh schema per test)."""

import pytest

from memledger_platform.eventstore import EventStore
from memledger_platform.eventstore.postgres import PostgresEventStore
from tests.integration.eventstore_contract import EventStoreContract


class TestPostgresEventStore(EventStoreContract):
    @pytest.fixture
    def store(self, event_store: PostgresEventStore) -> EventStore:
        return event_store
