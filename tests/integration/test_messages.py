"""Messages are memory, on the real engines: an appended message is found by its words at once
and by meaning once embedded, together with memories or apart (``kinds``), narrowed by
session, agent, participant and role, with the turns around it (``window``), as of when it was
said and when it was appended; sessions are listed so a hit can be followed to its
conversation; the context bundle offers earlier conversations; bad input is refused naming the
field, and nothing is written."""

import os
import threading
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client as McpClient
from nats.aio.client import Client
from nats.js import JetStreamContext
from psycopg_pool import ConnectionPool
from starlette.routing import Mount

from memledger_cli.mcp_server import build_server
from memledger_client import NO_RETRY, AsyncClient
from memledger_ingest.core.erasure import Erasure
from memledger_ingest.core.writer import GroupCommitWriter
from memledger_ingest.entrypoints.http import create_app as create_ingest_app
from memledger_platform.embedding.embedder import Embedder, HashingEmbedder, LocalMiniLmEmbedder
from memledger_platform.endpoints import Endpoints
from memledger_platform.eventstore.postgres import PostgresEventStore
from memledger_platform.keyring_postgres import PostgresKeyring
from memledger_schemas.commands import (
    AppendMessage,
    AssertMemory,
    CreateSpace,
    EndSession,
    StartSession,
)
from memledger_schemas.subjects import Subjects
from tests.integration.events_support import read_everything
from tests.integration.ingest_support import running as writing
from tests.integration.semantic_support import Pipeline, pipeline, write
from tests.support import eventually

Nats = tuple[Client, JetStreamContext]
KEYWORDS = {"weights": {"dense": 0.0, "keyword": 1.0}, "threshold": 0.0}
MAY_2023 = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
POTTERY = "I signed up for a pottery class in Lisbon last weekend"


class GatedEmbedder(HashingEmbedder):
    """An embedder that hangs until the test opens the gate: nothing gets embedded."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        self.gate.wait(60)
        return super().embed_documents(texts)


@pytest.fixture
def embedder(request: pytest.FixtureRequest) -> Embedder:
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
        if isinstance(embedder, GatedEmbedder):
            embedder.gate.set()  # the enricher's batch under way can finish


async def _session(p: Pipeline, space: str = "main", **start: Any) -> str:
    return str((await write(p, StartSession(space_id=space, **start)))["session_id"])


async def _say(p: Pipeline, session: str, content: str, *, role: str = "user",
               space: str = "main", **fields: Any) -> dict[str, Any]:
    return await write(p, AppendMessage(space_id=space, session_id=session, role=role,
                                        content=content, **fields))


async def _search(p: Pipeline, status: int = 200, **body: Any) -> Any:
    async with p.client("acme") as client:
        response = await client.post("/v1/search", json=body)
    assert response.status_code == status, response.text
    return response.json()


async def _hits(p: Pipeline, **body: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = (await _search(p, **{**KEYWORDS, **body}))["results"]
    return found


def _contents(hits: list[dict[str, Any]]) -> list[str]:
    return [h["content"] for h in hits]


# --- found, by words and by meaning ------------------------------------------------------

@pytest.mark.parametrize("embedder", ["gated"], indirect=True)
async def test_a_message_is_found_by_its_words_at_once_before_it_is_embedded(
        running: Pipeline, event_store: PostgresEventStore) -> None:
    await write(running, CreateSpace(space_id="main"))
    session = await _session(running)
    said = await _say(running, session, POTTERY, participant="Dana", said_at=MAY_2023,
                      agent_id="scribe")

    [hit] = await _hits(running, query="pottery class", min_position=said["position"])

    assert (hit["kind"], hit["item_id"], hit["message_id"]) == (
        "message", said["message_id"], said["message_id"])
    assert (hit["session_id"], hit["role"], hit["participant"], hit["agent_id"]) == (
        session, "user", "Dana", "scribe")
    assert datetime.fromisoformat(hit["said_at"]) == MAY_2023
    assert hit["layer"] == "filtered"
    assert not [e for e in read_everything(event_store)
                if e.event_type == "conversation.message_embedded"]


@pytest.mark.parametrize("embedder", ["minilm"], indirect=True)
async def test_a_message_is_found_by_meaning_once_the_enricher_has_embedded_it(
        running: Pipeline, event_store: PostgresEventStore, embedder: Embedder) -> None:
    await write(running, CreateSpace(space_id="main"))
    session = await _session(running)
    said = await _say(running, session, POTTERY, said_at=MAY_2023)
    await _say(running, session, "The train to Porto was delayed by an hour",
               role="assistant")

    async def by_meaning() -> list[dict[str, Any]]:
        found = await _search(running, query="a ceramics workshop she joined",
                              weights={"dense": 1.0, "keyword": 0.0}, threshold=0.2,
                              explain=True, min_position=said["position"])
        assert found["results"], "not yet embedded"
        hits: list[dict[str, Any]] = found["results"]
        return hits

    hits = await eventually(by_meaning, timeout=60)
    assert hits[0]["message_id"] == said["message_id"]
    assert hits[0]["explain"]["dense"] > 0 == hits[0]["explain"]["keyword"]
    embedded = [e.fields()["payload"] for e in read_everything(event_store)
                if e.event_type == "conversation.message_embedded"]
    assert {p["model"] for p in embedded} == {embedder.model_id}


# --- kinds and filters ----------------------------------------------------------------------

async def test_messages_and_memories_are_found_together_and_kinds_include_or_exclude_them(
        running: Pipeline) -> None:
    await write(running, CreateSpace(space_id="main"))
    session = await _session(running)
    await write(running, AssertMemory(space_id="main", kind="fact",
                                      content="Dana teaches a pottery class"))
    said = await _say(running, session, POTTERY)
    seen = {"min_position": said["position"], "query": "pottery class"}

    everything = await _hits(running, **seen)
    messages = await _hits(running, kinds=["message"], **seen)
    memories = await _hits(running, kinds=["fact", "decision"], **seen)
    both = await _hits(running, kinds=["fact", "message"], **seen)

    assert sorted(h["kind"] for h in everything) == ["fact", "message"]
    assert _contents(messages) == [POTTERY]
    assert _contents(memories) == ["Dana teaches a pottery class"]
    assert sorted(h["kind"] for h in both) == ["fact", "message"]


async def test_a_turn_that_asks_ranks_below_the_turn_that_answers_and_explain_says_why(
        running: Pipeline) -> None:
    await write(running, CreateSpace(space_id="main"))
    answer = "I signed up for a pottery class in Lisbon."
    asks = "Did you sign up for a pottery class in Lisbon?"
    await _say(running, await _session(running), answer)
    await write(running, AssertMemory(space_id="main", kind="fact",
                                      content="Which pottery class in Lisbon?"))
    said = await _say(running, await _session(running), asks)  # a session of its own: no
    # words of the answer before it, so both turns match the query's words alike

    hits = await _hits(running, query="pottery class in Lisbon", explain=True,
                       min_position=said["position"])

    by_content = {h["content"]: h["explain"] for h in hits}
    assert [h["content"] for h in hits if h["kind"] == "message"] == [answer, asks]
    assert by_content[asks]["keyword"] == by_content[answer]["keyword"]
    assert (by_content[asks]["asking"], by_content[asks]["ask_factor"]) == (1.0, 0.7)
    assert (by_content[answer]["asking"], by_content[answer]["ask_factor"]) == (0.0, 1.0)
    assert by_content["Which pottery class in Lisbon?"]["ask_factor"] == 1.0, \
        "a memory that asks is what was kept: it is not lowered"


async def test_session_agent_participant_and_role_narrow_a_search_to_those_messages(
        running: Pipeline) -> None:
    await write(running, CreateSpace(space_id="main"))
    first, second = await _session(running), await _session(running)
    await _say(running, first, "the garden needs watering", participant="Dana",
               agent_id="scribe")
    await _say(running, first, "I will water the garden at six", role="assistant",
               participant="Helper", agent_id="scribe")
    await _say(running, second, "the garden fence is broken", participant="Eli")
    await _say(running, second, "garden tool output", role="tool")
    last = await write(running, AssertMemory(space_id="main", kind="fact",
                                             content="the garden is south facing"))
    seen = {"query": "garden", "min_position": last["position"]}

    assert len(await _hits(running, **seen)) == 5
    assert sorted(_contents(await _hits(running, session_id=first, **seen))) == [
        "I will water the garden at six", "the garden needs watering"]
    assert sorted(_contents(await _hits(running, agent_id="scribe", **seen))) == [
        "I will water the garden at six", "the garden needs watering"]
    assert _contents(await _hits(running, participant="Eli", **seen)) == [
        "the garden fence is broken"]
    assert sorted(_contents(await _hits(running, role="user", **seen))) == [
        "the garden fence is broken", "the garden needs watering"]
    assert sorted(_contents(await _hits(running, role=["assistant", "tool"], **seen))) == [
        "I will water the garden at six", "garden tool output"]
    assert _contents(await _hits(running, role="user", session_id=second, **seen)) == [
        "the garden fence is broken"]


async def test_a_message_hit_brings_the_turns_before_and_after_it_with_window(
        running: Pipeline) -> None:
    await write(running, CreateSpace(space_id="main"))
    session, other = await _session(running), await _session(running)
    turns = ["hello there", "hi, how was your week", POTTERY, "that sounds lovely",
             "it was, the teacher was great", "see you soon"]
    for n, text in enumerate(turns):
        last = await _say(running, session, text, role="user" if n % 2 == 0 else "assistant",
                          participant="Dana" if n % 2 == 0 else "Helper")
        await _say(running, other, f"unrelated turn {n}")

    # The two turns after it are found by its words too (the turns before count among a
    # message's keywords): it comes first, said in so many words.
    hit, *_ = await _hits(running, query="pottery", window=2, min_position=last["position"])
    plain, *_ = await _hits(running, query="pottery", min_position=last["position"])
    assert hit["content"] == plain["content"] == POTTERY

    assert [t["content"] for t in hit["window"]["before"]] == turns[:2]
    assert [t["content"] for t in hit["window"]["after"]] == turns[3:5]
    assert [t["participant"] for t in hit["window"]["before"]] == ["Dana", "Helper"]
    assert plain["window"] is None
    # as of the position it was appended at, nothing after it had been said yet
    then, *_ = await _hits(running, query="pottery", window=2,
                           as_of_position=hit["window"]["after"][0]["position"])
    assert [t["content"] for t in then["window"]["after"]] == turns[3:4]


async def test_a_message_said_in_the_past_is_found_from_when_it_was_said_once_appended(
        running: Pipeline) -> None:
    await write(running, CreateSpace(space_id="main"))
    session = await _session(running)
    before = await write(running, AssertMemory(space_id="main", kind="fact", content="x"))
    said = await _say(running, session, POTTERY, said_at=MAY_2023)

    async def found(**at: Any) -> list[str]:
        return _contents(await _hits(running, query="pottery", min_position=said["position"],
                                     **at))

    assert await found() == [POTTERY]
    assert await found(valid_at="2023-06-01T00:00:00Z") == [POTTERY]
    assert await found(valid_at="2023-05-08T13:56:00Z") == [POTTERY]
    assert await found(valid_at="2023-05-08T13:55:59Z") == []
    assert await found(as_of_position=before["position"]) == []
    assert await found(as_of_position=said["position"]) == [POTTERY]
    async with running.client("acme") as client:
        talk = (await client.get(f"/v1/spaces/main/sessions/{session}/messages")).json()
    assert datetime.fromisoformat(talk["messages"][0]["said_at"]) == MAY_2023


# --- sessions ---------------------------------------------------------------------------------

async def test_sessions_are_listed_newest_first_filtered_and_paged(running: Pipeline) -> None:
    await write(running, CreateSpace(space_id="main"))
    await write(running, CreateSpace(space_id="side"))
    first = await _session(running, title="first", agent_id="scribe")
    second = await _session(running, title="second")
    third = await _session(running, title="third", agent_id="scribe")
    assert len({first, second, third}) == 3
    await _session(running, "side", title="elsewhere")
    await _say(running, first, "hi", participant="Dana", said_at=MAY_2023)
    await _say(running, first, "hello", role="assistant", participant="Helper")
    await _say(running, second, "hey", participant="Eli")
    last = await write(running, EndSession(space_id="main", session_id=second))

    async def listed(**params: Any) -> dict[str, Any]:
        async with running.client("acme") as client:
            response = await client.get("/v1/spaces/main/sessions",
                                        params={"min_position": last["position"], **params})
        assert response.status_code == 200, response.text
        found: dict[str, Any] = response.json()
        return found

    def titles(page: dict[str, Any]) -> list[str]:
        return [s["title"] for s in page["sessions"]]

    everything = await listed()
    assert titles(everything) == ["third", "second", "first"]
    assert everything["next_cursor"] is None
    oldest = everything["sessions"][-1]
    assert (oldest["session_id"], oldest["messages"], oldest["participants"]) == (
        first, 2, ["Dana", "Helper"])
    assert datetime.fromisoformat(oldest["first_said_at"]) == MAY_2023
    assert titles(await listed(agent_id="scribe")) == ["third", "first"]
    assert titles(await listed(participant="Eli")) == ["second"]
    assert titles(await listed(status="ended")) == ["second"]
    assert titles(await listed(status="active")) == ["third", "first"]
    started = datetime.fromisoformat(everything["sessions"][1]["started_at"])
    assert titles(await listed(started_from=started.isoformat())) == ["third", "second"]
    assert titles(await listed(started_to=started.isoformat())) == ["first"]
    assert titles(await listed(ended_from=(started - timedelta(days=1)).isoformat())) == [
        "second"]
    page = await listed(limit=2)
    assert titles(page) == ["third", "second"]
    rest = await listed(limit=2, after=page["next_cursor"])
    assert titles(rest) == ["first"]
    assert rest["next_cursor"] is None
    async with running.client("acme") as client:
        forged = await client.get("/v1/spaces/main/sessions", params={"after": "bm90IG1pbmU"})
        wrong = await client.get("/v1/spaces/main/sessions", params={"status": "paused"})
        nowhere = await client.get("/v1/spaces/nowhere/sessions")
    assert nowhere.status_code == 404
    assert (forged.status_code, forged.json()["error"]["code"]) == (400, "invalid_cursor")
    assert [f["path"] for f in wrong.json()["error"]["fields"]] == ["query.status"]


# --- context --------------------------------------------------------------------------------

async def test_a_context_bundle_offers_relevant_earlier_turns_of_other_sessions(
        running: Pipeline) -> None:
    await write(running, CreateSpace(space_id="main"))
    earlier, now = await _session(running), await _session(running)
    await _say(running, earlier, POTTERY, participant="Dana", said_at=MAY_2023)
    last = await _say(running, now, "remind me about the pottery class")

    async def bundle() -> tuple[dict[str, Any], dict[str, list[str]]]:
        async with running.client("acme") as client:
            answer = (await client.post("/v1/context", json={
                "space_id": "main", "session_id": now,
                "min_position": last["position"]})).json()
        found = {s["name"]: [e["text"] for e in s["entries"]] for s in answer["sections"]}
        # found once indexed: by its words alone until embedded, then by meaning too
        assert found["conversations"], "not yet indexed"
        return answer, found

    answer, sections = await eventually(bundle, timeout=30)
    assert sections["conversations"] == [f"- [2023-05-08 Dana] {POTTERY}"]
    assert sections["session"] == ["user: remind me about the pottery class"]
    assert sections["memories"] == []
    assert "## Earlier conversations" in answer["rendered"]


# --- bad input -------------------------------------------------------------------------------

async def test_bad_said_at_window_and_kinds_are_refused_naming_the_field_writing_nothing(
        running: Pipeline, event_store: PostgresEventStore) -> None:
    await write(running, CreateSpace(space_id="main"))
    session = await _session(running)
    written = len(read_everything(event_store))
    ahead = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    async with running.writer_client("acme") as ingest:
        future = await ingest.post(f"/v1/spaces/main/sessions/{session}/messages",
                                   json={"role": "user", "content": "hi", "said_at": ahead})
        batch = await ingest.post("/v1/batch", json={"commands": [
            {"command": "append_message", "space_id": "main", "session_id": session,
             "role": "user", "content": "fine"},
            {"command": "append_message", "space_id": "main", "session_id": session,
             "role": "user", "content": "hi", "said_at": ahead}]})
    wide = await _search(running, 422, query="hi", window=11)
    unknown = await _search(running, 422, query="hi", kinds=["message", "messages"])

    assert future.status_code == batch.status_code == 422
    assert [f["path"] for f in future.json()["error"]["fields"]] == ["said_at"]
    assert "future" in future.json()["error"]["message"]
    assert [f["path"] for f in batch.json()["error"]["fields"]] == ["commands.1.said_at"]
    assert [f["path"] for f in wide["error"]["fields"]] == ["body.window"]
    assert [f["path"] for f in unknown["error"]["fields"]] == ["body.kinds.1"]
    assert len(read_everything(event_store)) == written


# --- erasure ---------------------------------------------------------------------------------

@pytest.fixture
async def sealed(engines: Endpoints, event_store: PostgresEventStore, pg_schema: str,
                 nats_js: Nats, subjects: Subjects, tmp_path: Path
                 ) -> AsyncIterator[tuple[Pipeline, PostgresKeyring, GroupCommitWriter]]:
    with ConnectionPool(engines.postgres_dsn, min_size=1, max_size=4, open=True,
                        kwargs={"autocommit": True}) as pool:
        keyring = PostgresKeyring(pool, os.urandom(32), pg_schema)
        async with writing(GroupCommitWriter(event_store, keyring=keyring)) as writer, \
                pipeline(engines.postgres_dsn, event_store, pg_schema, nats_js, subjects,
                         writer, HashingEmbedder(), tmp_path / "vectors",
                         keyring=keyring) as p:
            yield p, keyring, writer


async def test_an_erased_subjects_messages_leave_search_and_the_others_stay(
        sealed: tuple[Pipeline, PostgresKeyring, GroupCommitWriter],
        event_store: PostgresEventStore) -> None:
    p, keyring, writer = sealed
    await write(p, CreateSpace(space_id="main"))
    session = await _session(p)
    await _say(p, session, "my quixotic pottery diary", subject_id="u7", participant="Ada")
    kept = await _say(p, session, "his quixotic pottery notes", subject_id="u8")

    async def embedded() -> None:
        assert len([e for e in read_everything(event_store)
                    if e.event_type == "conversation.message_embedded"]) == 2
    await eventually(embedded, timeout=30)
    assert len(await _hits(p, query="quixotic pottery", min_position=kept["position"])) == 2

    receipt = await Erasure(event_store, keyring, writer).erase("acme", "u7", "asked to")

    async def gone() -> list[dict[str, Any]]:
        found = await _hits(p, query="quixotic pottery", min_position=receipt["position"])
        assert len(found) == 1
        return found
    [left] = await eventually(gone, timeout=30)
    assert left["message_id"] == kept["message_id"]
    assert p.index.points("acme", str(kept["message_id"])) != []
    assert await _hits(p, query="diary", participant="Ada") == []
    dense = await _search(p, query="my quixotic pottery diary", threshold=0.0,
                          weights={"dense": 1.0, "keyword": 0.0})
    assert [h["message_id"] for h in dense["results"]] == [kept["message_id"]]


# --- the client and MCP recall ----------------------------------------------------------------

async def test_the_client_and_mcp_recall_find_messages_with_their_turns(
        running: Pipeline, writer: GroupCommitWriter) -> None:
    both = create_ingest_app(writer, _healthy, "default")
    both.routes.append(Mount("/", app=running.app))
    transport = httpx.ASGITransport(app=both)
    async with AsyncClient("http://memledger", tenant="acme", retry=NO_RETRY,
                           transport=transport) as ml:
        await ml.create_space("main")
        session = (await ml.start_session("main", title="week")).ids["session_id"]
        await ml.append_message("main", session, "user", "how was your week?",
                                participant="Helper", said_at=MAY_2023)
        said = await ml.append_message("main", session, "user", POTTERY, participant="Dana",
                                       said_at=MAY_2023)
        answer = await ml.search("pottery class", kinds=["message"], window=1,
                                 weights={"dense": 0.0, "keyword": 1.0})
        listed = await ml.sessions("main", participant="Dana")

        async def recall() -> list[dict[str, Any]]:
            async with McpClient(build_server(ml, "main"), mode="legacy") as agent:
                recalled = await agent.call_tool("recall", {
                    "query": "pottery class", "kinds": ["message"], "participant": "Dana",
                    "window": 1})
            assert recalled.structured_content is not None, recalled.content
            # recall ranks with the default weights: relevant enough once embedded
            assert recalled.structured_content["hits"], "not yet embedded"
            hits: list[dict[str, Any]] = recalled.structured_content["hits"]
            return hits

        recalled = await eventually(recall, timeout=30)
    [hit] = answer.results
    assert (hit.message_id, hit.participant, hit.said_at) == (
        said.ids["message_id"], "Dana", MAY_2023)
    assert hit.window is not None
    assert [t.content for t in hit.window.before] == ["how was your week?"]
    assert [s.session_id for s in listed.sessions] == [session]
    [found] = recalled
    assert (found["kind"], found["message_id"], found["session_id"]) == (
        "message", said.ids["message_id"], session)
    assert found["context"] == ["  Helper: how was your week?", f"> Dana: {POTTERY}"]


async def _healthy() -> dict[str, Any]:
    return {"status": "ok"}
