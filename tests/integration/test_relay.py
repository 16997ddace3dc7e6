"""The relay against a real event store and a real JetStream stream: what it publishes, that a
crash at any point neither loses nor repeats an event, and that the stream's guard stops it."""

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import AsyncIterator
from datetime import datetime
from uuid import uuid4

import orjson
import psycopg
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from memledger_platform.endpoints import Endpoints
from memledger_platform.eventstore.postgres import PostgresEventStore
from memledger_platform.stream_cursor import Cursor, RelayOutOfSync
from memledger_relay.relay import Relay
from memledger_schemas.envelope import EventEnvelope
from memledger_schemas.subjects import (
    HDR_EVENT_TYPE,
    HDR_MSG_ID,
    HDR_POSITION,
    HDR_SCHEMA_VERSION,
    HDR_TRACEPARENT,
    Subjects,
)
from tests.integration.events_support import envelope
from tests.integration.nats_support import message_count, sequence, stream_messages
from tests.support import eventually

Nats = tuple[Client, JetStreamContext]
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
CRASH_EVENTS = 3_000

# A relay process of its own. Its client's publish is slowed down a little (test-only, in the
# script) so that the SIGKILL from the test lands, most likely, in the middle of a batch.
_RELAY_SCRIPT = """
import asyncio, sys
from memledger_relay.relay import Relay
from memledger_platform import bus
from memledger_platform.eventstore.postgres import PostgresEventStore, datastore_from_dsn
from memledger_schemas.subjects import Subjects

async def main(dsn, schema, prefix, url):
    store = PostgresEventStore(datastore_from_dsn(dsn, schema=schema))
    nc = await bus.connect(url, "relay-to-be-killed")
    publish, sent = nc.publish, 0

    async def slow_publish(*args, **kwargs):
        nonlocal sent
        sent += 1
        if sent % 5 == 0:
            await asyncio.sleep(0.001)  # a batch takes long enough for the kill to land in it
        return await publish(*args, **kwargs)

    nc.publish = slow_publish
    relay = Relay(store, nc.jetstream(), Subjects(prefix), batch=100)
    relay.cursor = await relay.resume()
    while await relay.relay_once():
        pass
    print("finished before the kill", flush=True)
    await asyncio.Event().wait()

asyncio.run(main(*sys.argv[1:]))
"""


def _append_many(store: PostgresEventStore, count: int, chunk: int = 500) -> None:
    for start in range(0, count, chunk):
        store.append([envelope(uuid4(), 1, space=f"s{(start + i) % 7}")
                      for i in range(min(chunk, count - start))])


async def _relay_all(relay: Relay) -> int:
    moved = 0
    while batch := await relay.relay_once():
        moved += batch
    return moved


async def _assert_stream_holds_positions_1_to(js: JetStreamContext, subjects: Subjects,
                                              store: PostgresEventStore, last: int) -> None:
    msgs = await stream_messages(js, subjects.events_stream, subjects.all_events)
    assert [sequence(m) for m in msgs] == list(range(1, last + 1))
    assert [int((m.headers or {})[HDR_POSITION]) for m in msgs] == list(range(1, last + 1))
    event_ids = [str(e.fields()["event_id"]) for e in store.read_all(0, last)]
    assert [(m.headers or {})[HDR_MSG_ID] for m in msgs] == event_ids


async def test_relayed_events_carry_their_subject_headers_and_commit_fields_in_position_order(
        event_store: PostgresEventStore, subjects: Subjects, nats_js: Nats) -> None:
    _, js = nats_js
    space, item = uuid4(), uuid4()
    events = [envelope(space, 1, event_type="space.created", payload={"name": "main"}),
              envelope(item, 1, tenant="globex", space="s-2", traceparent=TRACEPARENT),
              envelope(space, 2, event_type="space.archived", payload={})]
    committed = event_store.append(events)
    relay = Relay(event_store, js, subjects, batch=2)

    assert [await relay.relay_once() for _ in range(3)] == [2, 1, 0]

    assert (relay.cursor.position, relay.cursor.sequence) == (committed[-1].position, 3)
    for seq, (event, commit) in enumerate(zip(events, committed, strict=True), start=1):
        msg = await js.get_msg(subjects.events_stream, seq)
        headers = msg.headers or {}
        assert msg.subject == f"{subjects.prefix}.evt.{event.tenant_id}.{event.space_id}." \
                              f"{event.event_type}"
        assert headers[HDR_MSG_ID] == str(event.event_id)
        assert headers[HDR_POSITION] == str(commit.position) == str(seq)
        assert headers[HDR_SCHEMA_VERSION] == "1"
        assert headers[HDR_EVENT_TYPE] == event.event_type
        # the write's trace (the relay's publish span in it, when tracing is on)
        assert _trace_of(headers.get(HDR_TRACEPARENT)) == _trace_of(event.traceparent)
        assert msg.data is not None
        body = orjson.loads(msg.data)
        assert body["global_position"] == commit.position
        assert datetime.fromisoformat(body["recorded_at"]) == commit.recorded_at
        assert EventEnvelope.model_validate_json(msg.data) == event.model_copy(update={
            "global_position": commit.position, "recorded_at": commit.recorded_at})


async def test_a_restarted_relay_resumes_after_the_streams_last_message_without_repeats(
        event_store: PostgresEventStore, subjects: Subjects, nats_js: Nats) -> None:
    _, js = nats_js
    _append_many(event_store, 30)
    assert await Relay(event_store, js, subjects, batch=20).relay_once() == 20
    _append_many(event_store, 5)

    again = Relay(event_store, js, subjects, batch=20)
    again.cursor = await again.resume()
    assert (again.cursor.position, again.cursor.sequence) == (20, 20)
    assert await _relay_all(again) == 15

    await _assert_stream_holds_positions_1_to(js, subjects, event_store, 35)


async def test_a_relay_with_a_stale_cursor_is_refused_by_the_stream_and_repeats_nothing(
        event_store: PostgresEventStore, subjects: Subjects, nats_js: Nats) -> None:
    _, js = nats_js
    _append_many(event_store, 10)
    assert await _relay_all(Relay(event_store, js, subjects)) == 10

    stale = Relay(event_store, js, subjects, batch=4)  # believes the stream is empty
    with pytest.raises(RelayOutOfSync):
        await asyncio.wait_for(stale.relay_once(), timeout=10)

    await _assert_stream_holds_positions_1_to(js, subjects, event_store, 10)
    assert stale.cursor == Cursor()


async def test_a_relay_killed_mid_batch_is_resumed_by_a_fresh_one_with_every_event_once_in_order(
        engines: Endpoints, pg_schema: str, event_store: PostgresEventStore,
        subjects: Subjects, nats_js: Nats) -> None:
    _, js = nats_js
    _append_many(event_store, CRASH_EVENTS)
    killed = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _RELAY_SCRIPT, engines.postgres_dsn, pg_schema, subjects.prefix,
        engines.nats_url, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        async def mid_way() -> None:
            if killed.returncode is not None:
                _, errors = await killed.communicate()
                raise RuntimeError(f"the relay process ended early: {errors.decode()}")
            count = await message_count(js, subjects.events_stream)
            assert 250 <= count < CRASH_EVENTS

        await eventually(mid_way, timeout=30, interval=0.005)
        killed.send_signal(signal.SIGKILL)
    finally:
        if killed.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                killed.kill()
        output, errors = await killed.communicate()
    assert killed.returncode == -signal.SIGKILL, errors.decode()
    assert b"finished" not in output
    at_kill = await _settled_count(js, subjects)
    assert at_kill < CRASH_EVENTS

    fresh = Relay(event_store, js, subjects, batch=100)
    fresh.cursor = await fresh.resume()
    assert (fresh.cursor.position, fresh.cursor.sequence) == (at_kill, at_kill)
    assert await _relay_all(fresh) == CRASH_EVENTS - at_kill

    await _assert_stream_holds_positions_1_to(js, subjects, event_store, CRASH_EVENTS)


async def test_a_foreign_message_in_the_events_stream_stops_the_relay_before_it_publishes(
        event_store: PostgresEventStore, subjects: Subjects, nats_js: Nats) -> None:
    _, js = nats_js
    _append_many(event_store, 3)
    relay = Relay(event_store, js, subjects)
    assert await _relay_all(relay) == 3
    await js.publish(subjects.event("acme", "main", "someone.else"), b'{"not": "ours"}')
    _append_many(event_store, 2)

    with pytest.raises(RelayOutOfSync):
        await asyncio.wait_for(relay.relay_once(), timeout=10)

    msgs = await stream_messages(js, subjects.events_stream, subjects.all_events)
    assert [(m.headers or {}).get(HDR_POSITION) for m in msgs] == ["1", "2", "3", None]
    assert (relay.cursor.position, relay.cursor.sequence) == (3, 3)


async def test_a_relay_started_on_a_stream_holding_a_foreign_message_publishes_nothing(
        event_store: PostgresEventStore, subjects: Subjects, nats_js: Nats) -> None:
    _, js = nats_js
    await js.publish(subjects.event("acme", "main", "someone.else"), b"{}")
    _append_many(event_store, 3)
    relay = Relay(event_store, js, subjects)

    with pytest.raises(RelayOutOfSync):
        await asyncio.wait_for(relay.relay_once(), timeout=10)
    with pytest.raises(RelayOutOfSync, match="not published by the relay"):
        await relay.resume()

    assert await message_count(js, subjects.events_stream) == 1


async def test_a_running_relay_survives_a_foreign_message_and_carries_on_once_it_is_removed(
        event_store: PostgresEventStore, subjects: Subjects, nats_js: Nats,
        caplog: pytest.LogCaptureFixture) -> None:
    _, js = nats_js
    async with running_relay(event_store, js, subjects) as task:
        _append_many(event_store, 2)
        await eventually(lambda: _count_is(js, subjects, 2))
        foreign = await js.publish(subjects.event("acme", "main", "someone.else"), b"{}")
        _append_many(event_store, 2)
        await eventually(lambda: _relay_complained(task, caplog))
        assert await message_count(js, subjects.events_stream) == 3

        await js.delete_msg(subjects.events_stream, foreign.seq)

        await eventually(lambda: _count_is(js, subjects, 4), timeout=5)
        assert not task.done()
    msgs = await stream_messages(js, subjects.events_stream, subjects.all_events)
    assert [(m.headers or {}).get(HDR_POSITION) for m in msgs] == ["1", "2", "3", "4"]


async def test_the_running_relay_keeps_relaying_after_its_database_connections_drop(
        engines: Endpoints, event_store: PostgresEventStore, subjects: Subjects,
        nats_js: Nats, caplog: pytest.LogCaptureFixture) -> None:
    _, js = nats_js
    async with running_relay(event_store, js, subjects) as task:
        _append_many(event_store, 1)
        await eventually(lambda: _count_is(js, subjects, 1))
        _drop_other_connections(engines.postgres_dsn)
        await eventually(lambda: _relay_complained(task, caplog))  # it met a dead connection
        _append_many(event_store, 1)  # the store's append retries on a fresh connection

        await eventually(lambda: _count_is(js, subjects, 2), timeout=15)
        assert not task.done()
    await _assert_stream_holds_positions_1_to(js, subjects, event_store, 2)


async def _relay_complained(task: "asyncio.Task[None]", caplog: pytest.LogCaptureFixture
                                 ) -> None:
    assert not task.done()
    assert any(r.name == "memledger_relay.relay" and r.levelno == logging.WARNING
               for r in caplog.records)


async def _settled_count(js: JetStreamContext, subjects: Subjects) -> int:
    """The stream's message count once it stops changing (a killed client's last bytes may
    still be in the server's socket buffer)."""
    seen: list[int] = []

    async def unchanged() -> int:
        seen.append(await message_count(js, subjects.events_stream))
        assert len(seen) >= 3
        assert seen[-1] == seen[-2] == seen[-3]
        return seen[-1]

    return await eventually(unchanged, interval=0.1)


async def _count_is(js: JetStreamContext, subjects: Subjects, expected: int) -> None:
    assert await message_count(js, subjects.events_stream) == expected


def _drop_other_connections(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                     "datname = current_database() AND pid <> pg_backend_pid() "
                     "AND backend_type = 'client backend'")


@contextlib.asynccontextmanager
async def running_relay(store: PostgresEventStore, js: JetStreamContext, subjects: Subjects
                        ) -> AsyncIterator["asyncio.Task[None]"]:
    """A relay running (polling fast) until the block ends; yields its task."""
    relay, stop = Relay(store, js, subjects, poll_seconds=0.02), asyncio.Event()
    task = asyncio.create_task(relay.run(stop))
    try:
        yield task
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=10)


def _trace_of(traceparent: str | None) -> str | None:
    return traceparent.split("-")[1] if traceparent else None
