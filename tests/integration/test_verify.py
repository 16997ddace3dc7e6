"""``memledger verify`` on the real engines: a history written, relayed, projected into
PostgreSQL and into a Qdrant Edge index by the real consumers; then faults injected into each
copy, reported, and mended by ``--repair`` where it says it can."""

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import NAMESPACE_URL, UUID, uuid4, uuid5

import httpx
import psycopg
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from psycopg_pool import ConnectionPool

from memledger_cli import verify_vectors
from memledger_cli.main import main
from memledger_cli.verify import Target, repair, verify
from memledger_ingest.core.writer import GroupCommitWriter
from memledger_platform.embedding.embedder import HashingEmbedder
from memledger_platform.endpoints import Endpoints
from memledger_platform.eventstore.postgres import PostgresEventStore
from memledger_platform.readmodel import schema
from memledger_platform.readmodel.checkpoint import read_checkpoint
from memledger_platform.vectorindex.qdrant_edge import QdrantEdgeVectorIndex
from memledger_projector.core import store
from memledger_projector.entrypoints.consumer import Projector
from memledger_query.core.reader import Reader
from memledger_query.entrypoints import semantic_http
from memledger_query.entrypoints.http import create_app
from memledger_query.entrypoints.semantic_http import Semantic
from memledger_relay.relay import Relay
from memledger_schemas import commands as c
from memledger_schemas.subjects import Subjects
from memledger_vectors.consumer import Batching, VectorProjector
from tests.integration.events_support import envelope
from tests.integration.nats_support import stream_messages
from tests.integration.read_support import drop_read_models
from tests.support import eventually

Nats = tuple[Client, JetStreamContext]
EMBEDDER = HashingEmbedder()


@dataclass
class System:
    target: Target
    index: QdrantEdgeVectorIndex
    vectors: VectorProjector
    stop: asyncio.Event
    tasks: list["asyncio.Task[None]"]

    async def halt(self) -> None:
        """Stop the consumers (memledger stopped, as a stream reset needs)."""
        self.stop.set()
        await asyncio.wait_for(asyncio.gather(*self.tasks), 20)


async def _history(writer: GroupCommitWriter) -> None:
    for tenant, space in (("acme", "main"), ("acme", "ops"), ("globex", "main")):
        await writer.submit(tenant, [c.CreateSpace(space_id=space)])
        session = UUID((await writer.submit(tenant, [c.StartSession(space_id=space)]))[0]
                       .ids["session_id"])
        for i in range(8):
            item = _item(tenant, space, i)
            await writer.submit(tenant, [
                c.AssertMemory(space_id=space, item_id=item, kind="fact",
                               content=f"{space} fact {i}"),
                c.AppendMessage(space_id=space, session_id=session, role="user",
                                content=f"said {i}",
                                said_at=datetime(2023, 5, i + 1, tzinfo=UTC) if i % 2 else None)])
            if i % 3 == 0:
                await writer.submit(tenant, [c.ReviseMemory(space_id=space, item_id=item,
                                                            content=f"{space} fact {i}!")])
            if i % 4 == 1:
                await writer.submit(tenant, [c.RetractMemory(space_id=space, item_id=item)])


def _item(tenant: str, space: str, i: int) -> UUID:
    return uuid5(NAMESPACE_URL, f"{tenant}/{space}/{i}")


async def _relay_all(target: Target) -> None:
    relay = Relay(target.store, target.js, target.subjects)
    relay.cursor = await relay.resume()
    while await relay.relay_once():
        pass


async def _caught_up(system: System) -> None:
    last = system.target.store.max_position()
    with psycopg.connect(system.target.dsn, autocommit=True) as conn:
        live = system.target.names.schema(schema.live_version(conn, system.target.names))
        assert read_checkpoint(conn, live).position == last
    assert system.vectors.position == last


@pytest.fixture
async def system(engines: Endpoints, pg_schema: str, event_store: PostgresEventStore,
                 subjects: Subjects, nats_js: Nats, tmp_path: Path) -> AsyncIterator[System]:
    """A history in the store, relayed, projected by the running consumers."""
    _, js = nats_js
    names = schema.Names(pg_schema)
    with psycopg.connect(engines.postgres_dsn, autocommit=True) as conn:
        schema.ensure_pointer(conn, names)
    writer = GroupCommitWriter(event_store)
    writer.start()
    try:
        await _history(writer)
    finally:
        writer.stop()
    index = QdrantEdgeVectorIndex(tmp_path / "vectors", EMBEDDER.dims)
    target = Target(event_store, js, subjects, engines.postgres_dsn, names, index=index,
                    index_label="test index", model=EMBEDDER.model_id)
    await _relay_all(target)
    stop = asyncio.Event()
    vectors = VectorProjector(subjects, index, EMBEDDER.model_id, batching=Batching(64))
    projector = Projector(lambda: store.tune(psycopg.connect(engines.postgres_dsn,
                                                             autocommit=True)),
                          js, subjects, names, batch=50)
    tasks = [asyncio.create_task(projector.run(stop)), asyncio.create_task(vectors.run(js, stop))]
    found = System(target, index, vectors, stop, tasks)
    await eventually(lambda: _caught_up(found), timeout=30)
    try:
        yield found
    finally:
        if not stop.is_set():
            await found.halt()
        index.close()
        with psycopg.connect(engines.postgres_dsn, autocommit=True) as conn:
            drop_read_models(conn, pg_schema)


def _status(report: Any) -> dict[str, str]:
    return {check.name: check.status for check in report.checks}


ALL_OK = {"events stream": "ok", "postgres read model": "ok", "vector index": "ok"}


async def test_a_system_whose_copies_all_agree_is_verified_ok(system: System) -> None:
    report, _ = await verify(system.target, wait_seconds=5)

    assert _status(report) == ALL_OK
    assert report.ok
    committed = system.target.store.max_position()
    assert report.committed == committed
    scopes = {(r["tenant"], r["space"]): r for r in report.scopes}
    assert set(scopes) == {("acme", "main"), ("acme", "ops"), ("globex", "main")}
    for row in scopes.values():
        assert row["store"] == row["stream"] == row["postgres_changes"] > 0
        assert row["vector_points"] > 0


async def test_a_message_deleted_from_the_middle_of_the_stream_needs_and_gets_a_reset(
        system: System) -> None:
    js, stream = system.target.js, system.target.subjects.events_stream
    await js.delete_msg(stream, 7)

    report, found = await verify(system.target, wait_seconds=0)

    assert _status(report)["events stream"] == "differs"
    [missing] = report.check("events stream").differences
    assert (missing["what"], missing["count"], missing["examples"]) == ("missing", 1,
                                                                        ["position 7"])
    assert _status(report)["postgres read model"] == "ok"
    not_done = await repair(system.target, found, reset_stream=False)
    assert "NOT repaired" in not_done[0]
    assert not (await verify(system.target, wait_seconds=0))[0].ok

    await system.halt()
    done = await repair(system.target, found, reset_stream=True)

    assert done == [f"events stream: reset, {system.target.store.max_position()} events "
                    "republished"]
    assert (await verify(system.target, wait_seconds=0))[0].ok
    positions = [int((m.headers or {})["Memledger-Position"]) for m in await stream_messages(
        js, stream, system.target.subjects.all_events)]
    assert positions == list(range(1, system.target.store.max_position() + 1))


async def test_a_stream_behind_the_store_is_reported_as_lag_and_caught_up_by_repair(
        system: System) -> None:
    system.target.store.append([envelope(uuid4(), 1, tenant="acme", space="main",
                                          event_type="space.archived", payload={})
                                 for _ in range(3)])  # committed; no relay runs

    report, found = await verify(system.target, wait_seconds=0)

    stream = report.check("events stream")
    assert (stream.status, stream.lag, stream.differences) == ("lag", 3, [])
    assert report.check("postgres read model").lag == 3
    assert _status(report)["vector index"] == "ok"  # at the position the models have
    done = await repair(system.target, found, reset_stream=False)
    assert done[0] == "events stream: caught up, 3 events published"
    assert _status((await verify(system.target, wait_seconds=10))[0]) == ALL_OK


async def test_a_tampered_read_model_row_is_named_and_mended_by_a_blue_green_rebuild(
        system: System) -> None:
    with psycopg.connect(system.target.dsn, autocommit=True) as conn:
        live = system.target.names.schema(1)
        conn.execute(f'UPDATE "{live}".item_versions SET attrs = attrs || '
                     "'{\"content\": \"tampered\"}' WHERE row_id = (SELECT min(row_id) FROM "
                     f'"{live}".item_versions)')
        conn.execute(f'DELETE FROM "{live}".messages WHERE position = (SELECT max(position) '
                     f'FROM "{live}".messages)')

    report, found = await verify(system.target, wait_seconds=0)

    assert _status(report)["postgres read model"] == "differs"
    differences = report.check("postgres read model").differences
    assert {(d["table"], d["what"]) for d in differences} == {
        ("item_versions", "content differs"), ("messages", "row count differs")}
    assert _status(report)["vector index"] == "ok"  # its expectation comes from the log
    [done] = await repair(system.target, found, reset_stream=False)
    assert done.startswith("postgres read model: rebuilt blue/green as version 2 (was 1)")
    assert _status((await verify(system.target, wait_seconds=0))[0]) == ALL_OK


async def test_an_event_deleted_from_the_store_shows_as_extra_in_every_copy_and_is_mended(
        system: System) -> None:
    target = system.target
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        [(position,)] = conn.execute(
            f'DELETE FROM "{target.names.base}".memledger_events WHERE notification_id = '
            f'(SELECT min(notification_id) FROM "{target.names.base}".memledger_events WHERE '
            # an event the vector index holds nothing of (a deleted message's point would
            # stay: repair re-drives the index, and counts points the log never named)
            "topic = 'session.started') RETURNING notification_id").fetchall()

    report, found = await verify(target, wait_seconds=0)

    stream = report.check("events stream")
    assert stream.status == "differs"
    assert [d["what"] for d in stream.differences] == ["extra"]
    assert f"position {position} " in stream.differences[0]["examples"][0]
    assert {d["table"] for d in report.check("postgres read model").differences} == {
        "sessions", "changes"}
    await system.halt()
    assert len(await repair(target, found, reset_stream=True)) == 2
    assert _status((await verify(target, wait_seconds=0))[0]) == ALL_OK


async def test_a_point_missing_from_the_vector_index_is_reported_and_re_driven_from_the_log(
        system: System) -> None:
    tenant, space = "acme", "ops"
    points = system.index.points(tenant, str(_item(tenant, space, 3)))
    system.index.delete([points[0].point_id])

    report, found = await verify(system.target, wait_seconds=0)

    assert _status(report)["vector index"] == "differs"
    [difference] = report.check("vector index").differences
    assert (difference["tenant"], difference["space"]) == (tenant, space)
    assert difference["points"] == difference["expected_points"] - 1
    await system.halt()
    [done] = await repair(system.target, found, reset_stream=False)
    assert done.startswith("vector index: re-driven from the log")
    assert _status((await verify(system.target, wait_seconds=0))[0]) == ALL_OK


async def test_a_message_missing_from_the_vector_index_is_reported_and_re_driven(
        system: System) -> None:
    with psycopg.connect(system.target.dsn, autocommit=True) as conn:
        live = system.target.names.schema(1)
        [(message,)] = conn.execute(
            f'SELECT message_id::text FROM "{live}".messages WHERE tenant_id = %s AND '
            f'space_id = %s ORDER BY position LIMIT 1', ("globex", "main")).fetchall()
    [point] = system.index.points("globex", message)
    system.index.delete([point.point_id])

    report, found = await verify(system.target, wait_seconds=0)

    [difference] = report.check("vector index").differences
    assert (difference["tenant"], difference["space"], difference["what"]) == (
        "globex", "main", "point count differs")
    await system.halt()
    [done] = await repair(system.target, found, reset_stream=False)
    assert done.startswith("vector index: re-driven from the log")
    assert _status((await verify(system.target, wait_seconds=0))[0]) == ALL_OK
    assert system.index.points("globex", message) == [point]


async def test_the_query_services_vector_summary_agrees_with_the_index_read_in_process(
        system: System, engines: Endpoints) -> None:
    async with _query_app(system, engines.postgres_dsn) as transport:
        _, found = await verify(system.target, wait_seconds=0)
        assert found.vectors is not None
        over_http = await verify_vectors.remote(
            "http://query", {"acme", "globex"}, found.vectors.expected,
            found.vectors.position, wait_ms=0, transport=transport)

    assert over_http.skipped == ""
    assert over_http.actual == found.vectors.actual
    assert over_http.differences() == []
    assert over_http.projected == system.target.store.max_position()


@asynccontextmanager
async def _query_app(system: System, dsn: str) -> AsyncIterator[httpx.ASGITransport]:
    pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
        dsn, min_size=1, max_size=2, kwargs={"autocommit": True}, open=True)
    try:
        reader = Reader(pool, system.target.names)
        app = create_app(reader, system.target.store, "default")
        app.include_router(semantic_http.router(
            Semantic(system.index, EMBEDDER, system.vectors, reader)))
        yield httpx.ASGITransport(app=app)
    finally:
        pool.close()


async def test_the_command_exits_0_when_all_agree_and_1_after_a_fault(
        system: System, engines: Endpoints, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    for name, value in {"MODE": "distributed", "POSTGRES_DSN": engines.postgres_dsn,
                        "NATS_URL": engines.nats_url, "POSTGRES_SCHEMA": system.target.names.base,
                        "NATS_PREFIX": system.target.subjects.prefix}.items():
        monkeypatch.setenv(f"MEMLEDGER_{name}", value)
    arguments = ["verify", "--json", "--skip-vectors", "--wait", "0"]

    assert await asyncio.to_thread(main, arguments) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["ok"] is True
    assert [c["status"] for c in document["checks"]] == ["ok", "ok", "skipped"]

    await system.target.js.delete_msg(system.target.subjects.events_stream, 3)
    assert await asyncio.to_thread(main, ["verify", "--wait", "0", "--skip-vectors"]) == 1
    text = capsys.readouterr().out
    assert "events stream        DIFFERS" in text
    assert "missing: 1 (position 3)" in text
