"""The ``EventStore`` contract against PostgreSQL (one fresh schema per test)."""

import base64
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC
from typing import Any
from uuid import UUID

import orjson
import psycopg
import pytest
from psycopg import sql

from memledger_platform.endpoints import Endpoints
from memledger_platform.eventstore import EventStore, RecordedEvent, StreamConflict
from memledger_platform.eventstore.postgres import (
    PostgresEventStore,
    datastore_from_dsn,
    found_keys_query,
)
from memledger_platform.logshare import StreamShare
from tests.integration.events_support import envelope, read_everything

pytest.register_assert_rewrite("tests.integration.eventstore_contract")
from tests.integration.eventstore_contract import EventStoreContract, key_record  # noqa: E402


class TestPostgresEventStore(EventStoreContract):
    @pytest.fixture
    def store(self, event_store: PostgresEventStore) -> EventStore:
        return event_store

    @pytest.fixture
    def two_partitions(self, engines: Endpoints, pg_schema: str
                       ) -> Iterator[PostgresEventStore]:
        store = PostgresEventStore(datastore_from_dsn(engines.postgres_dsn, schema=pg_schema),
                                   partitions=2)
        store.create_tables()
        yield store
        store.close()


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


def test_two_shares_of_the_log_read_by_the_server_hold_every_event_once_by_stream(
        event_store: PostgresEventStore) -> None:
    """A parallel rebuild's two processes each read their share from the server: the shares
    split the log by stream (its last byte) and event type, as ``StreamShare.holds`` says."""
    streams = [UUID(int=n * 0x1_0000_0000_0000_0001) for n in range(1, 40)]
    for n, stream in enumerate(streams):
        event_type = ("memory.asserted", "memory_asserted", "memoryXasserted",
                      "session.started")[n % 4]
        event_store.append([envelope(stream, 1, event_type=event_type),
                            envelope(stream, 2, event_type=event_type)])
    share = StreamShare("memory.", 5, 2)
    until = event_store.max_position() - 2  # the last stream's two events are left out
    stored = {e.position: e for e in read_everything(event_store) if e.position <= until}

    theirs = _pages(event_store, until, share, stored)
    mine = _pages(event_store, until, share.other(), stored)

    assert sorted(theirs + mine, key=lambda e: e.position) == list(stored.values())
    assert theirs
    assert all(share.holds(e.stream_id, e.event_type) for e in theirs)
    assert all(e.event_type == "memory.asserted" for e in theirs)
    assert not any(share.holds(e.stream_id, e.event_type) for e in mine)
    assert {e.stream_id for e in theirs}.isdisjoint({e.stream_id for e in mine})
    # a prefix is matched as it is written ("_" is not LIKE's any-character)
    literal = _pages(event_store, until, StreamShare("memory_", 1, 1), stored)
    assert literal
    assert {e.event_type for e in literal} == {"memory_asserted"}


def _pages(event_store: PostgresEventStore, until: int, share: StreamShare,
           stored: dict[int, RecordedEvent]) -> list[RecordedEvent]:
    """The share, read in pages of 3 (more than one page, and a short last one), each
    record checked against the event stored at its position, and that event returned."""
    found: list[RecordedEvent] = []
    while page := event_store.read_share(found[-1].position if found else 0, until, 3, share):
        assert len(page) <= 3
        for position, recorded_at, data in page:
            event = stored[position]
            assert (recorded_at, data) == (event.recorded_at, event.data)
            assert recorded_at.tzinfo is UTC  # whatever the server's zone is named
            found.append(event)
    return found


def test_a_store_opened_at_its_address_reads_the_same_log(
        event_store: PostgresEventStore) -> None:
    event_store.append([envelope(UUID(int=7), 1)])
    elsewhere = PostgresEventStore.at(event_store.address())
    try:
        assert elsewhere.read_all(0, 10) == event_store.read_all(0, 10)
    finally:
        elsewhere.close()


def test_a_refused_append_is_named_as_such_and_the_connection_goes_on(
        event_store: PostgresEventStore) -> None:
    """An append and its COMMIT go as one pipeline: when a statement fails, the ones after
    it are skipped (``PipelineAborted``), the transaction is rolled back, and the failure is
    still reported as the conflict it was, every time, never retried as a lost connection."""
    event_store.append([envelope(UUID(int=8), 1)])
    for _ in range(6):  # more than the pool's connections: each was left usable
        with pytest.raises(StreamConflict):
            event_store.append([envelope(UUID(int=9), 1), envelope(UUID(int=8), 1)])
    assert [e.stream_id for e in event_store.read_all(0, 10)] == [UUID(int=8)]
    event_store.append([envelope(UUID(int=9), 1)])
    assert event_store.read_streams([UUID(int=9)])[UUID(int=9)][0].stream_version == 1


def _scalar(store: PostgresEventStore, query: str, *params: object) -> object:
    with psycopg.connect(store.address().conninfo, autocommit=True) as conn:
        row = conn.execute(query, params).fetchone()
    return None if row is None else row[0]


def test_an_event_of_a_few_kilobytes_is_kept_in_its_row_and_read_back_whole(
        event_store: PostgresEventStore) -> None:
    """An imported embedding's event, sealed, is about 6 KB of incompressible text: kept in
    its row rather than split into the TOAST table's chunks, and read back byte for byte."""
    sealed = base64.urlsafe_b64encode(os.urandom(4_500)).decode()
    event_store.append([envelope(UUID(int=10), 1, payload={"vector": sealed})])
    schema, table = event_store.address().schema, event_store.address().table
    toasted = _scalar(event_store, "SELECT pg_relation_size(reltoastrelid) FROM pg_class "
                      "WHERE oid = %s::regclass", f'"{schema}"."{table}"')
    assert toasted == 0
    [stored] = event_store.read_all(0, 10)
    assert orjson.loads(stored.data)["payload"]["vector"] == sealed


BATCHES = 20
"""Appends of 500 events, each of its own stream and key: a log of 10,000 events of a page
each, past the size at which the planner scanned it for a join."""


def test_looking_up_keys_reads_only_the_events_of_the_keys_found_not_the_whole_log(
        event_store: PostgresEventStore) -> None:
    """A batch's keys are looked up before every write: what that costs must not grow with
    the log. The plan reads the events table by its streams' key, never scans it, for keys
    new and known alike (a batch of 500 commands looks up about 1,000), with events the size
    of an import's (a sealed embedding: a few kilobytes, a page each)."""
    vector = base64.urlsafe_b64encode(os.urandom(4_500)).decode()
    for batch in range(BATCHES):
        streams = [UUID(int=batch * 500 + i + 1) for i in range(500)]
        event_store.append([envelope(s, 1, payload={"vector": vector}) for s in streams],
                           [key_record("acme", f"k{s.int}", s, 1, 1) for s in streams])
    keys = [f"k{i}" for i in range(1, BATCHES * 500, BATCHES)] + [f"new-{i}" for i in range(500)]
    schema, table = event_store.address().schema, event_store.address().table
    # Not analyzed, as a growing log often is between autovacuum's runs.
    with psycopg.connect(event_store.address().conninfo, autocommit=True) as conn:
        [[plan]] = conn.execute(
            sql.SQL("EXPLAIN (FORMAT JSON) ") + found_keys_query(
                (sql.Identifier(schema), sql.Identifier(table),
                 sql.Identifier(f"{table}_idempotency"))), ("acme", keys)).fetchall()
    assert table not in _scanned(plan[0]["Plan"])
    found = event_store.find_idempotent("acme", keys)
    assert len(found) == 500
    assert found["k21"].positions == (21,)


def _scanned(node: dict[str, Any]) -> set[str]:
    """The tables a plan reads whole (a sequential scan, parallel or not)."""
    own = {node["Relation Name"]} if "Seq Scan" in node["Node Type"] else set()
    return own.union(*(_scanned(child) for child in node.get("Plans", [])))
