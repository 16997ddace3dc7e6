"""Helpers for integration tests of the read side: a read model on the test's own schema,
filled from the event store (directly, as the projector's store does), and the query API
over it."""

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, LiteralString

import httpx
import orjson
import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool

from memledger_ingest.core.writer import CommandResult, GroupCommitWriter
from memledger_platform.auth import TENANT_HEADER
from memledger_platform.events import Event, decode
from memledger_platform.eventstore import EventStore, RecordedEvent
from memledger_platform.readmodel import schema
from memledger_platform.readmodel.checkpoint import read_checkpoint
from memledger_projector.core import store
from memledger_query.core.reader import Reader
from memledger_query.entrypoints.http import create_app
from memledger_schemas.commands import CommandBase
from tests.integration.events_support import read_everything

TENANT = "acme"
SPACE = "main"

TABLES = ("spaces", "agents", "sessions", "messages", "mentions", "items", "item_versions",
          "entities", "relations", "changes", "checkpoint")


@dataclass
class ReadSide:
    """The event store of a test and the read model projected from it."""

    store: EventStore
    conn: psycopg.Connection[Any]
    names: schema.Names

    @property
    def schema(self) -> str:
        return self.names.schema(schema.live_version(self.conn, self.names))

    def position(self) -> int:
        return read_checkpoint(self.conn, self.schema).position

    def project(self, up_to: int | None = None) -> int:
        """Apply every committed event not projected yet (up to ``up_to``), in one batch;
        return the checkpoint."""
        after = self.position()
        fresh = [e for e in events_of(read_everything(self.store))
                 if e.position > after and (up_to is None or e.position <= up_to)]
        return store.apply_batch(self.conn, self.names, fresh).position


def events_of(recorded: list[RecordedEvent]) -> list[Event]:
    return [decode(orjson.loads(r.document())) for r in recorded]


@contextmanager
def read_side(dsn: str, event_store: EventStore, base: str) -> Iterator[ReadSide]:
    """A read model (version 1, live) beside ``base``; every projection version of it is
    dropped afterwards."""
    names = schema.Names(base)
    with psycopg.connect(dsn, autocommit=True) as conn:
        schema.ensure_pointer(conn, names)
        try:
            yield ReadSide(event_store, conn, names)
        finally:
            drop_read_models(conn, base)


def drop_read_models(conn: psycopg.Connection[Any], base: str) -> None:
    found = conn.execute("SELECT nspname FROM pg_namespace WHERE starts_with(nspname, %s)",
                         (f"{base}_rm_",)).fetchall()
    for (name,) in found:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def snapshot(conn: psycopg.Connection[Any], schema_name: str, *, with_row_ids: bool = True
             ) -> dict[str, list[str]]:
    """Every row of every read-model table, as text, sorted: equal snapshots mean equal read
    models. ``with_row_ids=False`` leaves out what differs between two equal builds (the
    versions' serial ids and the checkpoint's stream sequence)."""
    found: dict[str, list[str]] = {}
    for table in TABLES:
        row = "t" if with_row_ids else _BUILD_INDEPENDENT.get(table, "t")
        query = sql.SQL("SELECT {}::text FROM {}.{} t").format(
            sql.SQL(row), sql.Identifier(schema_name), sql.Identifier(table))
        found[table] = sorted(r[0] for r in conn.execute(query).fetchall())
    return found


_BUILD_INDEPENDENT: dict[str, LiteralString] = {
    "item_versions": "(t.tenant_id, t.item_id, t.valid, t.sys_from, t.sys_to, t.attrs, t.cause)",
    "checkpoint": "(t.position, t.recorded_at)",
}


def changes_positions(conn: psycopg.Connection[Any], schema_name: str) -> list[int]:
    query = sql.SQL("SELECT position FROM {}.changes ORDER BY position").format(
        sql.Identifier(schema_name))
    return [int(r[0]) for r in conn.execute(query).fetchall()]


async def write(writer: GroupCommitWriter, *commands: CommandBase, tenant: str = TENANT,
                actor: str = "api") -> CommandResult:
    """Commit ``commands`` as one submission sent by ``actor``; return the last one's result."""
    return (await writer.submit(tenant, list(commands), actor=actor))[-1]


class CountingReader(Reader):
    """A reader that counts how often it has read the projection's position (so a test knows
    a read-your-writes wait has looked at least once)."""

    polls = 0

    def position(self, partition: int | None = None) -> int:
        self.polls += 1
        return super().position(partition)

    @property
    def waiting(self) -> int:
        """How many read-your-writes waits the watcher still polls for."""
        return len(self._waiters)

    @property
    def listening(self) -> bool:
        """Whether ``follow`` hears the projector's notices."""
        return self._listening


@asynccontextmanager
async def query_api(dsn: str, side: ReadSide, tenant: str = TENANT
                    ) -> AsyncIterator[tuple[httpx.AsyncClient, CountingReader]]:
    """The query app over ``side`` (its own connection pool), called as ``tenant``."""
    pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
        dsn, min_size=1, max_size=4, kwargs={"autocommit": True}, open=True)
    try:
        reader = CountingReader(pool, side.names)
        app = create_app(reader, side.store, "default")
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://query",
                                     headers={TENANT_HEADER: tenant}) as client:
            yield client, reader
    finally:
        pool.close()
