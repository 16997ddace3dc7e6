"""Fixtures. Unit tests use none of the engine fixtures; integration and e2e tests share one
real PostgreSQL and one real nats-server per session, each test isolated by its own schema and
its own subject prefix (so its own streams)."""

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from memledger_platform import bus
from memledger_platform.endpoints import Endpoints
from memledger_platform.engines import EmbeddedNats, EmbeddedPostgres
from memledger_platform.eventstore.postgres import PostgresEventStore, datastore_from_dsn
from memledger_schemas.subjects import Subjects
from tests.support import FAULT_TABLE, delete_streams


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``faults`` (the full fault suite, the longer fuzzing and the largest
    bodies) run only when selected (``make test-faults``: ``pytest -m faults``)."""
    if "faults" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="the longer runs are `make test-faults`")
    for item in items:
        if item.get_closest_marker("faults") is not None:
            item.add_marker(skip)


class FaultTables:
    """The fault runs' results tables, gathered from the tests' reports (so from workers too)
    and printed at the end of the run."""

    def __init__(self) -> None:
        self.tables: list[str] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.tables += [str(text) for name, text in report.user_properties
                        if name == FAULT_TABLE]

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        for text in self.tables:
            terminalreporter.write_sep("=", "fault injection")
            terminalreporter.write_line(text)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(FaultTables(), "memledger-fault-tables")


@pytest.fixture(scope="session")
def engines_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the session's engines keep their files (JetStream's under ``nats/jetstream``)."""
    return tmp_path_factory.mktemp("engines")


@pytest.fixture(scope="session")
def engines(engines_home: Path) -> Iterator[Endpoints]:
    """Real embedded PostgreSQL and NATS for the whole session."""
    home = engines_home
    postgres, nats = EmbeddedPostgres(home / "postgres"), EmbeddedNats(home)
    try:
        yield Endpoints(postgres.start().dsn, nats.start())
    finally:
        nats.stop()
        postgres.stop()


@pytest.fixture
def pg_schema(engines: Endpoints) -> Iterator[str]:
    """A fresh PostgreSQL schema for one test, dropped afterwards."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(engines.postgres_dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture
def event_store(engines: Endpoints, pg_schema: str) -> Iterator[PostgresEventStore]:
    store = PostgresEventStore(datastore_from_dsn(engines.postgres_dsn, schema=pg_schema))
    store.create_tables()
    yield store
    store.close()


@pytest.fixture
def subjects() -> Subjects:
    """A subject prefix (so stream names) of this test's own."""
    return Subjects(prefix=f"t{uuid.uuid4().hex[:10]}")


@pytest.fixture
async def nats_js(engines: Endpoints, subjects: Subjects
                  ) -> AsyncIterator[tuple[Client, JetStreamContext]]:
    """A NATS connection with this test's streams created (and deleted afterwards)."""
    nc = await bus.connect(engines.nats_url, "memledger-test")
    js = nc.jetstream()
    await bus.ensure_streams(js, subjects)
    yield nc, js
    await delete_streams(js, subjects)
    await nc.close()
