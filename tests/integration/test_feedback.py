"""Reinforcement and feedback on the real engines (a real local embedder): ratings, use and
reaffirmation move a memory in search, as of the basis' position and no later, and show in
``explain``; corrections rated low are offered as steering-rule candidates in a context bundle.
"""

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from memledger_ingest.core.writer import GroupCommitWriter
from memledger_platform.embedding.embedder import Embedder, LocalMiniLmEmbedder
from memledger_platform.endpoints import Endpoints
from memledger_platform.eventstore.postgres import PostgresEventStore
from memledger_query.core.retrieval_views import search_gates
from memledger_schemas.commands import (
    AssertMemory,
    CreateSpace,
    ReaffirmMemory,
    RecordFeedback,
    SetSpacePolicy,
)
from memledger_schemas.subjects import Subjects
from tests.integration.semantic_support import Pipeline, pipeline, write
from tests.support import eventually

Nats = tuple[Client, JetStreamContext]
QUERY = "when do we deploy to production?"
TUESDAY = "Production deploys happen on Tuesday mornings"
"""Cosine 0.69 with the query (all-MiniLM-L6-v2)."""
THURSDAY = "We ship releases to production every Thursday afternoon"
"""Cosine 0.62 with the query, 0.66 with TUESDAY: close behind it, and no duplicate of it."""
DENSE = {"weights": {"dense": 1.0, "keyword": 0.0}, "threshold": 0.0}


@pytest.fixture(scope="module")
def minilm() -> Embedder:
    return LocalMiniLmEmbedder()


@pytest.fixture
async def running(engines: Endpoints, event_store: PostgresEventStore, pg_schema: str,
                  nats_js: Nats, subjects: Subjects, writer: GroupCommitWriter,
                  minilm: Embedder, tmp_path: Path) -> AsyncIterator[Pipeline]:
    async with pipeline(engines.postgres_dsn, event_store, pg_schema, nats_js, subjects,
                        writer, minilm, tmp_path / "vectors") as found:
        yield found



async def search(client: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    response = await client.post("/v1/search", json={"query": QUERY, **DENSE, **body})
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def order(answer: dict[str, Any]) -> list[str]:
    return [h["item_id"] for h in answer["results"]]


async def embedded(client: httpx.AsyncClient, *item_ids: str) -> dict[str, Any]:
    """The first search that finds every one of ``item_ids`` by meaning."""
    async def found() -> dict[str, Any]:
        answer = await search(client, explain=True)
        assert set(item_ids) <= set(order(answer)), "not embedded yet"
        return answer
    return await eventually(found, timeout=60, interval=0.1)


async def test_a_search_looks_feedback_up_only_for_a_tenant_that_has_some(
        running: Pipeline) -> None:
    """What a search asks first, in one round trip: whether a policy audits it and whether
    its tenant has any feedback (if not, its candidates' feedback is not looked up)."""
    for tenant in ("acme", "globex"):
        await write(running, CreateSpace(space_id="main"), tenant=tenant)
    item = (await write(running, AssertMemory(space_id="main", kind="fact", content=TUESDAY),
                        tenant="globex"))["item_id"]
    rated = await write(running, rating(item, 4), tenant="globex")
    audited = await write(running, SetSpacePolicy(space_id="main", audit_retrievals=True))
    await running.reader.wait_for(max(rated["position"], audited["position"]), 10_000)

    def gates(tenant: str, *spaces: str) -> tuple[bool, bool]:
        return running.reader.run(search_gates, tenant, spaces)

    assert await asyncio.to_thread(gates, "acme") == (True, False)
    assert await asyncio.to_thread(gates, "acme", "other") == (False, False)
    assert await asyncio.to_thread(gates, "globex") == (False, True)


def rating(item_id: str, stars: int) -> RecordFeedback:
    return RecordFeedback(space_id="main", item_id=item_id, signal="rating", rating=stars)


async def test_ratings_lift_a_memory_above_a_closer_one_as_of_their_position_and_explain_why(
        running: Pipeline) -> None:
    await write(running, CreateSpace(space_id="main"))
    tuesday = (await write(running, AssertMemory(space_id="main", kind="fact",
                                                 content=TUESDAY)))["item_id"]
    thursday = (await write(running, AssertMemory(space_id="main", kind="fact",
                                                  content=THURSDAY)))["item_id"]
    async with running.client("acme") as client:
        before = await embedded(client, tuesday, thursday)
        assert order(before) == [tuesday, thursday]
        rated = await write(running, rating(thursday, 5), rating(thursday, 5),
                            RecordFeedback(space_id="main", item_id=thursday, signal="used"),
                            rating(tuesday, 1), rating(tuesday, 2))
        after = await search(client, explain=True, min_position=rated["position"])
        at_before = await search(client, explain=True,
                                 as_of_position=before["basis"]["position"],
                                 valid_at=before["basis"]["valid_at"])
    assert order(after) == [thursday, tuesday]
    lifted, lowered = ({h["item_id"]: h["explain"] for h in after["results"]}[i]
                       for i in (thursday, tuesday))
    assert (lifted["signals_rated"], lifted["rating_mean"], lifted["signals_used"]) == (
        2, 5.0, 1)
    assert lifted["utility"] == pytest.approx(4 / 5)
    assert lifted["utility_factor"] > 1 > lowered["utility_factor"]
    assert lowered["rating_mean"] == 1.5
    assert lifted["dense"] < lowered["dense"], "meaning alone still prefers Tuesday"
    # As of the basis before the feedback: the first ranking, exactly.
    assert order(at_before) == order(before)
    assert [h["score"] for h in at_before["results"]] == [h["score"] for h in before["results"]]
    assert {h["explain"]["utility_factor"] for h in at_before["results"]} == {1.0}


async def test_a_reaffirmation_counts_for_a_memory_and_shows_in_explain(
        running: Pipeline) -> None:
    await write(running, CreateSpace(space_id="main"))
    tuesday = (await write(running, AssertMemory(space_id="main", kind="fact",
                                                 content=TUESDAY)))["item_id"]
    async with running.client("acme") as client:
        before = await embedded(client, tuesday)
        again = await write(running, ReaffirmMemory(space_id="main", item_id=tuesday))
        after = await search(client, explain=True, min_position=again["position"])
    [hit] = [h for h in after["results"] if h["item_id"] == tuesday]
    assert hit["explain"]["signals_reaffirmed"] == 1
    assert hit["explain"]["utility"] == pytest.approx(2 / 3)
    assert hit["score"] > before["results"][0]["score"]


async def test_a_correction_rated_low_is_offered_as_a_steering_rule_candidate(
        running: Pipeline) -> None:
    await write(running, CreateSpace(space_id="main"))
    tabs = (await write(running, AssertMemory(
        space_id="main", kind="correction",
        content="Do not indent Python code with tabs")))["item_id"]
    dates = (await write(running, AssertMemory(
        space_id="main", kind="correction",
        content="Write dates in reports as ISO 8601")))["item_id"]
    unrated = await write(running, AssertMemory(space_id="main", kind="steering_rule",
                                                content="Answer in British English"))
    rated = await write(running, rating(tabs, 1), rating(tabs, 2), rating(dates, 4))
    async with running.client("acme") as client:
        async def bundle(**at: Any) -> dict[str, Any]:
            response = await client.post("/v1/context", json={
                "space_id": "main", "query": "code style", "min_position": rated["position"],
                **at})
            assert response.status_code == 200, response.text
            return {s["name"]: s["entries"] for s in response.json()["sections"]}
        now = await bundle()
        before = await bundle(as_of_position=unrated["position"])
    preferences = now["preferences"]
    assert [(e["ref"], e["flag"]) for e in preferences] == [
        (unrated["item_id"], None), (tabs, "steering_rule_candidate")]
    assert preferences[1]["text"] == ("- [steering_rule candidate] Do not indent Python code "
                                      "with tabs (rated 1.5/5 by 2)")
    assert tabs not in [e["ref"] for e in now["history"]], "offered once, as a candidate"
    assert dates in [e["ref"] for e in now["history"]]
    assert [e["flag"] for e in before["preferences"]] == [None], "no ratings yet at that basis"
