"""Schemathesis against the OpenAPI documents of both HTTP apps, on a real event store and a
real read model: whatever a client sends that the schema allows (positive) or does not
(negative), the answer is never a 5xx and matches the schema."""

from collections.abc import AsyncIterator
from typing import Any

import httpx
import psycopg
import pytest
from psycopg_pool import ConnectionPool
from schemathesis import Case

from memledger_ingest.core.writer import GroupCommitWriter
from memledger_ingest.entrypoints.http import create_app as ingest_app
from memledger_platform.embedding.embedder import HashingEmbedder
from memledger_platform.endpoints import Endpoints
from memledger_platform.vectorindex.memory import InMemoryVectorIndex
from memledger_query.core.reader import Reader
from memledger_query.core.recorder import MemoryRecorder
from memledger_query.entrypoints import retrieval_http, semantic_http
from memledger_query.entrypoints.http import create_app as query_app
from memledger_query.entrypoints.semantic_http import Semantic
from memledger_schemas import commands as c
from memledger_schemas.subjects import Subjects
from memledger_vectors.consumer import VectorProjector
from tests.integration import fuzz_support
from tests.integration.read_support import ReadSide, write

POSITIVE, NEGATIVE = 10, 4
"""Examples per operation in ``make test`` (generating one costs ~40 ms)."""
LONG_POSITIVE, LONG_NEGATIVE = 25, 10
"""Examples per operation in the longer run (``make test-faults``)."""


async def _healthy() -> dict[str, Any]:
    return {"status": "ok"}


def _no_waiting(case: Case[Any]) -> None:
    """Read-your-writes waits are bounded by ``wait_ms`` (2 s by default, up to 30 s): never
    wait here (the answer is then 503 ``not_yet_visible`` at once)."""
    if "wait_ms" in {p.name for p in case.operation.query}:
        case.query = {**(case.query or {}), "wait_ms": 0}
    if isinstance(case.body, dict) and case.operation.path in ("/v1/search", "/v1/context"):
        case.body["wait_ms"] = 0


def _report(outcome: fuzz_support.FuzzRun) -> str:
    return (f"{len(outcome.failures)} of {outcome.requests} requests failed "
            f"(statuses {outcome.statuses}):\n\n" + "\n\n".join(outcome.failures[:10]))


async def test_the_ingest_api_never_answers_5xx_and_always_as_documented(
        writer: GroupCommitWriter) -> None:
    await _fuzz_ingest(writer, POSITIVE, NEGATIVE)


@pytest.mark.faults
@pytest.mark.timeout(1_200)
async def test_the_ingest_api_fuzzed_longer_never_answers_5xx(writer: GroupCommitWriter) -> None:
    await _fuzz_ingest(writer, LONG_POSITIVE, LONG_NEGATIVE)


async def _fuzz_ingest(writer: GroupCommitWriter, positive: int, negative: int) -> None:
    app = ingest_app(writer, _healthy, "default")
    await writer.submit("default", [c.CreateSpace(space_id="s1")])
    schema = fuzz_support.load("/openapi.json", app)

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://ingest") as client:
        outcome = await fuzz_support.run(client, fuzz_support.cases(schema, positive, negative))

    assert outcome.requests > 24 * positive  # every operation asked, most of them fully
    assert not outcome.failures, _report(outcome)


@pytest.fixture
async def query(engines: Endpoints, side: ReadSide, writer: GroupCommitWriter
                ) -> AsyncIterator[Any]:
    """The query app (with search and context) over a small projected history."""
    await write(writer, c.CreateSpace(space_id="main"), tenant="default")
    await write(writer, c.AssertMemory(space_id="main", kind="fact", content="The sky is blue"),
                tenant="default")
    side.project()
    pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
        engines.postgres_dsn, min_size=1, max_size=4, kwargs={"autocommit": True}, open=True)
    try:
        reader, embedder, index = Reader(pool, side.names), HashingEmbedder(), InMemoryVectorIndex()
        app = query_app(reader, side.store, "default")
        progress = VectorProjector(Subjects("unused"), index, embedder.model_id)
        # A recorder that always records: a query service that cannot is a 503 by design.
        semantic = Semantic(index, embedder, progress, reader, recorder=MemoryRecorder())
        app.include_router(semantic_http.router(semantic))
        app.include_router(retrieval_http.router(semantic))
        yield app
    finally:
        pool.close()


async def test_the_query_api_never_answers_5xx_and_always_as_documented(query: Any) -> None:
    await _fuzz_query(query, POSITIVE, NEGATIVE)


@pytest.mark.faults
@pytest.mark.timeout(1_200)
async def test_the_query_api_fuzzed_longer_never_answers_5xx(query: Any) -> None:
    await _fuzz_query(query, LONG_POSITIVE, LONG_NEGATIVE)


async def _fuzz_query(query: Any, positive: int, negative: int) -> None:
    schema = fuzz_support.load("/v1/query/openapi.json", query)

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=query),
                                 base_url="http://query") as client:
        outcome = await fuzz_support.run(client, fuzz_support.cases(schema, positive, negative),
                                         _no_waiting)

    assert outcome.requests > 8 * positive
    assert not outcome.failures, _report(outcome)



@pytest.mark.parametrize("path", ["/v1/spaces/main/items?kind=%00", "/v1/spaces/%00/items",
                                  "/v1/spaces/main/changes?after=%00"])
async def test_a_nul_character_in_a_read_is_refused_not_a_server_error(query: Any,
                                                                       path: str) -> None:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=query),
                                 base_url="http://query") as client:
        response = await client.get(path)

    assert response.status_code in (400, 422), response.text
    assert response.json()["error"]["code"] in ("invalid_request", "invalid_cursor")
