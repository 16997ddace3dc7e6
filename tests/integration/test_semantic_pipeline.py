"""Semantic memory end to end on the real engines: a write is enriched (through NATS intake),
indexed, found by search within the scope asked for and only there, as of any (valid, system)
point, and packed into an agent's context bundle."""

import asyncio
import threading
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from memledger_enricher.service import Enricher
from memledger_ingest.core.writer import GroupCommitWriter
from memledger_platform.embedding.embedder import Embedder, HashingEmbedder, LocalMiniLmEmbedder
from memledger_platform.endpoints import Endpoints
from memledger_platform.eventstore.postgres import PostgresEventStore
from memledger_platform.intake_client import IntakeClient
from memledger_schemas.commands import (
    AppendMessage,
    AssertMemory,
    CreateSpace,
    ReviseMemory,
    StartSession,
)
from memledger_schemas.subjects import Subjects
from tests.integration.events_support import read_everything
from tests.integration.semantic_support import Pipeline, pipeline
from tests.support import eventually, holds

Nats = tuple[Client, JetStreamContext]
KEYWORDS_ONLY = {"weights": {"dense": 0.0, "keyword": 1.0}, "threshold": 0.0}


class GatedEmbedder(HashingEmbedder):
    """An embedder whose documents wait until the test opens the gate: a slow or stuck
    enricher (the query service's embedding of a query does not wait)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        self.gate.wait(60)
        return super().embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        # The query service's own embedding is not the enricher's: only documents wait.
        return self._one(text)


@pytest.fixture
def embedder(request: pytest.FixtureRequest) -> Embedder:
    # The real model where meaning matters; elsewhere a model-free stand-in, for speed.
    kind = getattr(request, "param", None)
    if kind == "minilm":
        return LocalMiniLmEmbedder()
    return GatedEmbedder() if kind == "gated" else HashingEmbedder()


@pytest.fixture
async def running(engines: Endpoints, event_store: PostgresEventStore, pg_schema: str,
                  nats_js: Nats, subjects: Subjects, writer: GroupCommitWriter,
                  embedder: Embedder, tmp_path: Path) -> AsyncIterator[Pipeline]:
    async with pipeline(engines.postgres_dsn, event_store, pg_schema, nats_js, subjects,
                        writer, embedder, tmp_path / "vectors") as found:
        yield found


async def _write(p: Pipeline, tenant: str, *commands: Any) -> dict[str, Any]:
    result = (await p.writer.submit(tenant, list(commands)))[-1]
    return {"position": result.position, **result.ids}


async def _search(client: httpx.AsyncClient, **body: Any) -> list[dict[str, Any]]:
    response = await client.post("/v1/search", json=body)
    assert response.status_code == 200, response.text
    hits: list[dict[str, Any]] = response.json()["results"]
    return hits


@pytest.mark.parametrize("embedder", ["minilm"], indirect=True)
async def test_a_memory_is_found_by_meaning_once_the_enricher_has_embedded_it(
        running: Pipeline, event_store: PostgresEventStore, embedder: Embedder) -> None:
    await _write(running, "acme", CreateSpace(space_id="main"))
    wrote = await _write(running, "acme", AssertMemory(
        space_id="main", kind="decision", content="The quarterly report is due on Friday"))
    await _write(running, "acme", AssertMemory(
        space_id="main", kind="fact", content="Penguins live in the southern hemisphere"))
    async with running.client("acme") as client:
        async def by_meaning() -> list[dict[str, Any]]:
            return await _search(client, query="deadline for submitting the financial summary",
                                 weights={"dense": 1.0, "keyword": 0.0}, explain=True,
                                 min_position=wrote["position"])
        hits = await eventually(holds(by_meaning), timeout=30)
    assert hits, "never found by meaning"
    assert hits[0]["item_id"] == wrote["item_id"]
    assert hits[0]["explain"]["dense"] > hits[0]["explain"]["keyword"] == 0
    embedded = [e for e in read_everything(event_store) if e.event_type == "memory.embedded"]
    assert {e.fields()["payload"]["model"] for e in embedded} == {embedder.model_id}


async def test_search_never_returns_another_tenants_or_another_spaces_items(
        running: Pipeline) -> None:
    for tenant in ("acme", "globex"):
        for space in ("main", "side"):
            await _write(running, tenant, CreateSpace(space_id=space))
            last = await _write(running, tenant, AssertMemory(
                space_id=space, kind="fact", content=f"shared secret phrase of {tenant} {space}"))
    async with running.client("acme") as acme:
        everywhere = await _search(acme, query="shared secret phrase", min_position=last[
            "position"], **KEYWORDS_ONLY)
        main_only = await _search(acme, query="shared secret phrase", spaces=["main"],
                                  **KEYWORDS_ONLY)
    assert sorted(h["content"] for h in everywhere) == [
        "shared secret phrase of acme main", "shared secret phrase of acme side"]
    assert [h["content"] for h in main_only] == ["shared secret phrase of acme main"]


async def test_as_of_search_follows_valid_time_and_system_time(running: Pipeline) -> None:
    await _write(running, "acme", CreateSpace(space_id="main"))
    first = await _write(running, "acme", AssertMemory(
        space_id="main", kind="fact", content="the office is in Lisbon",
        valid_from=datetime(2020, 1, 1, tzinfo=UTC), valid_to=datetime(2022, 1, 1, tzinfo=UTC)))
    revised = await _write(running, "acme", ReviseMemory(
        space_id="main", item_id=first["item_id"], content="the office is in Porto",
        valid_from=datetime(2021, 1, 1, tzinfo=UTC)))
    async with running.client("acme") as client:
        async def office(**at: Any) -> list[str]:
            return [h["content"] for h in await _search(
                client, query="office", min_position=revised["position"], **KEYWORDS_ONLY,
                **at)]
        assert await office(valid_at="2020-06-01T00:00:00Z") == ["the office is in Lisbon"]
        assert await office(valid_at="2021-06-01T00:00:00Z") == ["the office is in Porto"]
        assert await office(valid_at="2021-06-01T00:00:00Z",
                            as_of_position=first["position"]) == ["the office is in Lisbon"]
        assert await office(valid_at="2019-06-01T00:00:00Z") == []
        assert await office() == []  # valid_to 2022: not true now


async def test_a_period_named_in_the_query_lifts_what_happened_then_and_is_listed(
        running: Pipeline) -> None:
    await _write(running, "acme", CreateSpace(space_id="main"))
    for month in (3, 5):
        last = await _write(running, "acme", AssertMemory(
            space_id="main", kind="episode", content=f"we met the design agency (month {month})",
            valid_from=datetime(2023, month, 10, tzinfo=UTC)))
    async with running.client("acme") as client:
        async def asked(query: str) -> dict[str, Any]:
            response = await client.post("/v1/search", json={
                "query": query, "valid_at": "2023-08-01T00:00:00Z", "explain": True,
                "min_position": last["position"], **KEYWORDS_ONLY})
            assert response.status_code == 200, response.text
            found: dict[str, Any] = response.json()
            return found

        in_may = await asked("when did we meet the design agency in May 2023?")
        plain = await asked("when did we meet the design agency?")
    assert [w["text"] for w in in_may["time_windows"]] == ["in May 2023"]
    assert in_may["time_windows"][0]["valid_from"].startswith("2023-05-01T00:00:00")
    assert in_may["results"][0]["content"].endswith("(month 5)")
    assert in_may["results"][0]["explain"]["time_nearness"] == 1.0
    assert plain["time_windows"] == []
    assert {h["explain"]["time_factor"] for h in plain["results"]} == {1.0}


async def test_a_context_bundle_holds_the_session_and_the_steering_rules_within_its_budget(
        running: Pipeline) -> None:
    # What a conversation says about its people is the forming service's (test_forming.py).
    await _write(running, "acme", CreateSpace(space_id="main"))
    session = (await _write(running, "acme", StartSession(space_id="main")))["session_id"]
    await _write(running, "acme", AssertMemory(
        space_id="main", kind="steering_rule", content="Always answer in British English"))
    said = await _write(running, "acme", AppendMessage(
        space_id="main", session_id=session, role="user",
        content="I'm allergic to peanuts. Which snacks are safe?"))
    async with running.client("acme") as client:
        answer = (await client.post("/v1/context", json={
            "space_id": "main", "session_id": session, "budget_tokens": 120,
            "min_position": said["position"]})).json()
    sections = {s["name"]: [e["text"] for e in s["entries"]] for s in answer["sections"]}
    assert sections["session"] == ["user: I'm allergic to peanuts. Which snacks are safe?"]
    assert "- [steering_rule] Always answer in British English" in sections["preferences"]
    assert answer["used_tokens"] <= 120
    assert len(answer["rendered"]) / 4 <= 120


async def test_a_context_bundle_leaves_a_near_duplicate_of_a_memory_out_of_its_history(
        running: Pipeline) -> None:
    await _write(running, "acme", CreateSpace(space_id="main"))
    thursdays = "We deploy to production on Thursdays"
    for content in (thursdays, thursdays, "The staging database is refreshed on Mondays"):
        last = await _write(running, "acme", AssertMemory(
            space_id="main", kind="decision", content=content))
    async with running.client("acme") as client:
        async def bundle() -> dict[str, list[str]] | None:
            answer = (await client.post("/v1/context", json={
                "space_id": "main", "query": "we deploy to production", "budget_tokens": 400,
                "min_position": last["position"]})).json()
            sections = {s["name"]: [e["text"] for e in s["entries"]] for s in answer["sections"]}
            # Until both copies are embedded, neither is a near-duplicate of the other.
            return sections if len(sections["memories"]) == 1 else None
        sections = await eventually(holds(bundle), timeout=30)
    assert sections is not None, "the two copies were never collapsed"
    assert sections["memories"] == [f"- [decision] {thursdays}"]
    assert sections["history"] == ["- [decision] The staging database is refreshed on Mondays"]


async def test_enrichment_seen_again_records_nothing_twice(
        running: Pipeline, event_store: PostgresEventStore, nats_js: Nats, subjects: Subjects,
        embedder: Embedder) -> None:
    await _write(running, "acme", CreateSpace(space_id="main"))
    await _write(running, "acme", AssertMemory(
        space_id="main", kind="preference", content="I prefer green tea. My name is Ada"))

    def enrichment() -> list[str]:
        return [e.event_type for e in read_everything(event_store)
                if e.event_type.startswith(("memory.embedded", "preference", "memory.entities"))]

    async def settled() -> bool:
        return len(enrichment()) == 4  # embedding, 2 preferences, entities
    await eventually(holds(settled), timeout=30)
    # A second enricher (another consumer: as after a lost checkpoint) sees every event again.
    nc, js = nats_js
    client = IntakeClient(nc, js, subjects, "enricher")
    await client.start()
    again = Enricher(js, subjects, embedder, client, durable="enricher-again")
    stop = asyncio.Event()
    task = asyncio.create_task(again.run(stop))
    await eventually(holds(lambda: _true_when(again.enriched >= 1)), timeout=30)
    stop.set()
    await task
    await client.close()
    assert len(enrichment()) == 4
    assert again.refused == 0


async def _true_when(condition: bool) -> bool:
    return condition


@pytest.mark.parametrize("embedder", ["gated"], indirect=True)
async def test_a_stuck_embedder_never_holds_up_writes_reads_or_keyword_search(
        running: Pipeline, event_store: PostgresEventStore, embedder: GatedEmbedder) -> None:
    await _write(running, "acme", CreateSpace(space_id="main"))
    wrote = await _write(running, "acme", AssertMemory(
        space_id="main", kind="fact", content="the backup runs at midnight"))
    more = await _write(running, "acme", AssertMemory(
        space_id="main", kind="fact", content="the backup is kept for thirty days"))
    async with running.client("acme") as client:
        read = await client.get(f"/v1/spaces/main/items/{wrote['item_id']}",
                                params={"min_position": more["position"]})
        found = await _search(client, query="backup midnight", min_position=more["position"],
                              **KEYWORDS_ONLY)
    assert read.status_code == 200
    assert found[0]["item_id"] == wrote["item_id"]
    assert not [e for e in read_everything(event_store) if e.event_type == "memory.embedded"]
    embedder.gate.set()

    async def embedded() -> bool:
        return len([e for e in read_everything(event_store)
                    if e.event_type == "memory.embedded"]) == 2
    await eventually(holds(embedded), timeout=30)


@pytest.mark.parametrize("embedder", ["gated"], indirect=True)
async def test_a_fresh_write_is_found_by_its_words_before_it_is_embedded(
        running: Pipeline, event_store: PostgresEventStore, embedder: GatedEmbedder) -> None:
    # A memory embedded already, so dense search has hits to bound the fresh one's cosine by.
    embedder.gate.set()
    await _write(running, "acme", CreateSpace(space_id="main"))
    await _write(running, "acme", AssertMemory(
        space_id="main", kind="fact", content="lunch is served in the canteen"))

    async def embedded(count: int) -> bool:
        return len([e for e in read_everything(event_store)
                    if e.event_type == "memory.embedded"]) == count
    await eventually(holds(lambda: embedded(1)), timeout=30)
    embedder.gate.clear()  # the enricher is stuck from here on
    fresh = await _write(running, "acme", AssertMemory(
        space_id="main", kind="fact", content="the nightly backup runs at midnight"))
    asked = {"query": "when does the nightly backup run", "explain": True,
             "min_position": fresh["position"]}
    async with running.client("acme") as client:
        audited = await client.post("/v1/search", json={**asked, "audit": True})
        assert audited.status_code == 200, audited.text
        before = audited.json()["results"]
        assert await embedded(1), "the fresh memory was embedded before it was searched for"
        assert [h["item_id"] for h in before] == [fresh["item_id"]], "not found by its words"
        assert before[0]["explain"]["words_only"] == 1
        assert before[0]["relevance"] == before[0]["explain"]["keyword"]
        assert before[0]["explain"]["fused"] == before[0]["explain"]["keyword"]
        embedder.gate.set()
        await eventually(holds(lambda: embedded(2)), timeout=30)

        async def by_meaning_too() -> list[dict[str, Any]]:
            hits = await _search(client, **asked)
            return hits if hits and not hits[0]["explain"]["words_only"] else []
        after = await eventually(holds(by_meaning_too), timeout=30)
        # replayed at its basis, before the embedding, it ranks by the words alone again
        replay = (await client.post(
            f"/v1/retrievals/{audited.json()['retrieval_id']}/replay")).json()
    assert after[0]["item_id"] == fresh["item_id"]
    assert (replay["same"], replay["differences"]) == (True, []), replay


PAINTINGS = (((2023, 3, 1), "I painted a lake at the old flat"),
             ((2023, 6, 1), "Big news: I moved to Lisbon last week!"),
             ((2023, 8, 1), "I painted the river today, painting every day now"))
ANCHORED = "What did Ana paint before she moved to Lisbon?"


async def _said(running: Pipeline, day: tuple[int, int, int], content: str) -> dict[str, Any]:
    """``content`` said by Ana at noon on ``day``, in a session of its own (so no turn's
    words are among another's keywords)."""
    session = (await _write(running, "acme", StartSession(space_id="talk")))["session_id"]
    return await _write(running, "acme", AppendMessage(
        space_id="talk", session_id=session, role="user", participant="Ana", content=content,
        said_at=datetime(*day, 12, tzinfo=UTC)))


async def test_an_event_named_in_the_query_lifts_what_happened_on_its_side_of_it(
        running: Pipeline) -> None:
    await _write(running, "acme", CreateSpace(space_id="talk"))
    earlier, anchor, later = [await _said(running, *told) for told in PAINTINGS]
    assert running.semantic is not None
    recipe = running.semantic.recipe
    async with running.client("acme") as client:
        async def asked(query: str, **more: Any) -> dict[str, Any]:
            response = await client.post("/v1/search", json={
                "query": query, "valid_at": "2023-09-01T00:00:00Z", "explain": True,
                "kinds": ["message"], "min_position": later["position"], **KEYWORDS_ONLY,
                **more})
            assert response.status_code == 200, response.text
            found: dict[str, Any] = response.json()
            return found

        query = ANCHORED
        lifted = await asked(query)
        running.semantic.recipe = replace(recipe, anchor_weight=0.0)
        off = await asked(query)
        running.semantic.recipe = recipe
        unknown = await asked("What did Ana paint before the earthquake?")
        not_yet = await asked(query, as_of_position=earlier["position"])
    paintings = {earlier["message_id"]: "earlier", later["message_id"]: "later"}

    def order(answer: dict[str, Any]) -> list[str]:
        return [paintings[h["message_id"]] for h in answer["results"]
                if h["message_id"] in paintings]

    assert order(off) == ["later", "earlier"], "without the anchor, more words and recency win"
    assert off["time_windows"] == []
    assert order(lifted) == ["earlier", "later"]
    [window] = lifted["time_windows"]
    assert (window["text"], window["relation"], window["anchor_id"]) == (
        "before she moved to Lisbon", "before", anchor["message_id"])
    assert window["anchor_text"] == "Big news: I moved to Lisbon last week!"
    assert window["valid_from"] is None
    assert window["valid_to"].startswith("2023-06-01T12:00:00")
    first = lifted["results"][0]["explain"]
    assert (first["anchor_nearness"], first["anchor_resolved"]) == (1.0, 1.0)
    assert unknown["time_windows"] == []
    assert {h["explain"]["anchor_resolved"] for h in unknown["results"]} == {0.0}
    assert not_yet["time_windows"] == [], "as of before the move was told, it has no time"


async def test_an_audited_search_replays_to_the_same_anchor_after_a_better_one_is_told(
        running: Pipeline) -> None:
    await _write(running, "acme", CreateSpace(space_id="talk"))
    earlier, anchor, later = [await _said(running, *told) for told in PAINTINGS]
    async with running.client("acme") as client:
        async def asked(**more: Any) -> dict[str, Any]:
            response = await client.post(f"/v1/{more.pop('path', 'search')}", json=more)
            assert response.status_code == 200, response.text
            found: dict[str, Any] = response.json()
            return found

        body = {"query": ANCHORED, "valid_at": "2023-09-01T00:00:00Z", "kinds": ["message"],
                **KEYWORDS_ONLY}
        audited = await asked(**body, audit=True, min_position=later["position"])
        told = await _said(running, (2023, 2, 1),
                           "Ana moved to Lisbon! Moved, moved, moved to Lisbon at last")
        now = await asked(**body, min_position=told["position"])
        replay = await asked(path=f"retrievals/{audited['retrieval_id']}/replay")
    paintings = {earlier["message_id"]: "earlier", later["message_id"]: "later"}

    def order(refs: list[str]) -> list[str]:
        return [paintings[ref] for ref in refs if ref in paintings]

    assert [w["anchor_id"] for w in audited["time_windows"]] == [anchor["message_id"]]
    assert order([h["message_id"] for h in audited["results"]]) == ["earlier", "later"]
    assert [w["anchor_id"] for w in now["time_windows"]] == [told["message_id"]], (
        "the better anchor counts once it is told")
    assert order([h["message_id"] for h in now["results"]]) == ["later", "earlier"], (
        "both paintings came after the move told now")
    # Keyword statistics drift with later writes (test_retrieval_audit.py); the anchor does not.
    assert replay["same_items"], replay["differences"]
    assert order([r["ref"] for r in replay["replayed"]]) == ["earlier", "later"]
