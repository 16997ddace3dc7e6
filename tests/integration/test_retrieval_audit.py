"""The retrieval audit on the real engines: an audited search or context call is recorded
through NATS intake and ingest (``retrieval.performed``), read back with ``GET
/v1/retrievals/{id}``, and replayed at its basis to the same list after more writes (new
similar memories, more feedback); another tenant never sees it."""

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
from memledger_schemas.commands import (
    AppendMessage,
    AssertMemory,
    CreateSpace,
    RecordFeedback,
    SetSpacePolicy,
    StartSession,
)
from memledger_schemas.subjects import Subjects
from tests.integration.events_support import read_everything
from tests.integration.semantic_support import Pipeline, pipeline, write
from tests.support import eventually

Nats = tuple[Client, JetStreamContext]
QUERY = "when do we deploy to production?"
FIRST = ("Production deploys happen on Tuesday mornings",
         "We ship releases to production every Thursday afternoon",
         "Deployments to production are frozen during December")
LATER = ("We deploy to production on Tuesdays and Thursdays",
         "Production deployments need a second reviewer",
         "Deploy production hotfixes at any time of day")
"""Written after the audited call: as relevant to the query as the first ones, or more."""
DENSE = {"weights": {"dense": 1.0, "keyword": 0.0}}


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



async def memories(p: Pipeline, contents: tuple[str, ...]) -> list[str]:
    return [(await write(p, AssertMemory(space_id="main", kind="fact", content=c)))["item_id"]
            for c in contents]


async def post(client: httpx.AsyncClient, path: str, **body: Any) -> dict[str, Any]:
    response = await client.post(path, json=body)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


async def all_embedded(client: httpx.AsyncClient, item_ids: list[str]) -> None:
    async def found() -> None:
        answer = await post(client, "/v1/search", query=QUERY, threshold=0.0, k=20, **DENSE)
        assert set(item_ids) <= {h["item_id"] for h in answer["results"]}, "not embedded yet"
    await eventually(found, timeout=60, interval=0.1)


async def recorded(client: httpx.AsyncClient, answer: dict[str, Any]) -> dict[str, Any]:
    response = await client.get(f"/v1/retrievals/{answer['retrieval_id']}",
                                params={"min_position": answer["retrieval_position"]})
    assert response.status_code == 200, response.text
    record: dict[str, Any] = response.json()
    return record


def shown(answer: dict[str, Any]) -> list[tuple[str, float]]:
    return [(h["item_id"], h["score"]) for h in answer["results"]]


async def change_the_world(p: Pipeline, client: httpx.AsyncClient, rated: list[str]) -> None:
    """More writes after the audited call: new similar memories (embedded), and ratings that
    turn the first ranking upside down."""
    later = await memories(p, LATER)
    await write(p, *[RecordFeedback(space_id="main", item_id=i, signal="rating",
                                    rating=5 if n else 1) for n, i in enumerate(rated)])
    await all_embedded(client, later)


async def test_an_audited_search_is_recorded_and_replays_to_the_same_list_after_more_writes(
        running: Pipeline) -> None:
    await write(running, CreateSpace(space_id="main"))
    first = await memories(running, FIRST)
    async with running.client("acme") as client:
        await all_embedded(client, first)
        audited = await post(client, "/v1/search", query=QUERY, audit=True, **DENSE)
        record = await recorded(client, audited)
        await change_the_world(running, client, first)
        now = await post(client, "/v1/search", query=QUERY, **DENSE)
        replay = await post(client, f"/v1/retrievals/{audited['retrieval_id']}/replay")
    assert [r for r, _ in shown(audited)] == first, "by meaning, the closest first"
    assert [(r["ref"], r["score"]) for r in record["results"]] == shown(audited)
    assert (record["operation"], record["query"], record["spaces"]) == ("search", QUERY, [])
    assert record["basis"] == audited["basis"]
    assert record["parameters"]["as_of_position"] == audited["basis"]["position"]
    assert record["policy_version"].startswith("rank-")
    assert shown(now) != shown(audited), "the world did change"
    assert (replay["same"], replay["same_items"], replay["differences"]) == (True, True, [])
    assert replay["replayed"] == replay["recorded"] == record["results"]
    assert replay["policy_version"] == replay["current_policy_version"]
    [event] = [e for e in read_everything(running.writer._store)
               if e.event_type == "retrieval.performed"]
    assert event.position == audited["retrieval_position"]


def only_scores_drifted(replay: dict[str, Any], most: float) -> None:
    """The same entries in the same order, each score within ``most`` (relative) of its
    recorded one."""
    assert replay["same_items"], replay["differences"]
    for difference in replay["differences"]:
        recorded, replayed = difference["recorded"]["score"], difference["replayed"]["score"]
        assert abs(replayed - recorded) <= most * recorded, difference


async def test_a_hybrid_replay_keeps_its_list_though_keyword_statistics_drift(
        running: Pipeline) -> None:
    """Keyword (BM25) IDF is computed over the whole index when a search runs, so later writes
    that share the query's words lower keyword scores (the default order weighs keywords 0.7:
    scores measured here 6-21 % lower, in a space of three memories); the items and
    their order hold. A dense-only replay is exact (above)."""
    await write(running, CreateSpace(space_id="main"))
    first = await memories(running, FIRST)
    async with running.client("acme") as client:
        await all_embedded(client, first)
        audited = await post(client, "/v1/search", query=QUERY, audit=True)
        await change_the_world(running, client, first)
        replay = await post(client, f"/v1/retrievals/{audited['retrieval_id']}/replay")
    assert not replay["same"], "the keyword statistics did drift"
    only_scores_drifted(replay, most=0.3)


async def test_a_space_policy_audits_every_context_bundle_and_its_replay_keeps_its_list(
        running: Pipeline) -> None:
    await write(running, CreateSpace(space_id="main"))
    await write(running, SetSpacePolicy(space_id="main", audit_retrievals=True))
    session = (await write(running, StartSession(space_id="main")))["session_id"]
    said = await write(running, AppendMessage(space_id="main", session_id=session, role="user",
                                              content=QUERY))
    first = await memories(running, FIRST)
    async with running.client("acme") as client:
        await all_embedded(client, first)
        bundle = await post(client, "/v1/context", space_id="main", session_id=session)
        record = await recorded(client, bundle)
        await change_the_world(running, client, first)
        await write(running, AppendMessage(space_id="main", session_id=session, role="user",
                                           content="and what about staging?"))
        replay = await post(client, f"/v1/retrievals/{bundle['retrieval_id']}/replay")
    assert bundle["retrieval_id"], "audited by the space's policy"
    assert (record["operation"], record["query"], record["spaces"]) == (
        "context", QUERY, ["main"])
    sections = {r["section"] for r in record["results"]}
    assert {"session", "memories"} <= sections
    assert said["message_id"] in [r["ref"] for r in record["results"]]
    # A context bundle searches with keywords too: its scores drift like a hybrid search's.
    only_scores_drifted(replay, most=0.3)


async def test_an_unaudited_call_records_nothing(running: Pipeline) -> None:
    await write(running, CreateSpace(space_id="main"))
    async with running.client("acme") as client:
        answer = await post(client, "/v1/search", query=QUERY)
    assert (answer["retrieval_id"], answer["retrieval_position"]) == (None, None)
    assert not [e for e in read_everything(running.writer._store)
                if e.event_type == "retrieval.performed"]


async def test_another_tenant_can_neither_read_nor_replay_a_retrieval(
        running: Pipeline) -> None:
    await write(running, CreateSpace(space_id="main"))
    await write(running, CreateSpace(space_id="main"), tenant="globex")
    async with running.client("acme") as acme, running.client("globex") as globex:
        audited = await post(acme, "/v1/search", query=QUERY, spaces=["main"], audit=True)
        await recorded(acme, audited)
        path = f"/v1/retrievals/{audited['retrieval_id']}"
        read = await globex.get(path, params={"min_position": audited["retrieval_position"]})
        replayed = await globex.post(f"{path}/replay")
        unknown = await acme.get("/v1/retrievals/00000000-0000-0000-0000-000000000000")
    assert [r.status_code for r in (read, replayed, unknown)] == [404, 404, 404]
    assert read.json()["error"]["code"] == "not_found"
