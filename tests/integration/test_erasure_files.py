"""An erasure down to the engines' files: after a data subject is erased, its token is in no
file of the JetStream store (the test's streams) and in no file of the Qdrant Edge shard, and
each scan is shown to find what those files hold before: the token in the intake stream's
block while the command waits there, the subject's item id beside its sealed content in the
events stream's block, the token in the shard's files once flushed. (PostgreSQL's tuples, live
and dead, its statistics and its WAL files are scanned by ``test_erasure_reach``.)"""

import os
import random
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from psycopg_pool import ConnectionPool

from memledger_ingest.core.erasure import Erasure
from memledger_ingest.core.writer import GroupCommitWriter
from memledger_platform.embedding.embedder import HashingEmbedder
from memledger_platform.endpoints import Endpoints
from memledger_platform.eventstore.postgres import PostgresEventStore
from memledger_platform.keyring_postgres import PostgresKeyring
from memledger_platform.vectorindex.port import OPEN, IndexedPoint
from memledger_platform.vectorindex.qdrant_edge import QdrantEdgeVectorIndex
from memledger_schemas import commands as c
from memledger_schemas.subjects import Subjects
from tests.integration.ingest_support import running
from tests.integration.semantic_support import Pipeline, pipeline
from tests.support import eventually

Nats = tuple[Client, JetStreamContext]
TOKEN = "zqxdisktoken6617"
"""Subject u7's: in the files before the erasure, in none after."""
KEEP = "keepdisktea2290"
"""Subject u8's: still in the shard's files after u7's erasure (the scan is not blind)."""


@dataclass
class World:
    writer: GroupCommitWriter
    keyring: PostgresKeyring
    streams: dict[str, Path]
    vectors: Path


@pytest.fixture
async def world(engines: Endpoints, engines_home: Path, event_store: PostgresEventStore,
                pg_schema: str, nats_js: Nats, subjects: Subjects, tmp_path: Path
                ) -> AsyncIterator[World]:
    with ConnectionPool(engines.postgres_dsn, min_size=1, max_size=4, open=True,
                        kwargs={"autocommit": True}) as pool:
        keyring = PostgresKeyring(pool, os.urandom(32), pg_schema)
        async with running(GroupCommitWriter(event_store, keyring=keyring)) as writer:
            yield World(writer, keyring, stream_dirs(engines_home, subjects),
                        tmp_path / "vectors")


def stream_dirs(home: Path, subjects: Subjects) -> dict[str, Path]:
    """The directory of each of the test's streams in the server's JetStream store
    (``<store>/<account>/streams/<name>``)."""
    store = home / "nats" / "jetstream"
    names = (subjects.events_stream, subjects.intake_stream, subjects.dead_letter_stream)
    found = {name: [d for d in store.glob(f"*/streams/{name}") if d.is_dir()] for name in names}
    assert all(len(dirs) == 1 for dirs in found.values()), found
    return {name: dirs[0] for name, dirs in found.items()}


def file_hits(directory: Path, needle: str) -> list[str]:
    """The files under ``directory`` whose bytes hold ``needle``, relative to it."""
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*")
                  if p.is_file() and needle.encode() in p.read_bytes())


def stream_hits(streams: dict[str, Path], needle: str) -> list[str]:
    return [f"{name}/{hit}" for name, directory in streams.items()
            for hit in file_hits(directory, needle)]


async def _by_intake(js: JetStreamContext, subjects: Subjects) -> None:
    """u7's memory sent over NATS intake (as an agent does): the client's fields as sent."""
    await js.publish(subjects.intake("acme", "assert_memory"), orjson.dumps({
        "space_id": "main", "kind": "fact", "subject_id": "u7",
        "content": f"{TOKEN} sent this over NATS", "tags": [f"nats-{TOKEN}"]}))


async def _by_http(p: Pipeline) -> str:
    """u7's memory (asserted, then revised) and u8's, over HTTP; u7's item id."""
    async with p.writer_client("acme") as api:
        asserted = await api.post("/v1/spaces/main/memories", json={
            "kind": "fact", "subject_id": "u7", "content": f"{TOKEN} drinks green tea",
            "tags": [f"tag-{TOKEN}"]})
        assert asserted.status_code == 201, asserted.text
        item = asserted.json()["ids"]["item_id"]
        for path, body in ((f"/v1/spaces/main/memories/{item}/revise", {
                "content": f"{TOKEN} drinks green tea daily", "reason": f"{TOKEN} said"}),
                ("/v1/spaces/main/memories", {"kind": "fact", "subject_id": "u8",
                                              "content": f"{KEEP} drinks black coffee"})):
            answer = await api.post(path, json=body)
            assert answer.status_code == 201, answer.text
    return str(item)


async def _indexed(p: Pipeline, texts: list[str]) -> None:
    """Every text is found by a search (so each is in the shard), then the shard is flushed
    (as the projector does when idle): the files hold what the index holds."""
    async with p.client("acme") as api:
        for text in texts:
            answer = await api.post("/v1/search", json={"query": text, "spaces": ["main"],
                                                        "threshold": 0.0, "wait_ms": 0})
            assert answer.status_code == 200, answer.text
            assert text in answer.text, answer.text
    p.index.flush()


async def test_an_erased_subjects_token_is_in_no_jetstream_file_and_no_vector_index_file(
        world: World, engines: Endpoints, event_store: PostgresEventStore, pg_schema: str,
        nats_js: Nats, subjects: Subjects) -> None:
    intake = subjects.intake_stream
    await world.writer.submit("acme", [c.CreateSpace(space_id="main")])
    await _by_intake(nats_js[1], subjects)

    async def waiting_in_intake() -> None:
        assert stream_hits(world.streams, TOKEN) == [f"{intake}/msgs/1.blk"]
    # Before: no intake consumer runs yet, so the command waits in the intake stream's block,
    # the token in the clear: the scan finds it there.
    await eventually(waiting_in_intake, timeout=10)

    async with pipeline(engines.postgres_dsn, event_store, pg_schema, nats_js, subjects,
                        world.writer, HashingEmbedder(), world.vectors,
                        keyring=world.keyring) as p:
        item = await _by_http(p)
        await eventually(lambda: _indexed(p, [f"{TOKEN} sent this over NATS",
                                              f"{TOKEN} drinks green tea daily", KEEP]),
                         timeout=60, interval=0.2)

        # Before, the events stream's files: they hold u7's events (the item's id, kept in
        # the clear, is there), only sealed (the token is not).
        assert file_hits(world.streams[subjects.events_stream], item)
        # The intake block let go of the committed command: the token is in no stream file.
        await eventually(lambda: _nowhere_in(world.streams, TOKEN), timeout=30)
        # Before, the shard: its files hold the token (and u8's string).
        assert file_hits(world.vectors, TOKEN)
        assert file_hits(world.vectors, KEEP)

        receipt = await Erasure(event_store, world.keyring, world.writer,
                                (engines.postgres_dsn, pg_schema)).erase(
            "acme", "u7", "asked to", wait_seconds=60)
        assert receipt["complete"] is True, receipt
        assert receipt["purged"]["vectors"]["points"] >= 2, receipt

        # While the index runs: what the erasure left on disk.
        assert file_hits(world.vectors, TOKEN) == []
        assert stream_hits(world.streams, TOKEN) == []
        assert file_hits(world.vectors, KEEP)
        assert file_hits(world.streams[subjects.events_stream], item)
    # And once the index is closed (everything it held written out).
    assert file_hits(world.vectors, TOKEN) == []
    assert file_hits(world.vectors, KEEP)


async def _nowhere_in(streams: dict[str, Path], needle: str) -> None:
    assert stream_hits(streams, needle) == []



DIMS = 384
"""The local embedder's: 8,000 such vectors pass Qdrant's indexing threshold, so the
optimizer builds an HNSW segment (an immutable one: an update there deletes and re-adds)."""


def _points(numbers: range, subject: str, version: int = 1) -> list[IndexedPoint]:
    """Points of ``subject`` (u7's hold the token in their content and tags, u8's ``KEEP``)."""
    text = TOKEN if subject == "u7" else KEEP
    rng = random.Random(numbers.start * 7 + version)
    return [IndexedPoint(str(uuid.UUID(int=n)), [rng.uniform(-1, 1) for _ in range(DIMS)], {
        "tenant": "acme", "space": "main", "kind": "fact", "item_id": f"item-{n}",
        "subject_id": subject, "tags": [f"tag-{text}"], "content": f"{text} v{version} #{n}",
        "valid_from": 0.0, "valid_to": OPEN, "sys_from": float(version), "sys_to": OPEN})
        for n in numbers]


@pytest.mark.faults
def test_an_indexed_segment_keeps_no_erased_payload_in_any_file(tmp_path: Path) -> None:
    """u7's points among 8,000, in a segment the optimizer has indexed, then each revised
    (the old payload stays in the indexed segment, deleted, below the usual vacuum
    threshold): after the erasure no file of the shard holds the token, u8's points stay."""
    shard = tmp_path / "vectors"
    index = QdrantEdgeVectorIndex(shard, dims=DIMS)
    try:
        for first in range(0, 8_000, 1_000):
            index.upsert(_points(range(first, first + 995), "u8")
                         + _points(range(first + 995, first + 1_000), "u7"))
        index.optimize()
        index.upsert([p for first in range(0, 8_000, 1_000)
                      for p in _points(range(first + 995, first + 1_000), "u7", version=2)])
        index.flush()
        # Before: the indexed segment holds the first versions (deleted), the appendable
        # one the second, each in its payloads and its index of tags.
        assert _segments_holding(shard, TOKEN) == {
            ("indexed", "payload_storage"), ("indexed", "payload_index"),
            ("appendable", "payload_storage"), ("appendable", "payload_index")}

        assert index.delete_subject("acme", "u7") == 40
        assert file_hits(shard, TOKEN) == []
        assert index.count() == 7_960
    finally:
        index.close()
    assert file_hits(shard, TOKEN) == []
    assert file_hits(shard, KEEP)


def _segments_holding(shard: Path, needle: str) -> set[tuple[str, str]]:
    """(indexed or appendable segment, the part of it) of each file holding ``needle``."""
    found = set()
    for hit in file_hits(shard, needle):
        segment, part = shard / Path(hit).parts[0] / Path(hit).parts[1], Path(hit).parts[2]
        indexed = (segment / "vector_index-dense").exists()
        found.add(("indexed" if indexed else "appendable", part))
    return found
