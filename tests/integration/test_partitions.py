"""Events partitioned by tenant (ADR 0016), on the real engines: two partitions, two tenants
in different ones. Each partition's relay publishes its tenants' events only, to its own
stream; each partition's projector keeps its own checkpoint; a read waits on its tenant's
partition only, so one partition's projector stopping holds up no other tenant's reads; and
the streams together hold every event of the log once."""

import contextlib
from collections.abc import AsyncIterator, Iterator
from functools import partial
from typing import Any
from uuid import uuid4

import httpx
import psycopg
import pytest
from nats.js import JetStreamContext
from psycopg_pool import ConnectionPool

from memledger_ingest.core.writer import GroupCommitWriter
from memledger_platform import bus
from memledger_platform.auth import TENANT_HEADER
from memledger_platform.consumer_positions import ConsumerPositions
from memledger_platform.endpoints import Endpoints
from memledger_platform.eventstore.postgres import (
    EVENTS_TABLE,
    PostgresEventStore,
    datastore_from_dsn,
)
from memledger_platform.readmodel import schema
from memledger_platform.readmodel.checkpoint import read_checkpoint
from memledger_query.core.reader import Reader
from memledger_query.entrypoints.http import create_app
from memledger_relay.relay import Relay
from memledger_schemas import commands as c
from memledger_schemas.subjects import HDR_POSITION, Subjects, partition_of
from tests.integration.events_support import envelope
from tests.integration.ingest_support import running
from tests.integration.nats_support import stream_messages
from tests.integration.read_support import drop_read_models, write
from tests.integration.test_projector import running_projector
from tests.support import delete_streams

PARTITIONS = 2
SPACE = "main"
ACME = "acme"
OTHER = next(t for t in ("globex", "initech", "umbrella", "hooli", "vandelay")
             if partition_of(t, PARTITIONS) != partition_of(ACME, PARTITIONS))
"""A tenant whose events are in the other partition than acme's."""


@pytest.fixture
def partitioned_store(engines: Endpoints, pg_schema: str) -> Iterator[PostgresEventStore]:
    store = PostgresEventStore(datastore_from_dsn(engines.postgres_dsn, schema=pg_schema),
                               partitions=PARTITIONS)
    store.create_tables()
    yield store
    store.close()


@pytest.fixture
async def streams(engines: Endpoints) -> AsyncIterator[tuple[Subjects, JetStreamContext]]:
    """The partitioned events streams of a subject prefix of this test's own."""
    subjects = Subjects(prefix=f"t{uuid4().hex[:10]}", partitions=PARTITIONS)
    nc = await bus.connect(engines.nats_url, "memledger-test")
    js = nc.jetstream()
    await bus.ensure_streams(js, subjects)
    yield subjects, js
    await delete_streams(js, subjects)
    await nc.close()


@pytest.fixture
def names(engines: Endpoints, pg_schema: str) -> Iterator[schema.Names]:
    """The read models of this test's schema, a checkpoint per partition."""
    found = schema.Names(pg_schema, PARTITIONS)
    with psycopg.connect(engines.postgres_dsn, autocommit=True) as conn:
        schema.prepare(conn, found)
        yield found
        drop_read_models(conn, pg_schema)


async def _relay_every_partition(store: PostgresEventStore, js: JetStreamContext,
                                 subjects: Subjects) -> None:
    for partition in subjects.every_partition():
        relay = Relay(store, js, partition)
        relay.cursor = await relay.resume()
        while await relay.relay_once():
            pass


async def _remember(writer: GroupCommitWriter, tenant: str, content: str) -> int:
    """Assert a memory for ``tenant``; the position its write was acknowledged with."""
    done = await write(writer, c.AssertMemory(space_id=SPACE, item_id=uuid4(), kind="fact",
                                              content=content), tenant=tenant)
    return done.positions[-1]


@contextlib.asynccontextmanager
async def _reads(dsn: str, store: PostgresEventStore, names: schema.Names
                 ) -> AsyncIterator[tuple[httpx.AsyncClient, Reader]]:
    pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
        dsn, min_size=1, max_size=4, kwargs={"autocommit": True}, open=True)
    try:
        reader = Reader(pool, names)
        app = create_app(reader, store, "default")
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://query") as client:
            yield client, reader
    finally:
        pool.close()


async def _items(client: httpx.AsyncClient, tenant: str, position: int, wait_ms: int = 10_000
                 ) -> httpx.Response:
    return await client.get(f"/v1/spaces/{SPACE}/items", headers={TENANT_HEADER: tenant},
                            params={"min_position": position, "wait_ms": wait_ms})


def _checkpoints(dsn: str, names: schema.Names) -> list[tuple[int, int]]:
    """(position, stream sequence) of each partition's checkpoint."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        live = names.schema(schema.live_version(conn, names))
        found = [read_checkpoint(conn, live, partition=i) for i in range(PARTITIONS)]
    return [(cp.position, cp.stream_seq) for cp in found]


def test_the_partition_of_a_tenant_is_recorded_with_each_event_at_commit(
        engines: Endpoints, pg_schema: str, partitioned_store: PostgresEventStore) -> None:
    partitioned_store.append([envelope(uuid4(), 1, tenant=ACME),
                              envelope(uuid4(), 1, tenant=OTHER)])
    with psycopg.connect(engines.postgres_dsn, autocommit=True) as conn:
        rows = conn.execute(f'SELECT notification_id, tenant_partition FROM "{pg_schema}".'
                            "memledger_events ORDER BY notification_id").fetchall()

    assert [r[1] for r in rows] == [partition_of(ACME, 2), partition_of(OTHER, 2)]
    assert [e.position for e in partitioned_store.read_partition(
        partition_of(OTHER, 2), 0, 10)] == [rows[1][0]]


async def test_each_partition_is_relayed_and_projected_on_its_own_and_reads_wait_on_theirs(
        engines: Endpoints, partitioned_store: PostgresEventStore,
        streams: tuple[Subjects, JetStreamContext], names: schema.Names) -> None:
    subjects, js = streams
    dsn = engines.postgres_dsn
    mine, theirs = partition_of(ACME, PARTITIONS), partition_of(OTHER, PARTITIONS)
    async with running(GroupCommitWriter(partitioned_store)) as writer, \
            _reads(dsn, partitioned_store, names) as (client, reader):
        for tenant in (ACME, OTHER):
            await writer.submit(tenant, [c.CreateSpace(space_id=SPACE)])
        first = {t: await _remember(writer, t, f"{t} one") for t in (ACME, OTHER)}
        await _relay_every_partition(partitioned_store, js, subjects)
        async with running_projector(dsn, js, subjects.of_partition(mine), names), \
                running_projector(dsn, js, subjects.of_partition(theirs), names) as other:
            for tenant, position in first.items():
                answer = await _items(client, tenant, position)
                assert answer.status_code == 200, answer.text
                assert [i["content"] for i in answer.json()["items"]] == [f"{tenant} one"]

        # Only acme's partition is projected from now on.
        async with running_projector(dsn, js, subjects.of_partition(mine), names):
            second = {t: await _remember(writer, t, f"{t} two") for t in (ACME, OTHER)}
            await _relay_every_partition(partitioned_store, js, subjects)
            mine_now = await _items(client, ACME, second[ACME])
            theirs_now = await _items(client, OTHER, second[OTHER], wait_ms=300)
            # acme's partition has nothing after its own write: a later position (the other
            # tenant's write) is reached for acme's reads too
            mine_later = await _items(client, ACME, second[OTHER])

        assert mine_now.status_code == 200, mine_now.text
        assert sorted(i["content"] for i in mine_now.json()["items"]) == ["acme one", "acme two"]
        # the basis a read names is its own partition's checkpoint
        assert mine_now.json()["basis"]["position"] >= second[ACME]
        assert theirs_now.status_code == 503, theirs_now.text
        refusal = theirs_now.json()["error"]
        # what it names as reached: the log up to its partition's first unprojected event
        assert (refusal["code"], refusal["projected_position"]) == (
            "not_yet_visible", second[OTHER] - 1)
        assert mine_later.status_code == 200, mine_later.text
        # without a tenant: what every partition has projected through
        assert reader.position() == second[OTHER] - 1
        checkpoints = _checkpoints(dsn, names)
        assert checkpoints[mine][0] >= second[ACME]
        assert checkpoints[theirs][0] == first[OTHER] < second[OTHER]

        # Their projector back: it resumes from its own checkpoint.
        async with running_projector(dsn, js, subjects.of_partition(theirs), names):
            answer = await _items(client, OTHER, second[OTHER])
        assert answer.status_code == 200, answer.text
        assert sorted(i["content"] for i in answer.json()["items"]) == [
            f"{OTHER} one", f"{OTHER} two"]
        assert other.dead_letters == 0
        assert reader.position() == partitioned_store.max_position()

    await _assert_every_event_once_in_its_partition(partitioned_store, js, subjects)
    checkpoints = _checkpoints(dsn, names)
    for partition in subjects.every_partition():
        published = await stream_messages(js, partition.events_stream, partition.all_events)
        assert checkpoints[partition.partition] == (
            int((published[-1].headers or {})[HDR_POSITION]), len(published))


async def _assert_every_event_once_in_its_partition(
        store: PostgresEventStore, js: JetStreamContext, subjects: Subjects) -> None:
    """The streams together hold the log: each event once, in its tenant's partition, each
    stream in position order."""
    relayed: dict[int, int] = {}
    for partition in subjects.every_partition():
        published = await stream_messages(js, partition.events_stream, partition.all_events)
        positions = [int((m.headers or {})[HDR_POSITION]) for m in published]
        assert positions == sorted(positions)
        for msg, position in zip(published, positions, strict=True):
            tenant = partition.event_tenant(msg.subject)
            assert tenant is not None
            assert partition_of(tenant, PARTITIONS) == partition.partition
            assert position not in relayed
            relayed[position] = partition.partition
    assert sorted(relayed) == list(range(1, store.max_position() + 1))


def test_a_partitions_vector_position_reaches_past_the_other_partitions_events(
        engines: Endpoints, pg_schema: str, partitioned_store: PostgresEventStore) -> None:
    """A search for acme waits on acme's partition's vector position: once every acme event
    is written, later positions (the other tenant's events) count as reached too, and never
    past acme's first event not written yet."""
    mine = partition_of(ACME, PARTITIONS)
    durable = f"vectors-test-p{mine}"
    tenants = [ACME, OTHER, OTHER, ACME, OTHER]
    partitioned_store.append([envelope(uuid4(), 1, tenant=t) for t in tenants])
    with psycopg.connect(engines.postgres_dsn, autocommit=True) as conn:
        ids = [r[0] for r in conn.execute(
            f'SELECT notification_id FROM "{pg_schema}".memledger_events '
            "ORDER BY notification_id").fetchall()]
    pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
        engines.postgres_dsn, min_size=1, max_size=2, kwargs={"autocommit": True}, open=True)
    try:
        positions = ConsumerPositions(pool, pg_schema)
        through = partial(positions.written_through, durable, mine, EVENTS_TABLE)
        before_any = through()
        positions.record_written(durable, ids[0])
        after_first = through()
        positions.record_written(durable, ids[3])
        after_all = through()
    finally:
        pool.close()

    assert before_any == ids[0] - 1  # nothing of acme's is written: up to its first event
    assert after_first == ids[3] - 1  # the other tenant's two events do not hold it back
    assert after_all == ids[4]  # nothing of acme's after: the log's last position
