"""The projector's consumer over a real JetStream stream and a real PostgreSQL read model:
what it projects, that a redelivery changes nothing, that a poison event is dead-lettered
without stopping the rest, and that a projector killed between its write and its ack is
resumed by a fresh one with no effect lost or doubled."""

import asyncio
import contextlib
import signal
import sys
import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, LiteralString
from uuid import UUID, uuid4

import orjson
import psycopg
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from psycopg import sql

from memledger_ingest.core.writer import GroupCommitWriter
from memledger_platform.endpoints import Endpoints
from memledger_platform.events import decode
from memledger_platform.eventstore import RecordedEvent
from memledger_platform.eventstore.postgres import PostgresEventStore
from memledger_platform.readmodel import schema
from memledger_platform.readmodel.checkpoint import read_checkpoint
from memledger_projector.core import store
from memledger_projector.entrypoints.consumer import DURABLE, Projector
from memledger_query.core import replay, views
from memledger_relay.relay import Relay
from memledger_schemas import commands as c
from memledger_schemas.api.reads import Basis
from memledger_schemas.subjects import (
    HDR_DLQ_REASON,
    HDR_DLQ_SUBJECT,
    HDR_MSG_ID,
    HDR_POSITION,
    Subjects,
)
from tests.integration.events_support import envelope, read_everything
from tests.integration.ingest_support import message, open_session
from tests.integration.nats_support import stream_messages
from tests.integration.read_support import (
    SPACE,
    TENANT,
    ReadSide,
    changes_positions,
    events_of,
    snapshot,
    write,
)
from tests.support import eventually

Nats = tuple[Client, JetStreamContext]
Y2020, Y2022 = datetime(2020, 1, 1, tzinfo=UTC), datetime(2022, 1, 1, tzinfo=UTC)
TENANTS, SPACES = (TENANT, "globex"), (SPACE, "other")




class Connections:
    """The projector's ``connect``: fresh autocommit connections, closed at the end. With
    ``dead_first``, the first one handed out has already lost its server."""

    def __init__(self, dsn: str, *, dead_first: bool = False) -> None:
        self._dsn = dsn
        self._dead_first = dead_first
        self.opened: list[psycopg.Connection[Any]] = []

    def connect(self) -> psycopg.Connection[Any]:
        conn = psycopg.connect(self._dsn, autocommit=True)
        self.opened.append(conn)
        if self._dead_first and len(self.opened) == 1:
            with psycopg.connect(self._dsn, autocommit=True) as killer:
                killer.execute("SELECT pg_terminate_backend(%s, 5000)",
                               (conn.info.backend_pid,))
        return conn

    def close(self) -> None:
        for conn in self.opened:
            conn.close()


@contextlib.asynccontextmanager
async def running_projector(dsn: str, js: JetStreamContext, subjects: Subjects,
                            names: schema.Names, batch: int = 500) -> AsyncIterator[Projector]:
    connections, stop = Connections(dsn), asyncio.Event()
    projector = Projector(connections.connect, js, subjects, names, batch=batch)
    task = asyncio.create_task(projector.run(stop))
    try:
        yield projector
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=10)
        connections.close()


async def _relay_all(event_store: PostgresEventStore, js: JetStreamContext,
                     subjects: Subjects) -> None:
    relay = Relay(event_store, js, subjects)
    relay.cursor = await relay.resume()
    while await relay.relay_once():
        pass


async def _publish_as_the_relay_does(js: JetStreamContext, subjects: Subjects,
                                     events: list[RecordedEvent]) -> None:
    for event in events:
        fields = event.fields()
        await js.publish(subjects.event(fields["tenant_id"], fields["space_id"],
                                        event.event_type), event.document(),
                         headers={HDR_POSITION: str(event.position),
                                  HDR_MSG_ID: fields["event_id"]})


async def _subscribe(js: JetStreamContext, subjects: Subjects, durable: str = DURABLE
                     ) -> JetStreamContext.PullSubscription:
    """A pull consumer configured as the projector's own."""
    return await js.pull_subscribe(subjects.all_events, durable=durable,
                                   stream=subjects.events_stream, config=ConsumerConfig(
                                       ack_policy=AckPolicy.EXPLICIT, ack_wait=60.0,
                                       deliver_policy=DeliverPolicy.ALL, max_ack_pending=500))


async def _fetch(sub: JetStreamContext.PullSubscription, count: int) -> list[Msg]:
    found: list[Msg] = []
    while len(found) < count:
        found.extend(await sub.fetch(count - len(found), timeout=5.0))
    return found


async def _reached(side: ReadSide, position: int) -> None:
    assert side.position() == position


def _assert_like_a_replay(side: ReadSide, at: Basis, tenants: tuple[str, ...] = (TENANT,),
                          spaces: tuple[str, ...] = (SPACE,)) -> None:
    """The projected items equal those of a fold of the whole log, in every scope."""
    for tenant in tenants:
        folded = replay.fold(side.store, tenant)
        for space in spaces:
            projected = views.items(side.conn, side.schema, tenant, space, at, views.ItemFilters(
                include_archived=True, limit=10_000))
            assert projected == replay.items(folded, tenant, space, at, include_archived=True,
                                             limit=10_000)


async def _relayed_mixed_log(writer: GroupCommitWriter, event_store: PostgresEventStore,
                             js: JetStreamContext, subjects: Subjects) -> int:
    """The mixed log, written and relayed to the events stream; its last position."""
    await _mixed_log(writer)
    await _relay_all(event_store, js, subjects)
    return event_store.max_position()


async def _mixed_log(writer: GroupCommitWriter) -> None:
    """Some of every kind of event, in one tenant and space."""
    session = await open_session(writer)
    items = [UUID(int=i + 1) for i in range(4)]
    for i, item in enumerate(items):
        await write(writer, c.AssertMemory(space_id=SPACE, item_id=item, kind="fact",
                                           content=f"item {i}", session_id=session,
                                           valid_from=Y2020, tags=("t",)))
    await write(writer, message(session, "hello"), message(session, "again"))
    await write(writer, c.ReviseMemory(space_id=SPACE, item_id=items[0], content="fixed",
                                       valid_from=Y2020, valid_to=Y2022, reason="typo"))
    await write(writer, c.RetractMemory(space_id=SPACE, item_id=items[1], reason="wrong"))
    await write(writer, c.SupersedeMemory(space_id=SPACE, item_id=items[2],
                                          superseded_by=items[3], reason="newer"))
    await write(writer, c.ReaffirmMemory(space_id=SPACE, item_id=items[3]))
    await write(writer, c.ArchiveMemory(space_id=SPACE, item_id=items[3], reason="policy"))
    await write(writer, c.UpsertEntity(space_id=SPACE, entity_id="alice", name="Alice",
                                       type="person"),
                c.UpsertEntity(space_id=SPACE, entity_id="acme", name="Acme", type="org"))
    relation = await write(writer, c.AssertRelation(
        space_id=SPACE, source_entity="alice", relation_type="works_at", target_entity="acme"))
    await write(writer, c.RetractRelation(space_id=SPACE,
                                          relation_id=UUID(relation.ids["relation_id"])))
    await write(writer, c.RegisterAgent(agent_id="scout"))
    await write(writer, c.EndSession(space_id=SPACE, session_id=session))


def _latest(side: ReadSide, valid_at: datetime | None = None) -> Basis:
    return Basis(position=side.position(), recorded_at=None,
                 valid_at=valid_at or datetime.now(UTC))


def _count(side: ReadSide, table: LiteralString, where: LiteralString = "true") -> int:
    row = side.conn.execute(sql.SQL("SELECT count(*) FROM {}.{} WHERE " + where).format(
        sql.Identifier(side.schema), sql.Identifier(table))).fetchone()
    assert row is not None
    return int(row[0])


# --- the consumer end to end ---------------------------------------------------------------

async def test_written_and_relayed_events_are_projected_into_every_read_model(
        engines: Endpoints, event_store: PostgresEventStore, writer: GroupCommitWriter,
        side: ReadSide, subjects: Subjects, nats_js: Nats) -> None:
    _, js = nats_js
    last = await _relayed_mixed_log(writer, event_store, js, subjects)

    async with running_projector(engines.postgres_dsn, js, subjects, side.names,
                                 batch=7) as projector:
        await eventually(lambda: _reached(side, last))
    checkpoint = read_checkpoint(side.conn, side.schema)

    assert (checkpoint.position, checkpoint.stream_seq, projector.position) == (last, last, last)
    assert checkpoint.recorded_at == read_everything(event_store)[-1].recorded_at
    assert changes_positions(side.conn, side.schema) == list(range(1, last + 1))
    assert _count(side, "items") == 4
    assert _count(side, "items", "status = 'active'") == 1
    assert _count(side, "sessions", "status = 'ended'") == 1
    assert _count(side, "messages") == 2
    assert (_count(side, "entities"), _count(side, "relations", "status = 'retracted'")) == (2, 1)
    assert _count(side, "agents") == 1
    assert projector.dead_letters == 0
    _assert_like_a_replay(side, _latest(side))
    _assert_like_a_replay(side, _latest(side, valid_at=datetime(2021, 1, 1, tzinfo=UTC)))


# --- redelivery -------------------------------------------------------------------------

async def test_applying_the_same_batch_twice_leaves_the_read_model_as_it_was(
        event_store: PostgresEventStore, writer: GroupCommitWriter, side: ReadSide) -> None:
    await _mixed_log(writer)
    events = events_of(read_everything(event_store))
    first = store.apply_batch(side.conn, side.names, events, stream_seq=len(events))
    before = snapshot(side.conn, side.schema)

    again = store.apply_batch(side.conn, side.names, events, stream_seq=len(events))

    assert again == first
    assert snapshot(side.conn, side.schema) == before


@pytest.mark.parametrize(("table", "id_column"), [
    ("items", "item_id"), ("spaces", "space_id"), ("sessions", "session_id"),
    ("relations", "relation_id"), ("item_versions", None)])
async def test_a_batch_seeds_its_rows_by_index_never_by_reading_the_whole_table(
        event_store: PostgresEventStore, writer: GroupCommitWriter, side: ReadSide,
        table: str, id_column: str | None) -> None:
    """Each batch reads the rows it changes by their ids: a column cast to text could not use
    its index, and every batch would read the whole table (a projector slowing down as the
    model grows: quadratic over a load)."""
    await _mixed_log(writer)
    side.project()
    s = side.schema
    query = (store.versions_query(s) if id_column is None
             else store.rows_query(side.conn, s, table, id_column))
    with side.conn.transaction():
        side.conn.execute("SET LOCAL enable_seqscan = off")  # a tiny table: seq scan is cheap
        plan = "\n".join(row[0] for row in side.conn.execute(
            b"EXPLAIN " + query, ([TENANT], [str(UUID(int=1))])).fetchall())
    # The id column compared in its own type (an index on it can be searched); a tiny table's
    # plan may still prefer another index, so the plan's choice is not what is checked.
    assert f"{id_column or 'item_id'})::text" not in plan, plan
    assert f"Seq Scan on {table}" not in plan, plan


async def test_a_batch_overlapping_the_checkpoint_applies_only_its_new_events(
        event_store: PostgresEventStore, writer: GroupCommitWriter, side: ReadSide) -> None:
    await _mixed_log(writer)
    events = events_of(read_everything(event_store))
    store.apply_batch(side.conn, side.names, events)
    rebuilt = schema.create(side.conn, side.names, 2)

    for end in (5, 12, len(events)):  # each batch repeats the ones before it
        with side.conn.transaction():
            store.apply_to(side.conn, rebuilt, events[:end])

    assert snapshot(side.conn, rebuilt, with_row_ids=False) == snapshot(
        side.conn, side.schema, with_row_ids=False)


async def test_messages_redelivered_after_their_write_committed_change_nothing_and_are_acked(
        engines: Endpoints, event_store: PostgresEventStore, writer: GroupCommitWriter,
        side: ReadSide, subjects: Subjects, nats_js: Nats) -> None:
    _, js = nats_js
    last = await _relayed_mixed_log(writer, event_store, js, subjects)
    sub = await _subscribe(js, subjects)
    delivered = await _fetch(sub, last)
    # The write commits, then the projector dies before its acks: the messages come back.
    store.apply_batch(side.conn, side.names,
                      [decode(orjson.loads(m.data)) for m in delivered],
                      delivered[-1].metadata.sequence.stream)
    before = snapshot(side.conn, side.schema)
    await asyncio.gather(*(m.nak() for m in delivered))
    connections = Connections(engines.postgres_dsn)
    projector = Projector(connections.connect, js, subjects, side.names)
    try:
        redelivered = await _fetch(sub, last)
        await projector.handle(redelivered)
        all_again = await _fetch(await _subscribe(js, subjects, "second-consumer"), last)
        await projector.handle(all_again)
    finally:
        connections.close()

    assert [m.metadata.num_delivered for m in redelivered] == [2] * last
    assert snapshot(side.conn, side.schema) == before
    assert projector.position == last
    info = await js.consumer_info(subjects.events_stream, DURABLE)
    assert (info.num_ack_pending, info.ack_floor.stream_seq) == (0, last)


# --- poison ---------------------------------------------------------------------------------

async def test_poison_events_are_dead_lettered_with_a_reason_and_later_events_still_projected(
        engines: Endpoints, event_store: PostgresEventStore, writer: GroupCommitWriter,
        side: ReadSide, subjects: Subjects, nats_js: Nats) -> None:
    _, js = nats_js
    session = await open_session(writer)
    refused = event_store.append([envelope(uuid4(), 1, payload={  # the database refuses it
        "item_id": "not-a-uuid", "kind": "fact", "content": "x"})])[0].position
    await write(writer, message(session, "before the junk"))
    await _relay_all(event_store, js, subjects)
    junk_subject = subjects.event(TENANT, SPACE, "memory.asserted")
    junk = [b"not json", b'{"event_type": "memory.asserted", "payload": {}}']
    for body in junk:
        await js.publish(junk_subject, body, headers={HDR_POSITION: str(refused + 1)})
    relayed = event_store.max_position()
    await write(writer, message(session, "after the junk"))
    await write(writer, c.AssertMemory(space_id=SPACE, kind="fact", content="still here"))
    await _publish_as_the_relay_does(js, subjects, event_store.read_all(relayed, 100))
    last = event_store.max_position()

    async with running_projector(engines.postgres_dsn, js, subjects, side.names) as projector:
        await eventually(lambda: _reached(side, last))
    dead = await stream_messages(js, subjects.dead_letter_stream, subjects.all_dead_letters)

    assert {m.subject for m in dead} == {f"{subjects.prefix}.dlq.projector.{TENANT}"}
    assert sorted(m.data for m in dead) == sorted([*junk, _document(event_store, refused)])
    reasons = [(m.headers or {})[HDR_DLQ_REASON] for m in dead]
    assert sum(r.startswith("undecodable event") for r in reasons) == 2
    assert sum(r.startswith(f"position {refused}:") for r in reasons) == 1
    assert {(m.headers or {})[HDR_DLQ_SUBJECT] for m in dead} == {junk_subject}
    assert projector.dead_letters == 3
    assert changes_positions(side.conn, side.schema) == [
        p for p in range(1, last + 1) if p != refused]
    assert _count(side, "messages") == 2
    assert [i.content for i in views.items(side.conn, side.schema, TENANT, SPACE,
                                           _latest(side))] == ["still here"]


def _document(event_store: PostgresEventStore, position: int) -> bytes:
    return event_store.read_all(position - 1, 1)[0].document()


async def test_an_event_missing_a_payload_field_is_dead_lettered_not_fatal(
        engines: Endpoints, event_store: PostgresEventStore, writer: GroupCommitWriter,
        side: ReadSide, subjects: Subjects, nats_js: Nats) -> None:
    _, js = nats_js
    session = await open_session(writer)
    event_store.append([envelope(uuid4(), 1, payload={"item_id": str(uuid4()),
                                                      "content": "no kind"})])
    await write(writer, message(session, "after it"))
    await _relay_all(event_store, js, subjects)
    last = event_store.max_position()
    connections = Connections(engines.postgres_dsn)
    projector = Projector(connections.connect, js, subjects, side.names)
    try:
        await projector.handle(await _fetch(await _subscribe(js, subjects), last))
    finally:
        connections.close()

    assert projector.dead_letters == 1
    assert side.position() == last


# --- order after a transient failure ------------------------------------------------------

async def test_a_batch_whose_connection_is_lost_is_retried_in_place_and_nothing_is_skipped(
        engines: Endpoints, event_store: PostgresEventStore, writer: GroupCommitWriter,
        side: ReadSide, subjects: Subjects, nats_js: Nats) -> None:
    _, js = nats_js
    await write(writer, c.CreateSpace(space_id=SPACE))
    await write(writer, c.AssertMemory(space_id=SPACE, kind="fact", content="first"))
    await _relay_all(event_store, js, subjects)
    connections = Connections(engines.postgres_dsn, dead_first=True)
    projector = Projector(connections.connect, js, subjects, side.names)
    sub = await _subscribe(js, subjects)
    try:
        # the first connection is dead: the batch is retried in place (never nak'd, which
        # would let later events overtake it and the checkpoint then skip it)
        await projector.handle(await _fetch(sub, 2))
        assert side.position() == 2
        await write(writer, c.AssertMemory(space_id=SPACE, kind="fact", content="second"))
        await _relay_all(event_store, js, subjects)
        await projector.handle(await _fetch(sub, 1))
    finally:
        connections.close()

    assert side.position() == event_store.max_position()
    contents = [i.content for i in views.items(side.conn, side.schema, TENANT, SPACE,
                                               _latest(side))]
    assert sorted(contents) == ["first", "second"]


# --- a projector killed between its write and its ack -------------------------------------

# A projector process of its own. Its store is wrapped (test-only, in the script) so that once
# the checkpoint reaches a position it stops right after a commit, before the ack: the SIGKILL
# from the test then lands exactly between the write and the ack.
_PROJECTOR_SCRIPT = """
import asyncio, sys, time
from memledger_platform.settings import Settings
from memledger_projector import bootstrap
from memledger_projector.core import store

schema_name, prefix, dsn, url, hang_from = sys.argv[1:]
apply_batch = store.apply_batch

def apply_then_hang(conn, names, events, stream_seq=None, partition=None):
    checkpoint = apply_batch(conn, names, events, stream_seq, partition)
    if checkpoint.position >= int(hang_from):
        print("committed", checkpoint.position, flush=True)
        time.sleep(3600)  # held between the commit and the ack until the test's SIGKILL
    return checkpoint

store.apply_batch = apply_then_hang
settings = Settings(postgres_schema=schema_name, nats_prefix=prefix, projector_batch=50)
asyncio.run(bootstrap.serve(settings, dsn, url, asyncio.Event()))
"""
KILL_AT = 1_000


async def _many_events(writer: GroupCommitWriter) -> None:
    """About 2,000 events over two tenants and two spaces each: items asserted, revised (some
    with a valid interval), retracted, superseded and archived; conversation turns; a graph."""
    scopes = [(t, s) for t in TENANTS for s in SPACES]
    sessions: dict[tuple[str, str], UUID] = {}
    for tenant, space in scopes:
        sessions[(tenant, space)] = await open_session(writer, tenant, space)
    items = [(UUID(int=i + 1), *scopes[i % 4]) for i in range(800)]

    async def each(commands: list[tuple[str, c.CommandBase]]) -> None:
        await asyncio.gather(*(writer.submit(t, [cmd]) for t, cmd in commands))

    await each([(t, c.AssertMemory(space_id=s, item_id=i, kind="fact", content=f"{i.int}",
                                   valid_from=Y2020, tags=(f"k{i.int % 5}",)))
                for i, t, s in items])
    await each([(t, c.ReviseMemory(space_id=s, item_id=i, content=f"{i.int} revised",
                                   valid_from=Y2022 if i.int % 2 else None,
                                   valid_to=None if i.int % 2 else datetime(2999, 1, 1,
                                                                            tzinfo=UTC)))
                for i, t, s in items[:600]])
    await each([(t, message(sessions[(t, s)], f"turn {n}", space=s))
                for n, (t, s) in enumerate(scopes * 100)])
    await each([(t, c.RetractMemory(space_id=s, item_id=i, valid_until=Y2022))
                for i, t, s in items[:100]]
               + [(t, c.ArchiveMemory(space_id=s, item_id=i, reason="policy"))
                  for i, t, s in items[100:160]]
               + [(t, c.SupersedeMemory(space_id=s, item_id=i, superseded_by=items[k + 4][0],
                                        reason="newer"))
                  for k, (i, t, s) in enumerate(items[200:240], start=200)])


async def test_a_projector_killed_between_its_write_and_its_ack_is_resumed_exactly(
        engines: Endpoints, pg_schema: str, event_store: PostgresEventStore,
        writer: GroupCommitWriter, side: ReadSide, subjects: Subjects, nats_js: Nats) -> None:
    _, js = nats_js
    await _many_events(writer)
    total = event_store.max_position()
    await _relay_all(event_store, js, subjects)

    committed = await _run_until_hung_then_kill(engines, pg_schema, subjects)

    checkpoint = read_checkpoint(side.conn, side.schema)
    consumer = await js.consumer_info(subjects.events_stream, DURABLE)
    assert KILL_AT <= checkpoint.position == committed < total
    assert consumer.ack_floor.stream_seq < checkpoint.stream_seq  # written, never acked
    await _redeliver_promptly(js, subjects)

    async with running_projector(engines.postgres_dsn, js, subjects, side.names):
        await eventually(lambda: _reached(side, total), timeout=30)

    assert changes_positions(side.conn, side.schema) == list(range(1, total + 1))
    assert _count(side, "messages") == 400
    rebuilt = schema.create(side.conn, side.names, 2)
    with side.conn.transaction():
        store.apply_to(side.conn, rebuilt, events_of(read_everything(event_store)))
    assert snapshot(side.conn, side.schema, with_row_ids=False) == snapshot(
        side.conn, rebuilt, with_row_ids=False)
    _assert_like_a_replay(side, _latest(side), TENANTS, SPACES)
    _assert_like_a_replay(side, Basis(position=committed, recorded_at=None, valid_at=Y2020),
                          TENANTS, SPACES)


async def _run_until_hung_then_kill(engines: Endpoints, pg_schema: str, subjects: Subjects
                                    ) -> int:
    """Run the projector process until it has committed a batch at or past ``KILL_AT`` and
    not acked it; SIGKILL it; return the position it committed."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _PROJECTOR_SCRIPT, pg_schema, subjects.prefix,
        engines.postgres_dsn, engines.nats_url, str(KILL_AT),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), timeout=60)
        proc.send_signal(signal.SIGKILL)
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        _, errors = await proc.communicate()
    assert line.startswith(b"committed "), errors.decode()
    assert proc.returncode == -signal.SIGKILL
    return int(line.split()[1])


async def _redeliver_promptly(js: JetStreamContext, subjects: Subjects) -> None:
    # The dead projector's batch stays pending until the consumer's ack wait (60 s) expires;
    # a test need not wait that long, so the wait is shortened (the server allows the edit).
    config = (await js.consumer_info(subjects.events_stream, DURABLE)).config
    config.ack_wait = 1.0
    await js.add_consumer(subjects.events_stream, config)


def test_services_starting_together_prepare_the_projection_once_without_a_clash(
        engines: Endpoints, pg_schema: str) -> None:
    """The query service and the projector prepare the same schema as they start; at once,
    their CREATE ... IF NOT EXISTS statements clashed on the catalogue."""
    names = schema.Names(pg_schema)
    start = threading.Barrier(6)

    def prepare(_: int) -> int:
        with psycopg.connect(engines.postgres_dsn, autocommit=True) as conn:
            start.wait()
            return schema.prepare(conn, names)

    with ThreadPoolExecutor(6) as pool:
        assert list(pool.map(prepare, range(6))) == [1] * 6
