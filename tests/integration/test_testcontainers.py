"""The event store contract and a relay round trip against PostgreSQL and NATS in Docker
containers (testcontainers), for machines with a Docker engine: the distributed mode's engines
rather than the embedded ones. Without a reachable engine every test here is skipped."""

import uuid
from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from memledger_platform import bus
from memledger_platform.eventstore import EventStore
from memledger_platform.eventstore.postgres import PostgresEventStore, datastore_from_dsn
from memledger_relay.relay import Relay
from memledger_schemas.subjects import HDR_MSG_ID, HDR_POSITION, Subjects
from tests.integration.events_support import envelope
from tests.integration.nats_support import sequence, stream_messages

pytest.register_assert_rewrite("tests.integration.eventstore_contract")
from tests.integration.eventstore_contract import EventStoreContract  # noqa: E402

pytestmark = pytest.mark.docker

POSTGRES_IMAGE = "postgres:16-alpine"
NATS_IMAGE = "nats:2.10"


@pytest.fixture(scope="module")
def docker_engine() -> None:
    """Skip (never error) where no Docker engine answers."""
    try:
        import docker  # type: ignore[import-untyped]

        docker.from_env().ping()
    except Exception as error:
        pytest.skip(f"no Docker engine reachable: {type(error).__name__}: {error}")


@pytest.fixture(scope="module")
def container_postgres_dsn(docker_engine: None) -> Iterator[str]:
    from testcontainers.community.postgres import PostgresContainer

    with PostgresContainer(POSTGRES_IMAGE, driver=None) as postgres:
        yield postgres.get_connection_url()


@pytest.fixture(scope="module")
def container_nats_url(docker_engine: None) -> Iterator[str]:
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.wait_strategies import LogMessageWaitStrategy

    server = (DockerContainer(NATS_IMAGE).with_command("-js").with_exposed_ports(4222)
              .waiting_for(LogMessageWaitStrategy("Server is ready")))
    with server:
        yield f"nats://{server.get_container_host_ip()}:{server.get_exposed_port(4222)}"


@pytest.fixture
def container_store(container_postgres_dsn: str) -> Iterator[PostgresEventStore]:
    yield from _store(container_postgres_dsn)


def _store(container_postgres_dsn: str, partitions: int = 1) -> Iterator[PostgresEventStore]:
    """An empty store in a schema of its own, dropped afterwards."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    store = PostgresEventStore(datastore_from_dsn(container_postgres_dsn, schema=schema),
                               partitions=partitions)
    store.create_tables()
    yield store
    store.close()
    with psycopg.connect(container_postgres_dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
async def container_js(container_nats_url: str, subjects: Subjects
                       ) -> AsyncIterator[tuple[Client, JetStreamContext]]:
    nc = await bus.connect(container_nats_url, "memledger-container-test")
    js = nc.jetstream()
    await bus.ensure_streams(js, subjects)
    yield nc, js
    await nc.close()


class TestContainerPostgresEventStore(EventStoreContract):
    @pytest.fixture
    def store(self, container_store: PostgresEventStore) -> EventStore:
        return container_store

    @pytest.fixture
    def two_partitions(self, container_postgres_dsn: str) -> Iterator[PostgresEventStore]:
        yield from _store(container_postgres_dsn, partitions=2)


async def test_events_committed_in_container_postgres_are_relayed_once_in_order_to_container_nats(
        container_store: PostgresEventStore, container_js: tuple[Client, JetStreamContext],
        subjects: Subjects) -> None:
    _, js = container_js
    stream = uuid.uuid4()
    events = [envelope(stream, version) for version in range(1, 6)]
    committed = container_store.append(events)
    relay = Relay(container_store, js, subjects, batch=2)
    relay.cursor = await relay.resume()

    while await relay.relay_once():
        pass

    msgs = await stream_messages(js, subjects.events_stream, subjects.all_events)
    assert [sequence(m) for m in msgs] == [1, 2, 3, 4, 5]
    assert [(m.headers or {})[HDR_POSITION] for m in msgs] == [
        str(c.position) for c in committed]
    assert [(m.headers or {})[HDR_MSG_ID] for m in msgs] == [str(e.event_id) for e in events]
    assert all(m.subject == subjects.event("acme", "main", "memory.asserted") for m in msgs)
