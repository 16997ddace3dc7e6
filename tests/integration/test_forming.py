"""Memory that forms itself, on the real engines with the rules extractor: a conversation in;
facts, preferences, a summary, a profile and themes out; a contradicted preference superseded;
derived memories found by search and in the context; importance learned from use; and all of
what was derived from a subject gone once the subject is erased."""

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from psycopg_pool import ConnectionPool

from memledger_enricher.rules_extractor import RulesExtractor
from memledger_ingest.core.erasure import Erasure
from memledger_ingest.core.writer import GroupCommitWriter
from memledger_platform.crypto import ERASED
from memledger_platform.embedding.embedder import HashingEmbedder
from memledger_platform.endpoints import Endpoints
from memledger_platform.eventstore.postgres import PostgresEventStore
from memledger_platform.keyring_postgres import PostgresKeyring
from memledger_schemas import commands as c
from memledger_schemas.subjects import Subjects
from tests.integration.forming_support import Formers, Nats, forming
from tests.integration.ingest_support import running
from tests.integration.semantic_support import Pipeline, pipeline
from tests.support import eventually

SAID = ["Hello there.", "I prefer tea in the morning.", "I work at Acme Corp.",
        "I'm allergic to peanuts.", "Actually, I prefer coffee now."]


@pytest.fixture
async def world(engines: Endpoints, event_store: PostgresEventStore, pg_schema: str,
                nats_js: Nats, subjects: Subjects, tmp_path: Path
                ) -> AsyncIterator[tuple[Pipeline, Formers, PostgresKeyring, GroupCommitWriter]]:
    with ConnectionPool(engines.postgres_dsn, min_size=1, max_size=4, open=True,
                        kwargs={"autocommit": True}) as pool:
        keyring = PostgresKeyring(pool, os.urandom(32), pg_schema)
        async with running(GroupCommitWriter(event_store, keyring=keyring)) as writer, \
                pipeline(engines.postgres_dsn, event_store, pg_schema, nats_js, subjects,
                         writer, HashingEmbedder(), tmp_path / "vectors",
                         keyring=keyring) as p, \
                forming(p, event_store, nats_js, subjects, RulesExtractor(),
                        keyring=keyring) as f:
            yield p, f, keyring, writer


async def _talk(writer: GroupCommitWriter) -> str:
    await writer.submit("acme", [c.CreateSpace(space_id="main"),
                                 c.SetSpacePolicy(space_id="main", theme_cosine=0.6)])
    [started] = await writer.submit("acme", [c.StartSession(space_id="main", subject_id="u7")])
    session = started.ids["session_id"]
    for text in SAID:  # one at a time: each is said after the one before
        await writer.submit("acme", [c.AppendMessage(space_id="main", session_id=session,
                                                     role="user", participant="Ada",
                                                     content=text)])
    await writer.submit("acme", [
        c.AssertMemory(space_id="main", kind="observation", subject_id="u8",
                       content="the garden beds need tomatoes and basil this spring"),
        c.AssertMemory(space_id="main", kind="observation", subject_id="u8",
                       content="tomatoes and basil grow in the garden beds in spring"),
        c.EndSession(space_id="main", session_id=session)])
    return session


async def _profile(api: httpx.AsyncClient, subject: str = "ada") -> list[dict[str, Any]]:
    answer = await api.get(f"/v1/spaces/main/profiles/{subject}")
    assert answer.status_code == 200, answer.text
    facts: list[dict[str, Any]] = answer.json()["facts"]
    return facts


async def test_a_conversation_forms_a_profile_a_summary_and_themes_that_erasure_takes_back(
        world: tuple[Pipeline, Formers, PostgresKeyring, GroupCommitWriter],
        event_store: PostgresEventStore) -> None:
    p, _, keyring, writer = world
    session = await _talk(writer)
    async with p.client("acme") as api:
        async def believed() -> list[dict[str, Any]]:
            facts = await _profile(api)
            assert {fact["content"] for fact in facts} == {
                "Ada prefers coffee now", "Ada works at Acme Corp",
                "Ada is allergic to peanuts"}
            return facts
        facts = await eventually(believed, timeout=60)
        coffee = next(fact for fact in facts if "coffee" in fact["content"])
        assert coffee["triple"] == {"subject": "Ada", "predicate": "prefers",
                                    "object": "coffee now"}
        assert coffee["kind"] == "preference"
        assert coffee["confidence"] == 0.95
        assert coffee["sources"][0]["type"] == "message"

        # The tea preference was superseded by the coffee one, as any contradicted belief.
        tea = (await api.get("/v1/spaces/main/items", params={
            "kind": "preference", "include_archived": "true"})).json()["items"]
        assert [i["content"] for i in tea] == ["Ada prefers coffee now"]
        history = await _changes(api, "memory.superseded")
        assert [h["payload"]["reason"] for h in history] == ["contradiction"]
        assert history[0]["payload"]["superseded_by"] == coffee["item_id"]

        # The whole session summed up when it ended: an episode of the session.
        summary = await eventually(lambda: _summary(api, session), timeout=60)
        assert "Ada:" in summary["content"]
        assert summary["sources"]

        # Found by search, in the context bundle, and grouped into a theme.
        async def searched() -> None:
            found = (await api.post("/v1/search", json={
                "query": "Ada prefers coffee", "spaces": ["main"], "kinds": ["preference"],
                "threshold": 0})).json()["results"]
            assert [h["item_id"] for h in found][:1] == [coffee["item_id"]]
        await eventually(searched, timeout=60)
        bundle = (await api.post("/v1/context", json={"space_id": "main"})).json()
        preferences = next(s for s in bundle["sections"] if s["name"] == "preferences")
        assert any("Acme Corp" in e["text"] for e in preferences["entries"])
        assert any("coffee" in e["text"] for e in preferences["entries"])
        assert not any("tea" in e["text"] for e in preferences["entries"])
        # The garden's theme, once its members are embedded (another theme may form first).
        async def garden_theme() -> dict[str, Any]:
            found = [t for t in await _themes(api) if "garden" in t["label"]]
            assert found
            return found[0]
        garden = await eventually(garden_theme, timeout=60)
        hits = (await api.post("/v1/search", json={
            "query": "garden", "spaces": ["main"], "theme": garden["theme_id"],
            "threshold": 0})).json()["results"]
        assert {h["item_id"] for h in hits} <= set(garden["members"])
        assert hits

        # Importance learned from use, recorded with its reason; the prior kept.
        await writer.submit("acme", [c.RecordFeedback(space_id="main", signal="used",
                                                      item_id=coffee["item_id"])])
        learned = await eventually(lambda: _changes(api, "memory.importance_learned"),
                                   timeout=60)
        assert learned[0]["payload"]["prior"] == 0.5
        assert learned[0]["payload"]["importance"] > 0.5
        assert "used 1" in learned[0]["payload"]["reason"]

        # Erasing Ada's subject erases what was derived from what she said.
        await Erasure(event_store, keyring, writer).erase("acme", "u7", "asked to")
        assert await eventually(_nothing_about_ada(api), timeout=60) == []
        contents = [i["content"] for i in (await api.get("/v1/spaces/main/items", params={
            "kind": ["preference", "fact", "episode"]})).json()["items"]]
        assert contents
        assert set(contents) == {ERASED}


def _nothing_about_ada(api: httpx.AsyncClient) -> Any:
    async def check() -> list[dict[str, Any]]:
        facts = await _profile(api)
        assert facts == []
        found = (await api.post("/v1/search", json={
            "query": "coffee peanuts Acme", "spaces": ["main"], "threshold": 0,
            "kinds": ["preference", "fact", "episode"]})).json()["results"]
        assert [h for h in found if h["content"] != ERASED] == []
        return facts
    return check


async def _changes(api: httpx.AsyncClient, event_type: str) -> list[dict[str, Any]]:
    page = (await api.get("/v1/spaces/main/changes", params={"limit": 1000})).json()
    found = [c for c in page["changes"] if c["event_type"] == event_type]
    assert found
    return found


async def _summary(api: httpx.AsyncClient, session: str) -> dict[str, Any]:
    items = (await api.get("/v1/spaces/main/items", params={
        "kind": "episode", "session_id": session})).json()["items"]
    assert len(items) == 1
    assert "summary" in items[0]["tags"]
    found: dict[str, Any] = items[0]
    return found


async def _themes(api: httpx.AsyncClient) -> list[dict[str, Any]]:
    answer = await api.get("/v1/spaces/main/themes")
    assert answer.status_code == 200, answer.text
    themes: list[dict[str, Any]] = answer.json()["themes"]
    assert themes
    return themes
