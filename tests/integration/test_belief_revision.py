"""Belief revision, promotion and merges on the real engines: what a write decides (the
contradicting triple superseded in the same commit), how the read models show it (history,
as-of, the supersession chain) and how a policy changes it."""

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import httpx
import psycopg
import pytest
from psycopg_pool import ConnectionPool

from memledger_ingest.core.writer import GroupCommitWriter
from memledger_platform.auth import TENANT_HEADER
from memledger_platform.clock import SystemClock
from memledger_platform.endpoints import Endpoints
from memledger_query.core.reader import Reader
from memledger_query.entrypoints import lifecycle_http
from memledger_query.entrypoints.http import create_app
from memledger_schemas import commands as c
from memledger_schemas.events import Triple
from tests.integration.read_support import SPACE, TENANT, ReadSide, write

Y2020, Y2022, Y2024 = (datetime(y, 1, 1, tzinfo=UTC) for y in (2020, 2022, 2024))
PARIS, BERLIN, ROME = (UUID(f"0190a000-0000-7000-8000-00000000b00{n}") for n in range(3))


def _lives_in(city: str) -> Triple:
    return Triple(subject="Ada", predicate="lives_in", object=city)


@pytest.fixture
async def api(engines: Endpoints, side: ReadSide) -> AsyncIterator[httpx.AsyncClient]:
    pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
        engines.postgres_dsn, min_size=1, max_size=4, kwargs={"autocommit": True}, open=True)
    try:
        reader = Reader(pool, side.names)
        app = create_app(reader, side.store, "default")
        app.include_router(lifecycle_http.router(reader, SystemClock()))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://query",
                                     headers={TENANT_HEADER: TENANT}) as client:
            yield client
    finally:
        pool.close()


async def _get(api: httpx.AsyncClient, path: str, **params: Any) -> Any:
    response = await api.get(path, params={k: v.isoformat() if isinstance(v, datetime) else v
                                           for k, v in params.items()})
    assert response.status_code == 200, response.text
    return response.json()


async def _moves(writer: GroupCommitWriter) -> tuple[int, int]:
    await write(writer, c.CreateSpace(space_id=SPACE))
    paris = await write(writer, c.AssertMemory(
        space_id=SPACE, item_id=PARIS, kind="fact", content="Ada lives in Paris",
        triple=_lives_in("Paris"), valid_from=Y2020))
    berlin = await write(writer, c.AssertMemory(
        space_id=SPACE, item_id=BERLIN, kind="fact", content="Ada lives in Berlin",
        triple=_lives_in("berlin"), valid_from=Y2024), actor="key:ada")
    assert berlin.ids == {"item_id": str(BERLIN), "superseded": str(PARIS)}
    return paris.position, berlin.position


async def test_a_contradicting_triple_closes_the_old_value_in_valid_time_and_keeps_history(
        writer: GroupCommitWriter, side: ReadSide, api: httpx.AsyncClient) -> None:
    before, after = await _moves(writer)
    side.project()
    items = f"/v1/spaces/{SPACE}/items"

    now = await _get(api, items)
    assert [i["item_id"] for i in now["items"]] == [str(BERLIN)]
    in_2022 = await _get(api, items, valid_at=Y2022)
    assert [(i["item_id"], i["status"]) for i in in_2022["items"]] == [(str(PARIS), "superseded")]
    as_known_then = await _get(api, items, as_of_position=before)
    assert [(i["item_id"], i["status"]) for i in as_known_then["items"]] == [
        (str(PARIS), "active")]
    history = await _get(api, f"{items}/{PARIS}/history")
    closing = [ch for ch in history["changes"] if ch["event_type"] == "memory.superseded"]
    assert [(ch["reason"], ch["payload"]["superseded_by"]) for ch in closing] == [
        ("contradiction", str(BERLIN))]
    assert closing[0]["position"] < after, "closed in the same commit, just before"

    chain = await _get(api, f"{items}/{BERLIN}/chain")
    assert [i["item_id"] for i in chain["items"]] == [str(PARIS), str(BERLIN)]
    assert [(link["item_id"], link["superseded_by"], link["reason"]) for link in
            chain["links"]] == [(str(PARIS), str(BERLIN), "contradiction")]
    assert chain["items"][0]["content"] == "Ada lives in Paris"
    early = await _get(api, f"{items}/{PARIS}/chain", as_of_position=before)
    assert early["links"] == []


async def test_restating_the_same_object_supersedes_as_a_restatement(
        writer: GroupCommitWriter, side: ReadSide, api: httpx.AsyncClient) -> None:
    await _moves(writer)
    again = await write(writer, c.AssertMemory(
        space_id=SPACE, item_id=ROME, kind="fact", content="Ada still lives in Berlin",
        triple=_lives_in("Berlin")))
    side.project()

    chain = await _get(api, f"/v1/spaces/{SPACE}/items/{again.ids['item_id']}/chain")
    assert [link["reason"] for link in chain["links"]] == ["contradiction", "restated"]


async def test_a_multi_valued_predicate_keeps_every_object_and_the_policy_is_versioned(
        writer: GroupCommitWriter, side: ReadSide, api: httpx.AsyncClient) -> None:
    await write(writer, c.CreateSpace(space_id=SPACE))
    await write(writer, c.SetSpacePolicy(space_id=SPACE, cardinality={"speaks": "multi"}))
    for item, language in ((PARIS, "French"), (BERLIN, "German")):
        result = await write(writer, c.AssertMemory(
            space_id=SPACE, item_id=item, kind="fact", content=f"Ada speaks {language}",
            triple=Triple(subject="Ada", predicate="speaks", object=language)))
        assert "superseded" not in result.ids
    await write(writer, c.SetSpacePolicy(space_id=SPACE, default_cardinality="multi"))
    side.project()

    now = await _get(api, f"/v1/spaces/{SPACE}/items")
    assert {i["item_id"] for i in now["items"]} == {str(PARIS), str(BERLIN)}
    policies = await _get(api, f"/v1/spaces/{SPACE}/policies")
    assert [(v["policy_version"], v["policy"]["default_cardinality"])
            for v in policies["versions"]] == [(1, "single"), (2, "multi")]


async def test_session_memory_claims_no_belief_until_promoted_and_then_is_project_memory(
        writer: GroupCommitWriter, side: ReadSide, api: httpx.AsyncClient) -> None:
    await write(writer, c.CreateSpace(space_id=SPACE))
    session = (await write(writer, c.StartSession(space_id=SPACE))).ids["session_id"]
    await write(writer, c.AssertMemory(space_id=SPACE, item_id=PARIS, kind="fact",
                                       content="Ada lives in Paris", triple=_lives_in("Paris")))
    said = await write(writer, c.AssertMemory(
        space_id=SPACE, item_id=BERLIN, kind="fact", content="Ada: I moved to Berlin",
        triple=_lives_in("Berlin"), session_id=UUID(session)))
    assert "superseded" not in said.ids, "a session's word is not yet the project's belief"
    promoted = await write(writer, c.PromoteMemory(space_id=SPACE, item_id=BERLIN,
                                                   reason="confirmed by Ada"))
    side.project()

    item = f"/v1/spaces/{SPACE}/items/{BERLIN}"
    assert (await _get(api, item))["item"]["layer"] == "project"
    assert (await _get(api, item, as_of_position=promoted.position - 1))["item"][
        "layer"] == "session"


async def test_a_merge_keeps_the_provenance_of_every_duplicate(
        writer: GroupCommitWriter, side: ReadSide, api: httpx.AsyncClient) -> None:
    await write(writer, c.CreateSpace(space_id=SPACE))
    for item in (PARIS, BERLIN, ROME):
        await write(writer, c.AssertMemory(space_id=SPACE, item_id=item, kind="observation",
                                           content="the build needs Python 3.11"))
    await write(writer, c.MergeMemories(space_id=SPACE, item_id=PARIS,
                                        merged_item_ids=(BERLIN, ROME), similarity=0.99))
    side.project()

    survivor = (await _get(api, f"/v1/spaces/{SPACE}/items/{PARIS}"))["item"]
    assert {s["ref"] for s in survivor["sources"]} == {str(BERLIN), str(ROME)}
    now = await _get(api, f"/v1/spaces/{SPACE}/items")
    assert [i["item_id"] for i in now["items"]] == [str(PARIS)]
    chain = await _get(api, f"/v1/spaces/{SPACE}/items/{ROME}/chain")
    assert {(link["item_id"], link["superseded_by"]) for link in chain["links"]} == {
        (str(BERLIN), str(PARIS)), (str(ROME), str(PARIS))}
    assert all(link["reason"].startswith("merged") for link in chain["links"])
