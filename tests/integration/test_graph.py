"""The graph over HTTP, as of a position and a valid time: neighbours breadth-first over the
relations live at the basis, the items that mention an entity (by name, alias or id, as of
their latest extraction), and the graph itself; over a real PostgreSQL read model."""

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import httpx
import pytest

from memledger_ingest.core.writer import GroupCommitWriter
from memledger_platform.endpoints import Endpoints
from memledger_schemas import commands as c
from memledger_schemas.events import ExtractedEntity
from tests.integration.read_support import SPACE, ReadSide, query_api, write

Y2020, Y2021, Y2022 = (datetime(y, 1, 1, tzinfo=UTC) for y in (2020, 2021, 2022))
KNOWS_ADA, WORKS_AT_GLOBEX, MEMBER_2020 = UUID(int=1), UUID(int=2), UUID(int=3)
NOTE, OTHER, LATER = (UUID(f"0190a000-0000-7000-8000-00000000b00{i}") for i in (1, 2, 3))


@pytest.fixture
async def api(engines: Endpoints, side: ReadSide) -> AsyncIterator[httpx.AsyncClient]:
    async with query_api(engines.postgres_dsn, side) as (client, _):
        yield client


async def _ok(api: httpx.AsyncClient, path: str, **params: Any) -> dict[str, Any]:
    encoded = {k: v.isoformat() if isinstance(v, datetime) else v for k, v in params.items()}
    response = await api.get(path, params=encoded)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _entities(answer: dict[str, Any]) -> list[tuple[str, int]]:
    return [(n["entity_id"], n["depth"]) for n in answer["neighbours"]]


def _neighbours(entity: str) -> str:
    return f"/v1/spaces/{SPACE}/entities/{entity}/neighbours"


def _items(entity: str) -> str:
    return f"/v1/spaces/{SPACE}/entities/{entity}/items"


@pytest.fixture
async def people(writer: GroupCommitWriter, side: ReadSide) -> dict[str, int]:
    """alice knows bob, bob knows ada, alice works at globex (retracted later), carol was a
    member of acme from 2020 to 2022; the positions of the changes."""
    await write(writer, c.CreateSpace(space_id=SPACE))
    for entity, kind, aliases in (("alice", "person", ("Ali",)), ("bob", "person", ()),
                                  ("ada", "person", ()), ("globex", "org", ()),
                                  ("carol", "person", ()), ("acme", "org", ())):
        await write(writer, c.UpsertEntity(space_id=SPACE, entity_id=entity,
                                           name=entity.title(), type=kind, aliases=aliases))
    found = {"related": (await write(
        writer, _relation(UUID(int=4), "alice", "knows", "bob"),
        _relation(KNOWS_ADA, "bob", "knows", "ada"),
        _relation(WORKS_AT_GLOBEX, "alice", "works_at", "globex"),
        _relation(MEMBER_2020, "carol", "member_of", "acme", valid_from=Y2020,
                  valid_to=Y2022))).position}
    found["retracted"] = (await write(writer, c.RetractRelation(
        space_id=SPACE, relation_id=WORKS_AT_GLOBEX))).position
    found["late"] = (await write(writer, c.UpsertEntity(
        space_id=SPACE, entity_id="zed", name="Zed", type="person"))).position
    side.project()
    return found


def _relation(relation_id: UUID, source: str, kind: str, target: str, **valid: datetime
              ) -> c.AssertRelation:
    return c.AssertRelation(space_id=SPACE, relation_id=relation_id, source_entity=source,
                            relation_type=kind, target_entity=target, **valid)


# --- neighbours -----------------------------------------------------------------------------

async def test_neighbours_at_depth_one_are_the_entities_one_live_relation_away(
        api: httpx.AsyncClient, people: dict[str, int]) -> None:
    answer = await _ok(api, _neighbours("bob"))
    assert answer["entity"]["entity_id"] == "bob"
    assert _entities(answer) == [("ada", 1), ("alice", 1)]
    assert {(r["source_entity"], r["target_entity"]) for r in answer["relations"]} == {
        ("alice", "bob"), ("bob", "ada")}
    assert answer["basis"]["position"] >= people["late"]


async def test_neighbours_at_depth_two_add_the_neighbours_of_the_neighbours(
        api: httpx.AsyncClient, people: dict[str, int]) -> None:
    answer = await _ok(api, _neighbours("ada"), depth=2)
    assert _entities(answer) == [("bob", 1), ("alice", 2)]
    assert len(answer["relations"]) == 2


async def test_a_retracted_relation_is_walked_as_of_before_its_retraction_only(
        api: httpx.AsyncClient, people: dict[str, int]) -> None:
    before = await _ok(api, _neighbours("alice"), as_of_position=people["related"])
    after = await _ok(api, _neighbours("alice"), as_of_position=people["retracted"])
    assert _entities(before) == [("bob", 1), ("globex", 1)]
    assert _entities(after) == [("bob", 1)]
    assert before["basis"]["position"] == people["related"]


async def test_a_relation_with_a_valid_interval_is_walked_only_at_a_valid_time_inside_it(
        api: httpx.AsyncClient, people: dict[str, int]) -> None:
    inside = await _ok(api, _neighbours("carol"), valid_at=Y2021)
    at_its_end = await _ok(api, _neighbours("carol"), valid_at=Y2022)
    now = await _ok(api, _neighbours("carol"))
    assert _entities(inside) == [("acme", 1)]
    assert inside["relations"][0]["valid_from"].startswith("2020-01-01")
    assert _entities(at_its_end) == _entities(now) == []


async def test_an_entity_unknown_at_the_basis_is_not_found_and_depth_is_bounded(
        api: httpx.AsyncClient, people: dict[str, int]) -> None:
    unknown = await api.get(_neighbours("nobody"))
    not_yet = await api.get(_neighbours("zed"), params={"as_of_position": people["related"]})
    too_deep = await api.get(_neighbours("alice"), params={"depth": 4})
    assert (unknown.status_code, not_yet.status_code) == (404, 404)
    assert "'zed'" in not_yet.json()["error"]["message"]
    assert too_deep.status_code == 422
    assert [f["path"] for f in too_deep.json()["error"]["fields"]] == ["query.depth"]
    assert (await api.get(_items("nobody"))).status_code == 404


async def test_an_entity_id_with_a_slash_is_found(
        api: httpx.AsyncClient, writer: GroupCommitWriter, side: ReadSide) -> None:
    await write(writer, c.CreateSpace(space_id=SPACE))
    await write(writer, c.UpsertEntity(space_id=SPACE, entity_id="wikidata/Q42",
                                       name="Douglas Adams", type="person"))
    side.project()
    answer = await _ok(api, _neighbours("wikidata/Q42"))
    assert answer["entity"]["name"] == "Douglas Adams"


# --- the graph, as of -----------------------------------------------------------------------

async def test_the_graph_lists_the_relations_that_hold_at_its_valid_time(
        api: httpx.AsyncClient, people: dict[str, int]) -> None:
    in_2021 = await _ok(api, f"/v1/spaces/{SPACE}/graph", valid_at=Y2021)
    now = await _ok(api, f"/v1/spaces/{SPACE}/graph")
    before = await _ok(api, f"/v1/spaces/{SPACE}/graph", as_of_position=people["related"])

    def kinds(graph: dict[str, Any]) -> list[tuple[str, str]]:
        return [(r["relation_type"], r["status"]) for r in graph["relations"]]
    assert ("member_of", "active") in kinds(in_2021)
    assert "member_of" not in dict(kinds(now))
    assert dict(kinds(now))["works_at"] == "retracted"
    assert dict(kinds(before))["works_at"] == "active"
    assert "zed" not in [e["entity_id"] for e in before["entities"]]


# --- items mentioning an entity ---------------------------------------------------------------

@pytest.fixture
async def mentioned(writer: GroupCommitWriter, side: ReadSide) -> dict[str, int]:
    """Entity a-lovelace, named Alice, alias Ali. NOTE mentions her by name (then, re-extracted,
    only Bob); OTHER by her alias; LATER by her id, and is archived."""
    await write(writer, c.CreateSpace(space_id=SPACE))
    await write(writer, c.UpsertEntity(space_id=SPACE, entity_id="a-lovelace", name="Alice",
                                       type="person", aliases=("Ali",)))
    for item, text in ((NOTE, "ALICE met Bob"), (OTHER, "ali said hi"),
                       (LATER, "see A-Lovelace")):
        await write(writer, c.AssertMemory(space_id=SPACE, item_id=item, kind="fact",
                                           content=text))
    found = {"extracted": (await write(
        writer, _extraction(NOTE, 1, "ALICE", "Bob"), _extraction(OTHER, 1, "ali"),
        _extraction(LATER, 1, "A-LOVELACE"))).position}
    await write(writer, c.ReviseMemory(space_id=SPACE, item_id=NOTE, content="Bob left"))
    found["re-extracted"] = (await write(writer, _extraction(NOTE, 2, "Bob"))).position
    found["archived"] = (await write(writer, c.ArchiveMemory(
        space_id=SPACE, item_id=LATER, reason="stale"))).position
    side.project()
    return found


def _extraction(item: UUID, version: int, *names: str) -> c.RecordEntities:
    return c.RecordEntities(space_id=SPACE, item_id=item, item_version=version,
                            extractor="test", actor="enricher", entities=tuple(
                                ExtractedEntity(name=n, type="thing") for n in names))


def _contents(answer: dict[str, Any]) -> list[str]:
    return sorted(i["content"] for i in answer["items"])


async def test_items_mention_an_entity_by_its_name_an_alias_or_its_id_in_any_case(
        api: httpx.AsyncClient, mentioned: dict[str, int]) -> None:
    answer = await _ok(api, _items("a-lovelace"), as_of_position=mentioned["extracted"])
    assert _contents(answer) == ["ALICE met Bob", "ali said hi", "see A-Lovelace"]
    assert answer["basis"]["position"] == mentioned["extracted"]


async def test_an_item_stops_mentioning_an_entity_once_re_extracted_without_it(
        api: httpx.AsyncClient, mentioned: dict[str, int]) -> None:
    path = _items("a-lovelace")
    before = await _ok(api, path, as_of_position=mentioned["re-extracted"] - 1)
    after = await _ok(api, path, as_of_position=mentioned["re-extracted"])
    assert "ALICE met Bob" not in _contents(before)  # revised: its content is "Bob left"
    assert "Bob left" in _contents(before)  # still mentioning: its extraction was of v1
    assert "Bob left" not in _contents(after)


async def test_archived_items_leave_the_mentions_and_the_limit_holds(
        api: httpx.AsyncClient, mentioned: dict[str, int]) -> None:
    now = await _ok(api, _items("a-lovelace"))
    one = await _ok(api, _items("a-lovelace"), limit=1, as_of_position=mentioned["extracted"])
    assert _contents(now) == ["ali said hi"]
    assert len(one["items"]) == 1
