"""The ``EventStore`` contract against the in-memory fake (no network)."""

import pytest

from memledger_platform.eventstore import EventStore
from memledger_platform.eventstore.memory import InMemoryEventStore

pytest.register_assert_rewrite("tests.integration.eventstore_contract")
from tests.integration.eventstore_contract import EventStoreContract  # noqa: E402


class TestInMemoryEventStore(EventStoreContract):
    @pytest.fixture
    def store(self) -> EventStore:
        return InMemoryEventStore()

    @pytest.fixture
    def two_partitions(self) -> EventStore:
        return InMemoryEventStore(partitions=2)

