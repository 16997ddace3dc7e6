"""The ``EventStore`` contract against the in-memory fake (no network)."""

import pytest

from memledger_platform.eventstore import EventStore
from memledger_platform.eventstore.memory import InMemoryEventStore
from tests.integration.eventstore_contract import EventStoreContract


class TestInMemoryEventStore(EventStoreContract):
    @pytest.fixture
    def store(self) -> EventStore:
        return InMemoryEventStore()
