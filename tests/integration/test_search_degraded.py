"""Search and context without their embedder: when the query's embedding fails or hangs, the
query service still answers, ranking by keywords alone, and says so."""

import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from memledger_ingest.core.writer import GroupCommitWriter
from memledger_platform.embedding.embedder import HashingEmbedder
from memledger_platform.endpoints import Endpoints
from memledger_platform.eventstore.postgres import PostgresEventStore
from memledger_schemas.commands import AssertMemory, CreateSpace
from memledger_schemas.subjects import Subjects
from tests.integration.semantic_support import Pipeline, pipeline, write
from tests.support import eventually

Nats = tuple[Client, JetStreamContext]


class QueryEmbedderDown(HashingEmbedder):
    """Embeds documents (the enricher works) but not queries: ``hang`` makes a query's
    embedding wait until the test ends (far beyond any client's patience), else it raises."""

    def __init__(self, *, hang: bool) -> None:
        super().__init__()
        self.hang, self.released = hang, threading.Event()

    def embed_query(self, text: str) -> list[float]:
        if self.hang:
            self.released.wait(120)
        raise ConnectionError("the embedding model is unreachable")


@pytest.fixture(params=["hangs", "raises"])
async def degraded(request: pytest.FixtureRequest, engines: Endpoints,
                   event_store: PostgresEventStore, pg_schema: str, nats_js: Nats,
                   subjects: Subjects, writer: GroupCommitWriter, tmp_path: Path
                   ) -> AsyncIterator[Pipeline]:
    embedder = QueryEmbedderDown(hang=request.param == "hangs")
    try:
        async with pipeline(engines.postgres_dsn, event_store, pg_schema, nats_js, subjects,
                            writer, embedder, tmp_path / "vectors") as found:
            assert found.semantic is not None
            found.semantic.embed_timeout = 0.3
            yield found
    finally:
        embedder.released.set()


async def _written(p: Pipeline) -> dict[str, Any]:
    await write(p, CreateSpace(space_id="ops"))
    kept = await write(p, AssertMemory(space_id="ops", kind="fact",
                                       content="the nightly backup runs at midnight"))
    await write(p, AssertMemory(space_id="ops", kind="fact",
                                content="lunch is served in the canteen"))
    return kept


async def test_search_ranks_by_keywords_and_says_so_when_the_embedder_is_down(
        degraded: Pipeline) -> None:
    kept = await _written(degraded)
    async with degraded.client("acme") as client:
        async def answered() -> dict[str, Any]:
            response = await client.post("/v1/search", json={
                "query": "when does the backup run", "spaces": ["ops"],
                "min_position": kept["position"]})
            assert response.status_code == 200, response.text
            body: dict[str, Any] = response.json()
            assert body["results"], "not indexed yet"
            return body
        body = await eventually(answered, timeout=30)
    assert body["degraded"] == ["embedder"]
    assert body["ranking"] == "keyword"
    assert [h["item_id"] for h in body["results"]] == [kept["item_id"]]


async def test_a_context_bundle_is_packed_from_keywords_when_the_embedder_is_down(
        degraded: Pipeline) -> None:
    kept = await _written(degraded)
    async with degraded.client("acme") as client:
        async def packed() -> dict[str, Any]:
            response = await client.post("/v1/context", json={
                "space_id": "ops", "query": "backup midnight", "min_position": kept["position"]})
            assert response.status_code == 200, response.text
            body: dict[str, Any] = response.json()
            memories = next(s for s in body["sections"] if s["name"] == "memories")
            assert memories["entries"], "not indexed yet"
            return body
        body = await eventually(packed, timeout=30)
    assert (body["degraded"], body["ranking"]) == (["embedder"], "keyword")
    memories = next(s for s in body["sections"] if s["name"] == "memories")
    assert [e["ref"] for e in memories["entries"]] == [kept["item_id"]]


async def test_a_search_weighted_off_dense_is_keyword_ranked_but_not_degraded(
        degraded: Pipeline) -> None:
    kept = await _written(degraded)
    async with degraded.client("acme") as client:
        async def answered() -> dict[str, Any]:
            response = await client.post("/v1/search", json={
                "query": "backup midnight", "weights": {"dense": 0.0, "keyword": 1.0},
                "min_position": kept["position"]})
            assert response.status_code == 200, response.text
            body: dict[str, Any] = response.json()
            assert body["results"]
            return body
        body = await eventually(answered, timeout=30)
    assert (body["degraded"], body["ranking"]) == ([], "keyword")


