"""The Cohere extractor in the pipeline, against a local fake of Cohere's chat API: what the
model answers becomes derived memories, entities and relations; an answer that is not the JSON
asked for, and a rate limit that never lifts, are dead-lettered with the reason while the rest
goes on; and a rebuild of the read models, or the consumer started again, asks nothing again.
"""

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from memledger_enricher.cohere_extractor import CohereExtractor
from memledger_enricher.forming import entity_ref
from memledger_ingest.core.writer import GroupCommitWriter
from memledger_platform.embedding.embedder import HashingEmbedder
from memledger_platform.endpoints import Endpoints
from memledger_platform.eventstore.postgres import PostgresEventStore
from memledger_platform.readmodel import schema
from memledger_projector.core import rebuild
from memledger_schemas import commands as c
from memledger_schemas.subjects import HDR_DLQ_REASON, Subjects
from tests.cohere_chat_fake import FakeChat
from tests.cohere_fake import serving
from tests.integration.forming_support import Nats, forming
from tests.integration.nats_support import stream_messages
from tests.integration.semantic_support import Pipeline, pipeline
from tests.support import eventually

MALFORMED, LIMITED = "I have opinions.", "I am always rate limited."


@pytest.fixture
def fake() -> Iterator[FakeChat]:
    with serving(FakeChat()) as running:
        yield running  # type: ignore[misc]


@pytest.fixture
async def piped(engines: Endpoints, event_store: PostgresEventStore, pg_schema: str,
                nats_js: Nats, subjects: Subjects, writer: GroupCommitWriter, tmp_path: Path
                ) -> AsyncIterator[Pipeline]:
    async with pipeline(engines.postgres_dsn, event_store, pg_schema, nats_js, subjects,
                        writer, HashingEmbedder(), tmp_path / "vectors") as p:
        yield p


def _extractor(fake: FakeChat) -> CohereExtractor:
    return CohereExtractor("good-key", base_url=fake.url, timeout_seconds=5, max_retries=0)


async def _say(writer: GroupCommitWriter, *texts: str) -> str:
    await writer.submit("acme", [c.CreateSpace(space_id="main")])
    [started] = await writer.submit("acme", [c.StartSession(space_id="main")])
    session = started.ids["session_id"]
    for text in texts:
        await writer.submit("acme", [c.AppendMessage(space_id="main", session_id=session,
                                                     role="user", participant="Ada",
                                                     content=text)])
    await writer.submit("acme", [c.EndSession(space_id="main", session_id=session)])
    return session


async def test_what_the_model_answers_is_derived_and_what_it_cannot_is_dead_lettered(
        piped: Pipeline, fake: FakeChat, event_store: PostgresEventStore, nats_js: Nats,
        subjects: Subjects, writer: GroupCommitWriter, engines: Endpoints,
        pg_schema: str) -> None:
    fake.by_text[MALFORMED] = "Sure! Ada likes tea, I think."
    fake.limited.add(LIMITED)
    async with forming(piped, event_store, nats_js, subjects, _extractor(fake),
                       scheduler=False, max_deliveries=2) as f:
        session = await _say(writer, MALFORMED, LIMITED, "I prefer tea and I work at Acme")
        async with piped.client("acme") as api:
            async def derived() -> list[dict[str, Any]]:
                answer = await api.get("/v1/spaces/main/profiles/Ada")
                assert answer.status_code == 200, answer.text
                facts: list[dict[str, Any]] = answer.json()["facts"]
                assert [f["content"] for f in facts] == ["Ada prefers tea"]
                return facts
            [tea] = await eventually(derived, timeout=60)
            history = (await api.get(f"/v1/spaces/main/items/{tea['item_id']}/history")).json()
            [asserted] = [h for h in history["changes"] if h["event_type"] == "memory.asserted"]
            derivation = asserted["payload"]["derivation"]
            assert derivation == {"extractor": "cohere/command-a-03-2025",
                                  "prompt_version": "cohere-json/v1"}
            ada = entity_ref("main", "Ada")

            async def related() -> None:
                # the relation is its own command, projected after the profile's fact maybe
                walked = (await api.get(f"/v1/spaces/main/entities/{ada}/neighbours")).json()
                assert [(r["relation_type"], r["target_entity"])
                        for r in walked["relations"]] == [("works_at", entity_ref("main", "Acme"))]
            await eventually(related, timeout=60)

            async def summed_up() -> None:
                items = (await api.get("/v1/spaces/main/items", params={
                    "kind": "episode", "session_id": session})).json()["items"]
                assert [i["content"].split(":")[0] for i in items] == ["They talked"]
            await eventually(summed_up, timeout=60)

        async def dead_lettered() -> dict[str, str]:
            letters = await stream_messages(nats_js[1], subjects.dead_letter_stream,
                                            subjects.dead_letter("enricher", "acme"))
            assert len(letters) == 2
            return {(m.headers or {})[HDR_DLQ_REASON]: m.data.decode() for m in letters}
        reasons = await eventually(dead_lettered, timeout=60)
        [malformed] = [r for r in reasons if "not the JSON asked for" in r]
        [limited] = [r for r in reasons if "gave up after 2 attempts" in r]
        assert "429" in limited
        assert f.forming.dead_lettered == 2
        asked = len(fake.chats)
        assert asked == 3 + 1 + 1  # each turn, the limited one again, the summary
    assert malformed

    # The derived memories are events: a rebuild replays them, and the consumer started again
    # asks only about what is new.
    names = schema.Names(pg_schema)
    with psycopg.connect(engines.postgres_dsn, autocommit=True) as conn:
        done = rebuild.rebuild(conn, event_store, names)
        rebuilt = conn.execute(f'SELECT count(*) FROM "{names.schema(done.version)}".items '
                               "WHERE kind IN ('preference', 'episode')").fetchone()
    assert rebuilt == (2,)
    assert len(fake.chats) == asked
    fake.by_text["I speak Welsh"] = {"facts": [{
        "kind": "fact", "subject": "Ada", "predicate": "speaks", "object": "Welsh",
        "statement": "Ada speaks Welsh", "confidence": 0.9}], "entities": [], "relations": []}
    async with forming(piped, event_store, nats_js, subjects, _extractor(fake),
                       scheduler=False):
        [said] = await writer.submit("acme", [c.StartSession(space_id="main")])
        await writer.submit("acme", [c.AppendMessage(
            space_id="main", session_id=said.ids["session_id"], role="user",
            participant="Ada", content="I speak Welsh")])
        async with piped.client("acme") as api:
            async def welsh() -> None:
                answer = await api.get("/v1/spaces/main/profiles/Ada")
                assert answer.status_code == 200, answer.text
                assert "Ada speaks Welsh" in [f["content"] for f in answer.json()["facts"]]
            await eventually(welsh, timeout=60)
    assert len(fake.chats) == asked + 1
