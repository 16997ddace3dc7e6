"""The services of ``memledger up`` start together, and each creates the schema objects it
needs if missing: the keyring, the API key store and the consumer positions beside the event
store. PostgreSQL's IF NOT EXISTS does not serialise concurrent creations, so they take turns
(``pg_locks.exclusively``); here they all start at once on a fresh schema."""

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any

import pytest
from psycopg_pool import ConnectionPool

from memledger_platform.auth_postgres import PostgresKeyStore
from memledger_platform.consumer_positions import ConsumerPositions
from memledger_platform.crypto import new_key
from memledger_platform.endpoints import Endpoints
from memledger_platform.eventstore.postgres import PostgresEventStore, datastore_from_dsn
from memledger_platform.keyring_postgres import PostgresKeyring

Create = Callable[[ConnectionPool[Any], str], object]

_CREATORS: dict[str, Create] = {
    "keyring": lambda pool, schema: PostgresKeyring(pool, new_key(), schema),
    "api keys": PostgresKeyStore,
    "consumer positions": ConsumerPositions,
}


@pytest.fixture
def pools(engines: Endpoints) -> Iterator[list[ConnectionPool[Any]]]:
    with ExitStack() as stack:
        yield [stack.enter_context(ConnectionPool(
            engines.postgres_dsn, min_size=1, max_size=1, open=True,
            kwargs={"autocommit": True})) for _ in range(8)]


@pytest.mark.parametrize("kinds", [["keyring"], ["api keys"], ["consumer positions"],
                                   ["keyring", "api keys", "consumer positions", "events"]])
def test_services_starting_together_create_their_tables_once_without_failing(
        engines: Endpoints, pg_schema: str, pools: list[ConnectionPool[Any]],
        kinds: list[str]) -> None:
    start = threading.Barrier(len(pools))

    def create(n: int) -> None:
        kind = kinds[n % len(kinds)]
        start.wait()
        if kind == "events":
            store = PostgresEventStore(datastore_from_dsn(engines.postgres_dsn,
                                                          schema=pg_schema, pool_size=1))
            try:
                store.create_tables()
            finally:
                store.close()
        else:
            _CREATORS[kind](pools[n], pg_schema)

    with ThreadPoolExecutor(len(pools)) as pool:
        list(pool.map(create, range(len(pools))))

    with pools[0].connection() as conn:
        tables = {row[0] for row in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            (pg_schema,))}
    expected = {"keyring": {"memledger_subject_keys"},
                "api keys": {"memledger_tenants", "memledger_api_keys"},
                "consumer positions": {"memledger_consumer_positions"},
                "events": {"memledger_events"}}
    assert set().union(*(expected[k] for k in kinds)) <= tables
