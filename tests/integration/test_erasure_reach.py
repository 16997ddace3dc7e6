"""Everything a data subject's data reaches is sealed under that subject, so that erasing it
leaves the data nowhere: a token written into a memory (its content, tags and a revision's
reason), a message, a session's title, an entity, feedback, a preference, idempotency keys and
two audited queries (a search that showed the subject's memory, a context call in the
subject's session) is never in the clear in the event store or JetStream, and after the
erasure is in no HTTP read, no gRPC change page, no ``memledger replay`` output, no tuple
(live or dead) of the read models (both versions a rebuild keeps) or the key table, no planner
statistic and no write-ahead log file; and the receipt says what was vacuumed."""

import argparse
import asyncio
import base64
import os
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import grpc
import psycopg
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from psycopg import sql
from psycopg_pool import ConnectionPool

from memledger_cli import operators
from memledger_ingest.core.erasure import Erasure
from memledger_ingest.core.writer import GroupCommitWriter
from memledger_platform import grpc_server, pg_vacuum
from memledger_platform.auth import Gate
from memledger_platform.crypto import Opener
from memledger_platform.embedding.embedder import HashingEmbedder
from memledger_platform.endpoints import Endpoints
from memledger_platform.eventstore.opened import OpenedEventStore
from memledger_platform.eventstore.postgres import PostgresEventStore
from memledger_platform.keyring_postgres import PostgresKeyring
from memledger_platform.readmodel import schema
from memledger_platform.readmodel.checkpoint import read_checkpoint
from memledger_platform.settings import Settings
from memledger_projector.core import erasure, rebuild
from memledger_query.entrypoints import grpc_api
from memledger_schemas import commands as c
from memledger_schemas.grpc.v1 import query_pb2 as qpb
from memledger_schemas.grpc.v1 import query_pb2_grpc
from memledger_schemas.subjects import Subjects
from tests.integration.erasure_support import (
    analyze,
    statistics_hits,
    stream_hits,
    tables_of,
    tuple_hits,
    wal_hits,
)
from tests.integration.ingest_support import running
from tests.integration.semantic_support import Pipeline, pipeline
from tests.support import eventually

Nats = tuple[Client, JetStreamContext]
TOKEN = "zqxerasetoken5521"
"""Subject u7's: written everywhere a client can put text, found nowhere after the erasure."""
KEEP = "keepcoffee8830"
"""Subject u8's: must survive."""
T = TypeVar("T")


@dataclass
class World:
    pipeline: Pipeline
    keyring: PostgresKeyring
    master: bytes
    grpc: "query_pb2_grpc.QueryAsyncStub"


@dataclass
class Story:
    item: str
    session: str
    retrievals: list[str]
    position: int


@pytest.fixture
async def world(engines: Endpoints, event_store: PostgresEventStore, pg_schema: str,
                nats_js: Nats, subjects: Subjects, tmp_path: Path) -> AsyncIterator[World]:
    master = os.urandom(32)
    with ConnectionPool(engines.postgres_dsn, min_size=1, max_size=4, open=True,
                        kwargs={"autocommit": True}) as pool:
        keyring = PostgresKeyring(pool, master, pg_schema)
        async with running(GroupCommitWriter(event_store, keyring=keyring)) as writer, \
                pipeline(engines.postgres_dsn, event_store, pg_schema, nats_js, subjects,
                         writer, HashingEmbedder(), tmp_path / "vectors",
                         keyring=keyring) as p:
            assert p.semantic is not None
            reads = grpc_server.principal_resolver(Gate(None, "default"), "read")
            server, address = await grpc_server.start(
                [grpc_api.registrar(p.reader, event_store, p.semantic, reads)], "127.0.0.1",
                0, fallback=0, setting="MEMLEDGER_GRPC_PORT")
            try:
                async with grpc.aio.insecure_channel(address) as channel:
                    yield World(p, keyring, master, query_pb2_grpc.QueryStub(channel))
            finally:
                await server.stop(0)


async def _tell(p: Pipeline) -> Story:
    """u7's token in every place a client can write text; u8's memory beside it."""
    w = p.writer.submit
    await w("acme", [c.CreateSpace(space_id="main")])
    [session] = await w("acme", [c.StartSession(
        space_id="main", subject_id="u7", title=f"call with {TOKEN}",
        idempotency_key=f"start-{TOKEN}")])
    sid = session.ids["session_id"]
    [fact] = await w("acme", [c.AssertMemory(
        space_id="main", kind="fact", subject_id="u7", content=f"{TOKEN} drinks green tea",
        tags=(f"tag-{TOKEN}",), idempotency_key=f"assert-{TOKEN}")])
    item = fact.ids["item_id"]
    await w("acme", [
        c.ReviseMemory(space_id="main", item_id=item, content=f"{TOKEN} drinks green tea daily",
                       tags=(f"tag-{TOKEN}", "tea"), reason=f"{TOKEN} said so"),
        c.AppendMessage(space_id="main", session_id=sid, role="user",
                        content=f"I am {TOKEN} and I drink green tea"),
        c.UpsertEntity(space_id="main", entity_id="person-1", name=TOKEN, type="person",
                       subject_id="u7"),
        c.RecordFeedback(space_id="main", item_id=item, signal="rating", rating=4,
                         comment=f"{TOKEN} liked it", subject_id="u7"),
        c.RecordPreference(space_id="main", source_item_id=item, rule_id="r1",
                           category="drink", value=f"{TOKEN} prefers green tea",
                           confidence=0.9, subject_id="u7"),
        c.AssertMemory(space_id="main", kind="fact", subject_id="u8",
                       content=f"{KEEP} drinks black coffee")])
    retrievals = await _audited_queries(p, item, sid)
    return Story(item, sid, retrievals, p.writer._store.max_position())


async def _audited_queries(p: Pipeline, item: str, session: str) -> list[str]:
    """An audited search that shows u7's memory, and an audited context call in u7's session
    (the query named in both carries the token)."""
    search = {"query": f"what does {TOKEN} drink", "spaces": ["main"], "threshold": 0.0}
    async with p.client("acme") as api:
        async def indexed() -> None:
            answer = (await api.post("/v1/search", json=search)).json()
            assert item in [h["item_id"] for h in answer.get("results", [])], answer
        await eventually(indexed, timeout=60, interval=0.2)
        audited = await api.post("/v1/search", json={**search, "audit": True})
        context = await api.post("/v1/context", json={
            "space_id": "main", "session_id": session, "query": f"tea for {TOKEN}",
            "audit": True})
    assert audited.status_code == context.status_code == 200, (audited.text, context.text)
    return [audited.json()["retrieval_id"], context.json()["retrieval_id"]]


async def _http_reads(p: Pipeline, story: Story) -> str:
    """Every HTTP read the subject's data could show up in, as one text."""
    paths = [f"/v1/spaces/main/items/{story.item}", "/v1/spaces/main/items",
             f"/v1/spaces/main/items/{story.item}/history", "/v1/spaces/main/changes",
             "/v1/changes", f"/v1/spaces/main/sessions/{story.session}/messages",
             "/v1/spaces/main/graph", *[f"/v1/retrievals/{r}" for r in story.retrievals]]
    texts = []
    async with p.client("acme") as api:
        for path in paths:
            answer = await api.get(path, params={"min_position": story.position,
                                                 "limit": 1_000}
                                   if path.endswith("changes") else
                                   {"min_position": story.position})
            assert answer.status_code == 200, (path, answer.text)
            texts.append(answer.text)
    return " ".join(texts)


async def _grpc_changes(stub: "query_pb2_grpc.QueryAsyncStub", position: int) -> str:
    metadata = ((grpc_server.TENANT_METADATA, "acme"),)
    pages = []
    for space in ("main", None):  # the space's feed, and the tenant's
        request = qpb.ChangesRequest(space_id=space, limit=1_000, min_position=position)
        pages += [str(page) async for page in stub.Changes(request, metadata=metadata)]
    return " ".join(pages)


def _replay(dsn: str, base: str, master: bytes, out: Path) -> str:
    settings = Settings(mode="distributed", postgres_dsn=dsn, nats_url="nats://unused:4222",
                        postgres_schema=base, master_key=base64.b64encode(master).decode())
    args = argparse.Namespace(from_position=1, to_position=None, since=None, until=None,
                              tenant=None, space=None, types=None, output=str(out))
    assert operators.run_replay(args, settings) == 0
    return out.read_text()


def _below_sql(dsn: str, base: str, wrapped: bytes) -> dict[str, list[str]]:
    """Where the token (and u7's wrapped key) still is in PostgreSQL: tuples of the read models
    (the live version and the one a rebuild kept), of the planner's statistics and of the key
    table; statistics; WAL files."""
    needle = TOKEN.encode()
    names = schema.Names(base)
    with psycopg.connect(dsn, autocommit=True) as conn:
        kept = [names.schema(v) for v in schema.kept_versions(conn, names)]
        tables = [t for s in kept for t in tables_of(conn, s)]
        return {"tuples": tuple_hits(conn, [*tables, "pg_statistic"], needle),
                "key": tuple_hits(conn, [f"{base}.memledger_subject_keys"], wrapped),
                "statistics": [h for s in kept for h in statistics_hits(conn, s, TOKEN)],
                "wal": wal_hits(conn, needle)}


def _rebuild_and_analyze(dsn: str, store: PostgresEventStore, base: str,
                         keyring: PostgresKeyring) -> None:
    """A rebuild, so that a second version (kept for a rollback) holds the token too; then
    statistics of both (so the planner's sample holds it)."""
    names = schema.Names(base)
    with psycopg.connect(dsn, autocommit=True) as conn:
        rebuild.rebuild(conn, OpenedEventStore(store, Opener(keyring)), names)
        assert schema.kept_versions(conn, names) == [2, 1]
        for version in (1, 2):
            analyze(conn, names.schema(version))


def _wrapped_key(dsn: str, base: str, subject: str) -> bytes:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(sql.SQL("SELECT wrapped FROM {}.memledger_subject_keys WHERE "
                                   "subject_id = %s").format(sql.Identifier(base)),
                           (subject,)).fetchone()
    assert row is not None
    return bytes(row[0])


def _in_the_clear(dsn: str, base: str, needle: str) -> list[str]:
    """The event store's tables holding ``needle`` as written (none should: it is sealed, or
    hashed in an idempotency key)."""
    s = sql.Identifier(base)
    queries = {
        "events": sql.SQL("SELECT count(*) FROM {}.memledger_events WHERE "
                          "convert_from(state, 'UTF8') LIKE %s").format(s),
        "idempotency": sql.SQL("SELECT count(*) FROM {}.memledger_events_idempotency k "
                               "WHERE k::text LIKE %s").format(s)}
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [name for name, query in queries.items()
                if conn.execute(query, (f"%{needle}%",)).fetchone() != (0,)]


async def test_an_erased_subject_leaves_its_token_in_no_read_no_row_and_no_wal_file(
        world: World, engines: Endpoints, event_store: PostgresEventStore, pg_schema: str,
        nats_js: Nats, subjects: Subjects, tmp_path: Path) -> None:
    p, dsn = world.pipeline, engines.postgres_dsn
    story = await _tell(p)
    assert _in_the_clear(dsn, pg_schema, TOKEN) == []
    assert await stream_hits(nats_js[1], subjects, (TOKEN,)) == []
    # Before: every place checked holds the token (so each check can fail).
    assert TOKEN in await _http_reads(p, story)
    assert TOKEN in await _grpc_changes(world.grpc, story.position)
    assert TOKEN in await asyncio.to_thread(_replay, dsn, pg_schema, world.master,
                                            tmp_path / "before.ndjson")
    await asyncio.to_thread(_rebuild_and_analyze, dsn, event_store, pg_schema, world.keyring)
    wrapped = _wrapped_key(dsn, pg_schema, "u7")
    before = await asyncio.to_thread(_below_sql, dsn, pg_schema, wrapped)
    assert all(before.values()), before

    receipt = await Erasure(event_store, world.keyring, p.writer, (dsn, pg_schema)).erase(
        "acme", "u7", "asked to", wait_seconds=60)
    assert receipt["complete"] is True, receipt
    assert receipt["vacuumed"] == ["memledger_subject_keys"]
    postgres = receipt["purged"]["postgres"]
    assert postgres["versions"] == [2, 1]
    assert {"changes", "item_versions", "messages", "sessions", "entities",
            "preferences", "mentions"} <= set(postgres["vacuumed"])
    assert (postgres["analyzed"], postgres["wal_switched"], postgres["checkpoint"]) == (
        True, True, True)

    reads = await _http_reads(p, story)
    assert TOKEN not in reads
    assert KEEP in reads
    assert TOKEN not in await _grpc_changes(world.grpc, story.position)
    replayed = await asyncio.to_thread(_replay, dsn, pg_schema, world.master,
                                       tmp_path / "after.ndjson")
    assert TOKEN not in replayed
    assert KEEP in replayed
    assert await asyncio.to_thread(_below_sql, dsn, pg_schema, wrapped) == {
        "tuples": [], "key": [], "statistics": [], "wal": []}
    # What the scrub left equals what a rebuild makes of the log once the keys are gone.
    await eventually(lambda: _caught_up(dsn, pg_schema, event_store), timeout=30)
    assert await asyncio.to_thread(_rebuilt_equals_live, dsn, event_store, pg_schema,
                                   world.keyring)


async def _caught_up(dsn: str, base: str, store: PostgresEventStore) -> None:
    names = schema.Names(base)
    with psycopg.connect(dsn, autocommit=True) as conn:
        live = names.schema(schema.live_version(conn, names))
        assert read_checkpoint(conn, live).position == store.max_position()


def _rebuilt_equals_live(dsn: str, store: PostgresEventStore, base: str,
                         keyring: PostgresKeyring) -> bool:
    names = schema.Names(base)
    with psycopg.connect(dsn, autocommit=True) as conn:
        live = rebuild.model_hash(conn, names.schema(schema.live_version(conn, names)))
        done = rebuild.rebuild(conn, OpenedEventStore(store, Opener(keyring)), names)
        return rebuild.model_hash(conn, names.schema(done.version)) == live


def test_a_vacuum_or_checkpoint_the_role_may_not_run_is_reported_false_not_claimed(
        engines: Endpoints, pg_schema: str) -> None:
    lowly = f"{pg_schema}_lowly"
    table = sql.SQL("{}.t").format(sql.Identifier(pg_schema))
    with psycopg.connect(engines.postgres_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(pg_schema)))
        conn.execute(sql.SQL("CREATE TABLE {} (x int)").format(table))
        conn.execute(sql.SQL("CREATE ROLE {}").format(sql.Identifier(lowly)))
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(
            sql.Identifier(pg_schema), sql.Identifier(lowly)))
        try:
            conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(lowly)))
            refused = (pg_vacuum.vacuum(conn, table), erasure.statistics_and_wal(conn))
            conn.execute("RESET ROLE")
            allowed = (pg_vacuum.vacuum(conn, table), erasure.statistics_and_wal(conn))
        finally:
            conn.execute("RESET ROLE")
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(lowly)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(lowly)))
    assert refused == (False, {"statistics_vacuumed": False, "wal_switched": False,
                               "checkpoint": False})
    assert allowed == (True, {"statistics_vacuumed": True, "wal_switched": True,
                              "checkpoint": True})


def test_compacting_the_keys_waits_for_a_snapshot_that_still_sees_a_destroyed_key(
        engines: Endpoints, pg_schema: str) -> None:
    dsn = engines.postgres_dsn
    with ConnectionPool(dsn, min_size=1, max_size=2, open=True,
                        kwargs={"autocommit": True}) as pool:
        keyring = PostgresKeyring(pool, os.urandom(32), pg_schema)
        keyring.for_writing("acme", "u9", "main")
        wrapped = _wrapped_key(dsn, pg_schema, "u9")
        keys = sql.SQL("{}.memledger_subject_keys").format(sql.Identifier(pg_schema))
        waited, compacted = _behind_a_snapshot(dsn, keys, lambda: keyring.destroy("acme", "u9"),
                                               keyring.compact)
    assert waited, compacted
    assert compacted == [["memledger_subject_keys"]]
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert tuple_hits(conn, [f"{pg_schema}.memledger_subject_keys"], wrapped) == []


def test_a_scrubbed_table_is_vacuumed_and_analyzed_again_until_no_snapshot_sees_its_rows(
        engines: Endpoints, pg_schema: str) -> None:
    dsn, table = engines.postgres_dsn, sql.SQL("{}.t").format(sql.Identifier(pg_schema))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(pg_schema)))
        conn.execute(sql.SQL("CREATE TABLE {} (x text)").format(table))
        conn.execute(sql.SQL("INSERT INTO {} VALUES (%s)").format(table), (TOKEN,))
        waited, done = _behind_a_snapshot(
            dsn, table, lambda: conn.execute(sql.SQL("UPDATE {} SET x = 'erased'").format(table)),
            lambda: pg_vacuum.vacuum_until_removed(conn, table, 60, pg_vacuum.CLEAN + ", ANALYZE"))
        assert waited, done
        assert done == [True]
        assert tuple_hits(conn, [f"{pg_schema}.t"], TOKEN.encode()) == []
        assert pg_vacuum.vacuum_until_removed(conn, table, 0) is True


def _behind_a_snapshot(dsn: str, table: sql.Composable, change: Callable[[], object],
                       vacuum: Callable[[], T]) -> tuple[bool, list[T]]:
    """``change`` rows of ``table`` while another session's snapshot, taken before, still sees
    their old versions, then ``vacuum`` in a thread; whether it was still waiting a second
    later, and (once the snapshot is gone) what it returned."""
    done: list[T] = []
    with psycopg.connect(dsn) as reader:
        reader.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        reader.execute(sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone()
        change()
        vacuuming = threading.Thread(target=lambda: done.append(vacuum()))
        vacuuming.start()
        vacuuming.join(1.0)
        waited = vacuuming.is_alive()
        reader.rollback()
    vacuuming.join(60)
    return waited, done
