"""The ``EventStore`` contract against PostgreSQL (one fresh schema per test)."""

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from memledger_ingest.bootstrap import Endpoints
from memledger_platform.eventstore import EventStore
from memledger_platform.eventstore.postgres import PostgresEventStore, datastore_from_dsn

pytest.register_assert_rewrite("tests.integration.eventstore_contract")
from tests.integration.eventstore_contract import EventStoreContract  # noqa: E402


class TestPostgresEventStore(EventStoreContract):
    @pytest.fixture
    def store(self, event_store: PostgresEventStore) -> EventStore:
        return event_store


def test_processes_starting_together_create_the_tables_once_without_deadlock(
        engines: Endpoints, pg_schema: str) -> None:
    """``memledger up`` and its relay create the same schema objects as they start; run at
    once, the creations deadlocked (found by a restart: "deadlock detected ... pg_proc")."""
    stores = [PostgresEventStore(datastore_from_dsn(engines.postgres_dsn, schema=pg_schema))
              for _ in range(6)]
    start = threading.Barrier(len(stores))

    def create(store: PostgresEventStore) -> None:
        start.wait()
        store.create_tables()

    try:
        with ThreadPoolExecutor(len(stores)) as pool:
            list(pool.map(create, stores))
        assert stores[0].max_position() == 0
    finally:
        for store in stores:
            store.close()
