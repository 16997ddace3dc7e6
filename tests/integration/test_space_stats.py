"""``GET /v1/spaces/{space}/stats`` over a real read model: what a space holds, counted at the
answer's basis, scoped to the tenant and the space."""

import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from memledger_ingest.core.writer import GroupCommitWriter
from memledger_platform.endpoints import Endpoints
from memledger_schemas import commands as c
from tests.integration.read_support import SPACE, ReadSide, query_api, write


@pytest.fixture
async def api(engines: Endpoints, side: ReadSide) -> AsyncIterator[httpx.AsyncClient]:
    async with query_api(engines.postgres_dsn, side) as (client, _):
        yield client


async def _fill(writer: GroupCommitWriter, space: str = SPACE, tenant: str = "acme") -> None:
    session = uuid.uuid4()
    ids = [uuid.uuid4() for _ in range(4)]
    await write(writer, c.CreateSpace(space_id=space), tenant=tenant)
    await write(writer, c.StartSession(space_id=space, session_id=session),
                c.AppendMessage(space_id=space, session_id=session, role="user", content="hi"),
                c.AppendMessage(space_id=space, session_id=session, role="assistant",
                                content="hello"), tenant=tenant)
    await write(writer, *[
        c.AssertMemory(space_id=space, item_id=ids[0], kind="fact", content="one",
                       tags=("billing", "urgent")),
        c.AssertMemory(space_id=space, item_id=ids[1], kind="fact", content="two",
                       tags=("billing",)),
        c.AssertMemory(space_id=space, item_id=ids[2], kind="decision", content="three"),
        c.AssertMemory(space_id=space, item_id=ids[3], kind="fact", content="four",
                       tags=("billing",))], tenant=tenant)
    await write(writer, c.ArchiveMemory(space_id=space, item_id=ids[1], reason="stale"),
                c.RetractMemory(space_id=space, item_id=ids[2]),
                c.UpsertEntity(space_id=space, entity_id="a", name="A", type="person"),
                c.UpsertEntity(space_id=space, entity_id="b", name="B", type="person"),
                c.AssertRelation(space_id=space, source_entity="a", relation_type="knows",
                                 target_entity="b"),
                c.EndSession(space_id=space, session_id=session), tenant=tenant)


async def test_the_stats_count_items_by_kind_and_status_tags_sessions_messages_and_graph(
        api: httpx.AsyncClient, writer: GroupCommitWriter, side: ReadSide) -> None:
    await _fill(writer)
    position = side.project()
    response = await api.get(f"/v1/spaces/{SPACE}/stats")
    assert response.status_code == 200, response.text
    stats = response.json()
    assert stats["basis"]["position"] == position
    assert stats["items"] == {"fact": {"active": 2, "archived": 1},
                              "decision": {"retracted": 1}}
    assert stats["tags"] == {"billing": 2, "urgent": 1}
    assert (stats["sessions"], stats["messages"]) == ({"ended": 1}, 2)
    assert (stats["entities"], stats["relations"]) == (2, {"active": 1})


async def test_the_stats_of_another_tenants_space_or_an_unknown_one_are_not_found(
        api: httpx.AsyncClient, writer: GroupCommitWriter, side: ReadSide) -> None:
    await _fill(writer, space="theirs", tenant="other")
    side.project()
    for space in ("theirs", "nowhere"):
        response = await api.get(f"/v1/spaces/{space}/stats")
        assert response.status_code == 404, response.text
        assert response.json()["error"]["message"] == f"space {space!r} not found"


async def test_an_empty_space_has_zero_counts(api: httpx.AsyncClient,
                                              writer: GroupCommitWriter,
                                              side: ReadSide) -> None:
    await write(writer, c.CreateSpace(space_id="empty"))
    side.project()
    stats = (await api.get("/v1/spaces/empty/stats")).json()
    assert (stats["items"], stats["tags"], stats["sessions"], stats["messages"],
            stats["entities"], stats["relations"]) == ({}, {}, {}, 0, 0, {})


async def test_bad_stats_parameters_are_refused_naming_the_field(
        api: httpx.AsyncClient) -> None:
    for params, field in (({"min_position": -1}, "query.min_position"),
                          ({"wait_ms": 99_999}, "query.wait_ms")):
        response = await api.get(f"/v1/spaces/{SPACE}/stats", params=params)
        assert response.status_code == 422, params
        assert response.json()["error"]["fields"][0]["path"] == field
