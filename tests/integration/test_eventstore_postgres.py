"""The ``EventStore`` contract against PostgreSQL (one fresh schema per test)."""

import pytest

from memledger_platform.eventstore import EventStore
from memledger_platform.eventstore.postgres import PostgresEventStore

pytest.register_assert_rewrite("tests.integration.eventstore_contract")
from tests.integration.eventstore_contract import EventStoreContract  # noqa: E402


class TestPostgresEventStore(EventStoreContract):
    @pytest.fixture
    def store(self, event_store: PostgresEventStore) -> EventStore:
        return event_store
