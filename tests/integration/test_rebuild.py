"""Blue/green rebuild: the rebuilt model equals the live one, and reads carry on meanwhile."""

from collections.abc import Iterator
from typing import Any
from uuid import UUID

import orjson
import psycopg
import pytest
from psycopg import sql

from memledger_ingest.core.writer import GroupCommitWriter
from memledger_platform.crypto import MemoryKeyring, Opener, is_sealed, seal_payload
from memledger_platform.endpoints import Endpoints
from memledger_platform.events import decode
from memledger_platform.eventstore.opened import OpenedEventStore
from memledger_platform.eventstore.postgres import PostgresEventStore
from memledger_platform.ids import uuid7
from memledger_platform.readmodel import schema
from memledger_platform.readmodel.checkpoint import read_checkpoint
from memledger_projector.core import rebuild, store
from memledger_schemas import commands as c
from memledger_schemas.envelope import EventEnvelope
from memledger_schemas.events import ExtractedEntity


@pytest.fixture
def conn(engines: Endpoints, pg_schema: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(engines.postgres_dsn, autocommit=True) as connection:
        yield connection
        for version in range(1, 5):
            connection.execute(f'DROP SCHEMA IF EXISTS "{pg_schema}_rm_{version}" CASCADE')


async def _history(event_store: PostgresEventStore) -> None:
    writer = GroupCommitWriter(event_store)
    writer.start()
    try:
        await writer.submit("t", [c.CreateSpace(space_id="s")])
        session = UUID((await writer.submit("t", [c.StartSession(space_id="s")]))[0]
                       .ids["session_id"])
        for i in range(40):
            item = UUID(int=i + 1)
            await writer.submit("t", [
                c.AssertMemory(space_id="s", item_id=item, kind="fact", content=f"f{i}",
                               session_id=session),
                c.AppendMessage(space_id="s", session_id=session, role="user",
                                content=f"m{i}")])
            # mentions: in enrichment streams, so a parallel rebuild folds some in its worker
            await writer.submit("t", [c.RecordEntities(
                space_id="s", item_id=item, item_version=1, extractor="test",
                entities=tuple(ExtractedEntity(name=f"E{i}-{n}", type="t")
                               for n in range(i % 3)))])
            if i % 3 == 0:
                await writer.submit("t", [c.ReviseMemory(space_id="s", item_id=item,
                                                         content=f"g{i}")])
            if i % 7 == 0:
                await writer.submit("t", [c.RetractMemory(space_id="s", item_id=item)])
    finally:
        writer.stop()


@pytest.fixture
async def live(conn: psycopg.Connection[Any], event_store: PostgresEventStore,
               pg_schema: str) -> schema.Names:
    """A history written and projected into the live version (1)."""
    names = schema.Names(pg_schema)
    schema.ensure_pointer(conn, names)
    await _history(event_store)
    _project_live(conn, event_store, names)
    return names


def _project_live(conn: psycopg.Connection[Any], event_store: PostgresEventStore,
                  names: schema.Names) -> None:
    events = event_store.read_all(0, 100_000)
    store.apply_batch(conn, names, [decode(orjson.loads(e.document())) for e in events])


async def test_a_rebuilt_model_hashes_equal_to_the_live_one_and_becomes_live(
        conn: psycopg.Connection[Any], event_store: PostgresEventStore,
        live: schema.Names) -> None:
    names = live
    seen: list[tuple[int, int]] = []

    result = rebuild.rebuild(conn, event_store, names, lambda at, of: seen.append((at, of)))

    assert (result.previous, result.version) == (1, 2)
    assert schema.live_version(conn, names) == 2
    assert rebuild.model_hash(conn, names.schema(2)) == rebuild.model_hash(conn, names.schema(1))
    assert result.position == event_store.max_position()
    assert seen
    assert seen[-1][0] == event_store.max_position()


@pytest.mark.parametrize("built", ["live", "rebuilt"])
async def test_the_schema_refuses_two_current_rows_of_an_item_that_overlap_in_valid_time(
        conn: psycopg.Connection[Any], event_store: PostgresEventStore,
        live: schema.Names, built: str) -> None:
    """Enforced by the table, whoever writes it: the live version creates the constraint
    with its tables, a rebuild adds it after its bulk load."""
    version = 1 if built == "live" else rebuild.rebuild(conn, event_store, live).version
    target = sql.Identifier(live.schema(version))
    item, other = uuid7(), uuid7()

    def insert(tenant: str, item_id: UUID, valid: str, sys_to: int | None = None) -> None:
        conn.execute(sql.SQL(
            "INSERT INTO {}.item_versions (tenant_id, item_id, valid, sys_from, sys_to, attrs, "
            "cause) VALUES (%s, %s, %s::tstzrange, 1, %s, '{{}}', '{{}}')").format(target),
            (tenant, item_id, valid, sys_to))

    insert("t", item, "[2026-01-01,2026-03-01)")
    insert("t", item, "[2026-03-01,2026-05-01)")  # touching: [from, to) is half-open
    insert("t", item, "[2026-02-01,2026-04-01)", sys_to=2)  # overlapping, but closed
    insert("t", other, "[2026-02-01,2026-04-01)")  # another item
    insert("u", item, "[2026-02-01,2026-04-01)")  # the same id in another tenant

    with pytest.raises(psycopg.errors.ExclusionViolation, match="current_rows_never_overlap"):
        insert("t", item, "[2026-04-15,2026-06-01)")


async def test_rebuilding_twice_gives_the_same_model_and_keeps_one_previous_version(
        conn: psycopg.Connection[Any], event_store: PostgresEventStore,
        live: schema.Names) -> None:
    names = live
    rebuild.rebuild(conn, event_store, names)
    second = rebuild.rebuild(conn, event_store, names)

    assert second.version == 3
    assert rebuild.model_hash(conn, names.schema(3)) == rebuild.model_hash(conn, names.schema(2))
    present = {row[0] for row in conn.execute(
        "SELECT schema_name FROM information_schema.schemata WHERE schema_name LIKE %s",
        (f"{names.base}_rm_%",))}
    assert present == {names.schema(2), names.schema(3)}


async def test_events_written_during_a_rebuild_reach_the_new_model(
        conn: psycopg.Connection[Any], event_store: PostgresEventStore,
        live: schema.Names) -> None:
    names = live
    late: list[int] = []

    def write_while_rebuilding(at: int, of: int) -> None:
        if not late:  # once, mid-rebuild: a commit the rebuild has not read yet
            committed = event_store.append([_late_event()])
            late.append(committed[0].position)

    rebuild.rebuild(conn, event_store, names, write_while_rebuilding)

    assert read_checkpoint(conn, names.schema(2)).position >= late[0]


def _late_event() -> EventEnvelope:
    return EventEnvelope(event_id=uuid7(), event_type="space.created", schema_version=1,
                         stream_id=uuid7(), stream_version=1, tenant_id="t", space_id="late",
                         actor="test", payload={})


async def test_a_rebuild_that_meets_an_unappliable_event_stops_and_says_where(
        conn: psycopg.Connection[Any], event_store: PostgresEventStore,
        live: schema.Names) -> None:
    names = live
    bad = event_store.append([EventEnvelope(
        event_id=uuid7(), event_type="memory.asserted", schema_version=1, stream_id=uuid7(),
        stream_version=1, tenant_id="t", space_id="s", actor="test", payload={})])

    with pytest.raises(rebuild.RebuildStopped, match=f"{bad[0].position}"):
        rebuild.rebuild(conn, event_store, names)

    assert schema.live_version(conn, names) == 1


async def test_the_live_model_answers_reads_while_a_rebuild_runs(
        conn: psycopg.Connection[Any], event_store: PostgresEventStore, engines: Endpoints,
        live: schema.Names) -> None:
    answers: list[int] = []
    with psycopg.connect(engines.postgres_dsn, autocommit=True) as reader:

        def read_meanwhile(at: int, of: int) -> None:
            # another connection, mid-rebuild: the live version still answers
            version = schema.live_version(reader, live)
            answers.append(read_checkpoint(reader, live.schema(version)).position)

        rebuild.rebuild(conn, event_store, live, read_meanwhile)

    assert answers
    assert all(position == event_store.max_position() for position in answers)


async def test_a_rebuild_folded_in_two_processes_equals_one_folded_in_one(
        conn: psycopg.Connection[Any], event_store: PostgresEventStore,
        live: schema.Names) -> None:
    names = live
    seen: list[tuple[int, int]] = []
    two = rebuild.rebuild(conn, event_store, names, lambda at, of: seen.append((at, of)),
                          parallel=True)
    assert rebuild.model_hash(conn, names.schema(2)) == rebuild.model_hash(
        conn, names.schema(1))

    one = rebuild.rebuild(conn, event_store, names, parallel=False)

    assert (two.processes, one.processes) == (2, 1)
    assert rebuild.model_hash(conn, names.schema(3)) == rebuild.model_hash(
        conn, names.schema(2))
    assert seen[-1][0] == event_store.max_position()


async def test_only_the_switch_waits_for_its_commit_to_reach_the_disk(
        conn: psycopg.Connection[Any], event_store: PostgresEventStore, live: schema.Names,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The bulk writes go to a schema nobody reads yet; the switch's commit, awaited, puts
    # them on disk with it. The caller's own setting comes back afterwards.
    conn.execute("SET synchronous_commit = remote_apply")
    seen: dict[str, str] = {}

    def setting() -> str:
        row = conn.execute("SHOW synchronous_commit").fetchone()
        assert row is not None
        return str(row[0])

    def spy(name: str, original: Any) -> Any:
        def called(*args: Any, **kwargs: Any) -> Any:
            seen[name] = setting()
            return original(*args, **kwargs)
        return called

    monkeypatch.setattr(rebuild, "_add_indexes", spy("indexes", rebuild._add_indexes))
    monkeypatch.setattr(schema, "switch", spy("switch", schema.switch))

    rebuild.rebuild(conn, event_store, live, parallel=True)

    assert seen == {"indexes": "off", "switch": "remote_apply"}
    assert setting() == "remote_apply"


async def test_an_item_whose_events_span_streams_is_folded_in_one_process_with_the_same_result(
        conn: psycopg.Connection[Any], event_store: PostgresEventStore,
        live: schema.Names) -> None:
    names = live
    item = str(UUID(int=1_000))
    event_store.append([_memory("memory.asserted", _stream(to_worker=True), {
        "item_id": item, "kind": "fact", "content": "asserted"})])
    event_store.append([_memory("memory.revised", _stream(to_worker=False), {
        "item_id": item, "content": "revised"})])
    rebuild.rebuild(conn, event_store, names, parallel=False)

    result = rebuild.rebuild(conn, event_store, names, parallel=True)

    assert result.processes == 1
    assert rebuild.model_hash(conn, names.schema(3)) == rebuild.model_hash(
        conn, names.schema(2))


async def test_an_unappliable_event_in_the_fold_workers_part_stops_the_rebuild_and_says_where(
        conn: psycopg.Connection[Any], event_store: PostgresEventStore,
        live: schema.Names) -> None:
    names = live
    bad = event_store.append([_memory("memory.asserted", _stream(to_worker=True), {})])

    with pytest.raises(rebuild.RebuildStopped, match=f"{bad[0].position}"):
        rebuild.rebuild(conn, event_store, names, parallel=True)

    assert schema.live_version(conn, names) == 1


async def test_the_fold_worker_opens_its_sealed_items_with_the_keys_it_asks_for(
        conn: psycopg.Connection[Any], event_store: PostgresEventStore,
        live: schema.Names) -> None:
    names = live
    keyring = MemoryKeyring()
    kept, erased = (keyring.for_writing("t", who, "s") for who in ("kept", "erased"))
    for key, to_worker in ((kept, True), (kept, False), (erased, True)):
        envelope = _memory("memory.asserted", _stream(to_worker=to_worker), {
            "item_id": str(uuid7()), "kind": "fact", "content": f"by {key.key_id}"})
        event_store.append([envelope.model_copy(update={"payload": seal_payload(
            envelope.payload, envelope.event_type, str(envelope.event_id), key)})])
    keyring.destroy("t", "erased")
    opened = OpenedEventStore(event_store, Opener(keyring))

    one = rebuild.rebuild(conn, opened, names, parallel=False)
    two = rebuild.rebuild(conn, opened, names, parallel=True)

    assert (one.processes, two.processes) == (1, 2)
    assert rebuild.model_hash(conn, names.schema(3)) == rebuild.model_hash(
        conn, names.schema(2))
    contents = {r[0] for r in conn.execute(sql.SQL(
        "SELECT attrs->>'content' FROM {}.item_versions").format(
        sql.Identifier(names.schema(3)))).fetchall()}
    assert f"by {kept.key_id}" in contents
    assert f"by {erased.key_id}" not in contents
    assert not [c for c in contents if is_sealed(c)]


class _Unreachable(MemoryKeyring):
    """A keyring whose store fails for one key."""

    def __init__(self, failing: str) -> None:
        super().__init__()
        self.failing = failing

    def key(self, key_id: str) -> bytes | None:
        if key_id == self.failing:
            raise RuntimeError("keyring unreachable")
        return super().key(key_id)


async def test_a_key_the_fold_worker_cannot_get_stops_the_rebuild_and_says_why(
        conn: psycopg.Connection[Any], event_store: PostgresEventStore,
        live: schema.Names) -> None:
    names = live
    keyring = _Unreachable("")
    key = keyring.for_writing("t", "someone", "s")
    keyring.failing = key.key_id
    envelope = _memory("memory.asserted", _stream(to_worker=True), {
        "item_id": str(uuid7()), "kind": "fact", "content": "sealed"})
    event_store.append([envelope.model_copy(update={"payload": seal_payload(
        envelope.payload, envelope.event_type, str(envelope.event_id), key)})])

    # as when the rebuild itself cannot open an event: it stops at that event's batch
    with pytest.raises(rebuild.RebuildStopped,
                       match=r"could not look up subject keys.*keyring unreachable"):
        rebuild.rebuild(conn, OpenedEventStore(event_store, Opener(keyring)), names,
                        parallel=True)

    assert schema.live_version(conn, names) == 1


def _stream(*, to_worker: bool) -> UUID:
    """A stream id whose memory events a parallel rebuild routes to its fold worker, or not."""
    while rebuild.routed_to_worker(stream := uuid7(), "memory.asserted") != to_worker:
        pass
    return stream


def _memory(event_type: str, stream: UUID, payload: dict[str, Any]) -> EventEnvelope:
    return EventEnvelope(event_id=uuid7(), event_type=event_type, schema_version=1,
                         stream_id=stream, stream_version=1, tenant_id="t", space_id="s",
                         actor="test", payload=payload)
