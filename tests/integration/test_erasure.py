"""Erasure you can prove: write distinctive personal strings for two data subjects, erase one,
then scan every PostgreSQL table (the event store included), every JetStream message and the
vector index (its search and its files on disk) for that subject's strings: zero hits; the
other subject's data untouched; a full rebuild still works and equals the scrubbed live model.
"""

import asyncio
import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import grpc
import httpx
import psycopg
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from psycopg import sql
from psycopg_pool import ConnectionPool

from memledger_ingest.core.erasure import Erasure, LegalHold
from memledger_ingest.core.writer import GroupCommitWriter
from memledger_ingest.entrypoints import grpc_api as ingest_grpc
from memledger_ingest.entrypoints.http import create_app
from memledger_platform import grpc_server, receipts
from memledger_platform.auth import TENANT_HEADER, Gate
from memledger_platform.crypto import ERASED, Opener, SourceErased
from memledger_platform.embedding.embedder import HashingEmbedder
from memledger_platform.endpoints import Endpoints
from memledger_platform.eventstore.opened import OpenedEventStore
from memledger_platform.eventstore.postgres import PostgresEventStore
from memledger_platform.keyring_postgres import PostgresKeyring
from memledger_platform.readmodel import schema
from memledger_projector.core import rebuild
from memledger_schemas import commands as c
from memledger_schemas.grpc.v1 import ingest_pb2 as ipb
from memledger_schemas.grpc.v1 import ingest_pb2_grpc
from memledger_schemas.subjects import Subjects
from tests.integration.erasure_support import stream_hits
from tests.integration.ingest_support import running
from tests.integration.semantic_support import Pipeline, pipeline
from tests.support import eventually, holds

Nats = tuple[Client, JetStreamContext]
ADA = ("Ada Quixotica Lovelace", "ada-private-diary-7731", "Quixotica Analytical Works")
"""Subject u7's distinctive strings: none may survive the erasure anywhere."""
BOB = "bob-keeps-this-4410"
"""Subject u8's: must survive."""


@pytest.fixture
async def world(engines: Endpoints, event_store: PostgresEventStore, pg_schema: str,
                nats_js: Nats, subjects: Subjects, tmp_path: Path
                ) -> AsyncIterator[tuple[Pipeline, PostgresKeyring, GroupCommitWriter]]:
    with ConnectionPool(engines.postgres_dsn, min_size=1, max_size=4, open=True,
                        kwargs={"autocommit": True}) as pool:
        keyring = PostgresKeyring(pool, os.urandom(32), pg_schema)
        async with running(GroupCommitWriter(event_store, keyring=keyring)) as writer, \
                pipeline(engines.postgres_dsn, event_store, pg_schema, nats_js, subjects,
                         writer, HashingEmbedder(), tmp_path / "vectors",
                         keyring=keyring) as p:
            yield p, keyring, writer


async def _populate(writer: GroupCommitWriter) -> int:
    name, diary, company = ADA
    await writer.submit("acme", [c.CreateSpace(space_id="main")])
    session = (await writer.submit("acme", [c.StartSession(space_id="main",
                                                           subject_id="u7")]))[0]
    [fact, *_] = await writer.submit("acme", [
        c.AssertMemory(space_id="main", kind="fact", subject_id="u7",
                       content=f"My name is {name} and I work at {company}"),
        c.AssertMemory(space_id="main", kind="observation", subject_id="u7",
                       content=f"keeps a diary called {diary}",
                       triple={"subject": name, "predicate": "keeps", "object": diary}),
        c.AppendMessage(space_id="main", session_id=session.ids["session_id"], role="user",
                        content=f"I prefer {diary} over anything"),
        c.UpsertEntity(space_id="main", entity_id="ada", name=name, type="person",
                       subject_id="u7"),
        c.AssertMemory(space_id="main", kind="fact", subject_id="u8",
                       content=f"Bob's locker code is {BOB}")])
    # Feedback (a signal, and a personal comment) and an audited retrieval whose query names
    # the subject: their rows must scrub to what a rebuild makes of them too.
    await writer.submit("acme", [
        c.RecordFeedback(space_id="main", item_id=fact.ids["item_id"], signal="rating",
                         rating=2, comment=f"{diary} is wrong", subject_id="u7"),
        c.RecordRetrieval.model_validate({
            "retrieval_id": UUID(int=7), "operation": "search", "subject_id": "u7",
            "query": f"where does {name} work?", "subject": name, "spaces": ["main"],
            "parameters": {"k": 3}, "policy_version": "rank-test",
            "basis": {"position": 1, "recorded_at": None, "valid_at": "2026-01-01T00:00:00Z"},
            "results": [{"ref": fact.ids["item_id"], "score": 0.5, "section": "filtered"}]})])
    return event_store_position(writer)


def event_store_position(writer: GroupCommitWriter) -> int:
    return writer._store.max_position()


def _pg_hits(dsn: str, needles: tuple[str, ...]) -> list[str]:
    """Every (schema.table) of the whole database holding any needle, bytea decoded."""
    hits = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT table_schema, table_name FROM information_schema.tables WHERE "
            "table_type = 'BASE TABLE' AND table_schema NOT IN ('pg_catalog', "
            "'information_schema')").fetchall()
        for schema_name, table in tables:
            rows = conn.execute(sql.SQL("SELECT * FROM {}.{}").format(
                sql.Identifier(schema_name), sql.Identifier(table))).fetchall()
            text = " ".join(_text(v) for row in rows for v in row)
            hits += [f"{schema_name}.{table}: {n}" for n in needles if n in text]
    return hits


def _text(value: Any) -> str:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", errors="ignore")
    return str(value)


def _disk_hits(directory: Path, needles: tuple[str, ...]) -> list[str]:
    hits = []
    for path in directory.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            hits += [f"{path.name}: {n}" for n in needles if n.encode() in data]
    return hits


async def test_an_erased_subject_leaves_no_trace_and_the_others_keep_theirs(
        world: tuple[Pipeline, PostgresKeyring, GroupCommitWriter], engines: Endpoints,
        event_store: PostgresEventStore, pg_schema: str, nats_js: Nats, subjects: Subjects,
        tmp_path: Path) -> None:
    p, keyring, writer = world
    await _populate(writer)
    # Before: the read models, the enrichment and the index all hold the subject's data
    # in the clear (so the scans below can fail), while the log and the stream never do.
    await eventually(holds(lambda: _async(lambda: bool(_pg_hits(engines.postgres_dsn, ADA))),
                           "the read models never showed the subject's data"), timeout=30)
    await eventually(holds(lambda: _async(lambda: p.enricher.enriched >= 4)), timeout=30)
    # the index holds the subject's embedded points before the erasure (what it purges)
    embedded = await asyncio.to_thread(event_store_position, writer)
    assert await p.vectors.wait_for(embedded, 30), "the vector index never reached the writes"
    with psycopg.connect(engines.postgres_dsn) as conn:
        log_text = " ".join(_text(r[0]) for r in conn.execute(sql.SQL(
            "SELECT state FROM {}.memledger_events").format(sql.Identifier(pg_schema))))
    assert not [n for n in ADA if n in log_text], "personal data reached the event store"
    assert not await stream_hits(nats_js[1], subjects, ADA)

    receipt = await Erasure(event_store, keyring, writer).erase("acme", "u7", "asked to")
    assert receipt["keys_destroyed"]
    assert receipt["spaces"] == ["main"]

    async def reported() -> bool:
        with psycopg.connect(engines.postgres_dsn, autocommit=True) as conn:
            found = receipts.read(conn, pg_schema, "acme", "u7")
        return set(found.get(receipt["position"], {})) == set(receipts.PROJECTIONS)
    await eventually(holds(reported, "a read model never reported the erasure"), timeout=30)
    with psycopg.connect(engines.postgres_dsn, autocommit=True) as conn:
        purged = receipts.read(conn, pg_schema, "acme", "u7")[receipt["position"]]
    assert purged["vectors"]["points"] >= 2
    assert purged["postgres"]["messages"] == 1
    assert purged["postgres"]["mentions"] >= 2  # her name and her company, as extracted

    p.index.close()  # flushed, so the files on disk are what is kept
    assert _pg_hits(engines.postgres_dsn, ADA) == []
    assert await stream_hits(nats_js[1], subjects, ADA) == []
    assert _disk_hits(tmp_path / "vectors", ADA) == []
    assert any(BOB in h for h in _pg_hits(engines.postgres_dsn, (BOB,)))

    # A full rebuild after the erasure works, shows the placeholder, equals the live model;
    # so does one whose fold worker opens its share with the keys it asks for.
    names = schema.Names(pg_schema)
    with psycopg.connect(engines.postgres_dsn, autocommit=True) as conn:
        live = rebuild.model_hash(conn, names.schema(schema.live_version(conn, names)))
        for parallel in (False, True):
            done = rebuild.rebuild(conn, OpenedEventStore(event_store, Opener(keyring)), names,
                                   parallel=parallel)
            assert done.processes == (2 if parallel else 1)
            assert rebuild.model_hash(conn, names.schema(done.version)) == live
            contents = [r[0] for r in conn.execute(sql.SQL(
                "SELECT attrs->>'content' FROM {}.item_versions").format(
                sql.Identifier(names.schema(done.version)))).fetchall()]
            assert ERASED in contents
            assert any(BOB in text for text in contents)
    assert _pg_hits(engines.postgres_dsn, ADA) == []


async def test_a_legal_hold_blocks_the_erasure_and_names_the_hold(
        world: tuple[Pipeline, PostgresKeyring, GroupCommitWriter],
        event_store: PostgresEventStore) -> None:
    _, keyring, writer = world
    await _populate(writer)
    await writer.submit("acme", [c.SetSpacePolicy(space_id="main", legal_hold=True)])
    with pytest.raises(LegalHold, match="'main' \\(policy version 1\\)"):
        await Erasure(event_store, keyring, writer).erase("acme", "u7")
    assert keyring.spaces_of("acme", "u7") == ["main"]  # nothing was destroyed


async def _async(check: Callable[[], bool]) -> bool:
    return await asyncio.to_thread(check)


async def test_the_api_erases_and_answers_with_the_whole_receipt(
        world: tuple[Pipeline, PostgresKeyring, GroupCommitWriter], engines: Endpoints,
        event_store: PostgresEventStore, pg_schema: str) -> None:
    _, keyring, writer = world
    await _populate(writer)
    app = create_app(writer, _healthy, "default", None,
                     Erasure(event_store, keyring, writer, (engines.postgres_dsn, pg_schema)))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://ingest", headers={TENANT_HEADER: "acme"},
                                 timeout=30) as api:
        answer = await api.post("/v1/subjects/u7/erase", json={"reason": "asked to"})
        again = await api.post("/v1/subjects/u7/erase")
    receipt = answer.json()
    assert answer.status_code == 200, answer.text
    assert receipt["complete"] is True
    assert set(receipt["purged"]) == {"postgres", "vectors"}
    assert receipt["purged"]["postgres"]["entities"] == 1
    assert again.json()["keys_destroyed"] == []  # nothing left to destroy: still recorded


async def test_grpc_erases_with_the_receipt_and_names_what_it_refuses(
        world: tuple[Pipeline, PostgresKeyring, GroupCommitWriter], engines: Endpoints,
        event_store: PostgresEventStore, pg_schema: str) -> None:
    _, keyring, writer = world
    await _populate(writer)
    erasure = Erasure(event_store, keyring, writer, (engines.postgres_dsn, pg_schema))
    resolve = grpc_server.principal_resolver(Gate(None, "default"), "write")
    server, address = await grpc_server.start(
        [ingest_grpc.registrar(writer, resolve, erasure)], "127.0.0.1", 0, fallback=0,
        setting="MEMLEDGER_GRPC_PORT")
    acme = ((grpc_server.TENANT_METADATA, "acme"),)
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            stub = ingest_pb2_grpc.IngestStub(channel)
            receipt = await stub.Erase(ipb.EraseRequest(subject_id="u7", reason="asked to"),
                                       metadata=acme)
            with pytest.raises(grpc.aio.AioRpcError) as bad:
                await stub.Erase(ipb.EraseRequest(subject_id="a\x00b"), metadata=acme)
    finally:
        await server.stop(0)
    assert (receipt.subject_id, receipt.complete) == ("u7", True)
    assert set(receipt.purged) == {"postgres", "vectors"}
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    body = grpc_server.error_body(bad.value)
    assert body is not None
    assert [f["path"] for f in body["error"]["fields"]] == ["subject_id"]


async def _healthy() -> dict[str, Any]:
    return {"status": "ok"}


@pytest.fixture
def keyring(engines: Endpoints, pg_schema: str) -> Iterator[PostgresKeyring]:
    """A keyring on the test's schema, alone (no writer, no pipeline)."""
    with ConnectionPool(engines.postgres_dsn, min_size=1, max_size=2, open=True,
                        kwargs={"autocommit": True}) as pool:
        yield PostgresKeyring(pool, os.urandom(32), pg_schema)


def test_the_keyring_finds_a_groups_live_keys_at_once_and_never_a_destroyed_one(
        keyring: PostgresKeyring) -> None:
    u1 = keyring.for_writing("acme", "u1", "main")
    u2 = keyring.for_writing("acme", "u2", "main")
    keyring.for_writing("acme", "u3", "main")
    keyring.destroy("acme", "u3")

    found = keyring.existing_for_writing({
        ("acme", "u1", "main"), ("acme", "u2", "main"), ("acme", "u2", "other"),
        ("acme", "u3", "main"), ("acme", "u4", "main"), ("beta", "u1", "main")})

    assert found == {("acme", "u1", "main"): u1, ("acme", "u2", "main"): u2}


def test_the_keyring_makes_no_key_for_what_was_learned_from_a_destroyed_key(
        keyring: PostgresKeyring) -> None:
    source = keyring.for_writing("acme", "u1", "main")
    assert keyring.for_writing("acme", "u1", "other", source.key_id) == source
    keyring.destroy("acme", "u1")

    with pytest.raises(SourceErased):
        keyring.for_writing("acme", "u1", "main", source.key_id)
    assert keyring.spaces_of("acme", "u1") == []
    fresh = keyring.for_writing("acme", "u1", "main")  # new data of its own is kept
    assert fresh.key_id != source.key_id
