"""The query HTTP API over a real PostgreSQL read model (filled by the projector's own store
functions): time travel and its basis, filters and paging, history, the change feed,
read-your-writes, errors, conversations, the graph and health."""

import asyncio
import base64
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import httpx
import orjson
import pytest

from memledger_ingest.core.writer import GroupCommitWriter
from memledger_platform.auth import TENANT_HEADER
from memledger_platform.endpoints import Endpoints
from memledger_schemas import commands as c
from memledger_schemas.events import Triple
from tests.integration.events_support import read_everything
from tests.integration.read_support import (
    SPACE,
    TENANT,
    CountingReader,
    ReadSide,
    query_api,
    write,
)
from tests.support import eventually

Y2020, Y2022, Y2023, Y2024 = (datetime(y, 1, 1, tzinfo=UTC) for y in (2020, 2022, 2023, 2024))
ITEM = UUID("0190a000-0000-7000-8000-00000000a001")
SESSION = UUID("0190a000-0000-7000-8000-00000000c001")
ITEM_PATH = f"/v1/spaces/{SPACE}/items/{ITEM}"
BASIS = {"position", "recorded_at", "valid_at"}




@pytest.fixture
async def served(engines: Endpoints, side: ReadSide
                 ) -> AsyncIterator[tuple[httpx.AsyncClient, CountingReader]]:
    async with query_api(engines.postgres_dsn, side) as both:
        yield both


@pytest.fixture
def api(served: tuple[httpx.AsyncClient, CountingReader]) -> httpx.AsyncClient:
    return served[0]


@pytest.fixture
async def revised(writer: GroupCommitWriter, side: ReadSide) -> tuple[int, int]:
    """An item "blue" since 2020, revised to "green" from 2024 on: the two positions."""
    await write(writer, c.CreateSpace(space_id=SPACE))
    asserted = await write(writer, c.AssertMemory(
        space_id=SPACE, item_id=ITEM, kind="fact", content="blue", valid_from=Y2020,
        tags=("sky",)), actor="key:alice")
    changed = await write(writer, c.ReviseMemory(
        space_id=SPACE, item_id=ITEM, content="green", valid_from=Y2024, reason="repainted"),
        actor="key:bob")
    side.project()
    return asserted.position, changed.position


async def _ok(api: httpx.AsyncClient, path: str, **params: Any) -> dict[str, Any]:
    response = await api.get(path, params=_encoded(params))
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _encoded(params: dict[str, Any]) -> dict[str, Any]:
    return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in params.items()}


def _recorded_at(side: ReadSide, position: int) -> datetime:
    return side.store.read_all(position - 1, 1)[0].recorded_at


def _cursor(document: object) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(document)).decode().rstrip("=")


# --- item by id: now, as of valid time, as of system time, by replay -------------------------

async def test_an_item_is_read_now_and_as_of_a_valid_time_a_position_and_a_recording_time(
        api: httpx.AsyncClient, side: ReadSide, revised: tuple[int, int]) -> None:
    first, second = revised

    now = await _ok(api, ITEM_PATH)
    in_2022 = await _ok(api, ITEM_PATH, valid_at=Y2022)
    at_first = await _ok(api, ITEM_PATH, as_of_position=first)
    recorded = await _ok(api, ITEM_PATH, recorded_at=_recorded_at(side, first))

    assert (now["item"]["content"], now["item"]["valid_from"]) == ("green", "2024-01-01T00:00:00Z")
    assert now["basis"]["position"] == second == side.position()
    assert (in_2022["item"]["content"], in_2022["item"]["valid_to"]) == ("blue",
                                                                        "2024-01-01T00:00:00Z")
    assert in_2022["item"]["known_since_position"] == second  # the remainder of a cut row
    assert (at_first["item"]["content"], at_first["item"]["valid_to"]) == ("blue", None)
    assert at_first["item"]["known_since_position"] == first
    assert recorded["item"] == at_first["item"]
    assert recorded["basis"]["position"] == first
    for answer in (now, in_2022, at_first, recorded):
        assert set(answer["basis"]) == BASIS
        assert answer["item"]["item_id"] == str(ITEM)
        assert answer["item"]["tags"] == ["sky"]


async def test_the_basis_of_an_answer_passed_back_repeats_it_exactly_after_later_writes(
        api: httpx.AsyncClient, writer: GroupCommitWriter, side: ReadSide,
        revised: tuple[int, int]) -> None:
    item, listed = await _ok(api, ITEM_PATH), await _ok(api, f"/v1/spaces/{SPACE}/items")
    await write(writer, c.ReviseMemory(space_id=SPACE, item_id=ITEM, content="red",
                                       tags=("sunset",)))
    await write(writer, c.AssertMemory(space_id=SPACE, kind="fact", content="another"))
    await write(writer, c.RetractMemory(space_id=SPACE, item_id=ITEM, reason="gone"))
    side.project()

    for answer, path in ((item, ITEM_PATH), (listed, f"/v1/spaces/{SPACE}/items")):
        basis = answer["basis"]
        again = await api.get(path, params={"as_of_position": basis["position"],
                                            "valid_at": basis["valid_at"]})
        assert again.json() == answer
    assert (await api.get(ITEM_PATH)).status_code == 404  # retracted since


async def test_an_item_read_by_replay_is_the_item_the_projection_answers(
        api: httpx.AsyncClient, revised: tuple[int, int]) -> None:
    first, second = revised
    for params in ({}, {"valid_at": Y2022}, {"as_of_position": first},
                   {"as_of_position": first, "valid_at": Y2022},
                   {"as_of_position": second, "valid_at": Y2024}):
        projected = await _ok(api, ITEM_PATH, **params)
        replayed = await _ok(api, ITEM_PATH, source="replay", **params)
        assert replayed["item"] == projected["item"]
        assert replayed["basis"]["position"] == projected["basis"]["position"]


async def test_a_replayed_answer_has_the_basis_of_the_projected_one_when_another_tenant_wrote_last(
        api: httpx.AsyncClient, writer: GroupCommitWriter, side: ReadSide,
        revised: tuple[int, int]) -> None:
    await write(writer, c.CreateSpace(space_id=SPACE), tenant="globex")
    side.project()

    projected = await _ok(api, ITEM_PATH)
    replayed = await _ok(api, ITEM_PATH, source="replay")

    assert replayed["basis"]["position"] == projected["basis"]["position"]
    assert replayed["basis"]["recorded_at"] == projected["basis"]["recorded_at"]


async def test_an_answer_as_of_a_position_not_yet_projected_is_not_contradicted_later(
        api: httpx.AsyncClient, writer: GroupCommitWriter, side: ReadSide,
        revised: tuple[int, int]) -> None:
    later = await write(writer, c.ReviseMemory(space_id=SPACE, item_id=ITEM, content="red"))
    early = await api.get(ITEM_PATH, params={"as_of_position": later.position,
                                             "wait_ms": 100})

    # Not yet projected: the read waits like min_position, then refuses.
    assert early.status_code == 503
    assert early.json()["error"]["code"] == "not_yet_visible"
    side.project()
    again = await api.get(ITEM_PATH, params={"as_of_position": later.position})
    assert again.json()["item"]["content"] == "red"


# --- lists: filters and paging ------------------------------------------------------------

CATALOGUE = {name: UUID(f"0190a000-0000-7000-8000-00000000b00{i}")
             for i, name in enumerate("abcde", start=1)}


@pytest.fixture
async def catalogue(writer: GroupCommitWriter, side: ReadSide) -> None:
    """Items a-d in the space (d archived), e in another space, and one of another tenant."""
    a, b, cc, d, e = (CATALOGUE[n] for n in "abcde")
    await write(writer, c.CreateSpace(space_id=SPACE), c.CreateSpace(space_id="other"))
    await write(writer, c.StartSession(space_id=SPACE, session_id=SESSION))
    await write(
        writer,
        c.AssertMemory(space_id=SPACE, item_id=a, kind="fact", content="a", tags=("red", "blue"),
                       session_id=SESSION, agent_id="scout", valid_from=Y2020,
                       triple=Triple(subject="alice", predicate="likes", object="tea")),
        c.AssertMemory(space_id=SPACE, item_id=b, kind="preference", content="b",
                       tags=("red",), agent_id="scout", valid_from=Y2020,
                       triple=Triple(subject="alice", predicate="dislikes", object="coffee")),
        c.AssertMemory(space_id=SPACE, item_id=cc, kind="decision", content="c",
                       tags=("blue",), session_id=SESSION, valid_from=Y2020,
                       triple=Triple(subject="bob", predicate="likes", object="tea")),
        c.AssertMemory(space_id=SPACE, item_id=d, kind="fact", content="d", valid_from=Y2020),
        c.AssertMemory(space_id="other", item_id=e, kind="fact", content="e", tags=("red",),
                       valid_from=Y2020))
    await write(writer, c.ArchiveMemory(space_id=SPACE, item_id=d, reason="policy"))
    await write(writer, c.CreateSpace(space_id=SPACE), tenant="globex")
    await write(writer, c.AssertMemory(space_id=SPACE, kind="fact", content="theirs",
                                       tags=("red",), valid_from=Y2020), tenant="globex")
    side.project()


@pytest.mark.parametrize(("params", "expected"), [
    ({}, "abc"),
    ({"include_archived": "true"}, "abcd"),
    ({"kind": "fact"}, "a"),
    ({"kind": ["fact", "decision"]}, "ac"),
    ({"kind": "fact", "include_archived": "true"}, "ad"),
    ({"tag": "red"}, "ab"),
    ({"tag": ["red", "blue"]}, "a"),
    ({"session_id": str(SESSION)}, "ac"),
    ({"agent_id": "scout"}, "ab"),
    ({"subject": "alice"}, "ab"),
    ({"predicate": "likes"}, "ac"),
    ({"subject": "alice", "predicate": "likes"}, "a"),
    ({"limit": 2}, "ab"),
    ({"limit": 2, "after": str(CATALOGUE["b"])}, "c"),
    ({"valid_at": "2019-06-01T00:00:00Z"}, ""),
])
async def test_items_are_listed_by_filter_in_item_id_order(
        api: httpx.AsyncClient, catalogue: None, params: dict[str, Any], expected: str) -> None:
    body = await _ok(api, f"/v1/spaces/{SPACE}/items", **params)
    assert [i["content"] for i in body["items"]] == list(expected)
    assert set(body["basis"]) == BASIS


async def test_an_archived_item_is_listed_only_on_request_and_with_its_status(
        api: httpx.AsyncClient, catalogue: None) -> None:
    body = await _ok(api, f"/v1/spaces/{SPACE}/items", include_archived="true", kind="fact")
    assert [(i["content"], i["status"]) for i in body["items"]] == [("a", "active"),
                                                                   ("d", "archived")]


async def test_paging_by_the_last_item_id_visits_every_item_once(
        api: httpx.AsyncClient, catalogue: None) -> None:
    seen: list[str] = []
    params: dict[str, Any] = {"limit": 1, "include_archived": "true"}
    while page := (await _ok(api, f"/v1/spaces/{SPACE}/items", **params))["items"]:
        seen.extend(i["content"] for i in page)
        params["after"] = page[-1]["item_id"]
    assert seen == list("abcd")


# --- history ------------------------------------------------------------------------------

async def test_history_shows_every_change_with_who_and_why_and_every_rectangle(
        api: httpx.AsyncClient, writer: GroupCommitWriter, side: ReadSide) -> None:
    await write(writer, c.CreateSpace(space_id=SPACE))
    p1 = (await write(writer, c.AssertMemory(space_id=SPACE, item_id=ITEM, kind="fact",
                                             content="A", valid_from=Y2020),
                      actor="key:alice")).position
    p2 = (await write(writer, c.ReviseMemory(space_id=SPACE, item_id=ITEM, content="B",
                                             valid_from=Y2022, valid_to=Y2023,
                                             reason="correction"),
                      actor="key:bob")).position
    p3 = (await write(writer, c.RetractMemory(space_id=SPACE, item_id=ITEM, valid_until=Y2024,
                                              reason="moved away"),
                      actor="memledger:lifecycle")).position
    side.project()

    body = await _ok(api, f"{ITEM_PATH}/history")

    changes = [(ch["position"], ch["event_type"], ch["actor"], ch["reason"])
               for ch in body["changes"]]
    assert changes == [(p1, "memory.asserted", "key:alice", None),
                       (p2, "memory.revised", "key:bob", "correction"),
                       (p3, "memory.retracted", "memledger:lifecycle", "moved away")]
    assert [ch["recorded_at"] for ch in body["changes"]] == [
        _iso(_recorded_at(side, p)) for p in (p1, p2, p3)]
    rectangles = [(r["valid_from"][:4], r["valid_to"] and r["valid_to"][:4],
                   r["attrs"]["content"], r["sys_from"], r["sys_to"], r["actor"])
                  for r in body["versions"]]
    assert rectangles == [("2020", None, "A", p1, p2, "key:alice"),
                          ("2020", "2022", "A", p2, None, "key:bob"),
                          ("2022", "2023", "B", p2, None, "key:bob"),
                          ("2023", None, "A", p2, p3, "key:bob"),
                          ("2023", "2024", "A", p3, None, "memledger:lifecycle")]
    assert body["basis"]["position"] == p3
    earlier = await _ok(api, f"{ITEM_PATH}/history", as_of_position=p2)
    assert [ch["position"] for ch in earlier["changes"]] == [p1, p2]
    assert [r["sys_to"] for r in earlier["versions"]] == [p2, None, None, None]


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


# --- changes: since T, scopes, the cursor feed -----------------------------------------

async def test_changes_since_a_time_exclude_the_event_recorded_exactly_then(
        api: httpx.AsyncClient, writer: GroupCommitWriter, side: ReadSide) -> None:
    await write(writer, c.CreateSpace(space_id=SPACE))
    positions = [(await write(writer, c.AssertMemory(space_id=SPACE, kind="fact",
                                                     content=f"fact {i}"))).position
                 for i in range(4)]
    side.project()
    moment = _recorded_at(side, positions[1])

    body = await _ok(api, f"/v1/spaces/{SPACE}/changes", since=moment)

    assert [ch["position"] for ch in body["changes"]] == positions[2:]
    assert all(datetime.fromisoformat(ch["recorded_at"]) > moment for ch in body["changes"])


async def test_space_changes_hold_one_space_and_tenant_changes_every_space_of_the_tenant(
        api: httpx.AsyncClient, writer: GroupCommitWriter, side: ReadSide) -> None:
    here = [(await write(writer, c.CreateSpace(space_id=SPACE))).position,
            (await write(writer, c.AssertMemory(space_id=SPACE, kind="fact", content="x")))
            .position]
    there = [(await write(writer, c.CreateSpace(space_id="other"))).position,
             (await write(writer, c.RegisterAgent(agent_id="scout"))).position]
    await write(writer, c.CreateSpace(space_id=SPACE), tenant="globex")
    side.project()

    in_space = await _ok(api, f"/v1/spaces/{SPACE}/changes")
    in_tenant = await _ok(api, "/v1/changes")
    theirs = (await api.get("/v1/changes", headers={TENANT_HEADER: "globex"})).json()

    assert [ch["position"] for ch in in_space["changes"]] == here
    assert [ch["position"] for ch in in_tenant["changes"]] == sorted(here + there)
    assert {ch["space_id"] for ch in in_tenant["changes"]} == {SPACE, "other", "_tenant"}
    assert [ch["position"] for ch in theirs["changes"]] == [side.position()]


async def test_polling_the_cursor_feed_sees_every_change_once_while_writes_go_on(
        api: httpx.AsyncClient, writer: GroupCommitWriter, side: ReadSide) -> None:
    await write(writer, c.CreateSpace(space_id=SPACE), c.CreateSpace(space_id="other"))
    side.project()
    seen: list[int] = []
    cursor: str | None = None
    for round_ in range(8):
        for i in range(round_ % 3 + 1):
            await write(writer, c.AssertMemory(space_id=SPACE, kind="fact", content=f"{i}"),
                        c.AssertMemory(space_id="other", kind="fact", content=f"{i}"))
        side.project()
        page = await _ok(api, f"/v1/spaces/{SPACE}/changes", limit=2,
                         **({"after": cursor} if cursor else {}))
        seen.extend(ch["position"] for ch in page["changes"])
        cursor = page["next_cursor"]
    while page["changes"]:
        page = await _ok(api, f"/v1/spaces/{SPACE}/changes", limit=2, after=cursor)
        seen.extend(ch["position"] for ch in page["changes"])
        cursor = page["next_cursor"]

    everything = [r.position for r in read_everything(side.store)
                  if r.fields()["space_id"] == SPACE]
    assert seen == everything
    assert page["position"] == side.position()


# --- read-your-writes -----------------------------------------------------------------

async def test_a_read_at_a_position_not_yet_projected_waits_for_it_and_then_answers(
        served: tuple[httpx.AsyncClient, CountingReader], writer: GroupCommitWriter,
        side: ReadSide, revised: tuple[int, int]) -> None:
    api, reader = served
    wanted = (await write(writer, c.ReviseMemory(space_id=SPACE, item_id=ITEM, content="red"))
              ).position
    reader.polls = 0
    request = asyncio.create_task(api.get(ITEM_PATH, params={"min_position": wanted,
                                                            "wait_ms": 10_000}))

    async def the_read_has_looked_and_waits() -> None:
        assert reader.polls >= 2
        assert not request.done()

    await eventually(the_read_has_looked_and_waits)
    await asyncio.to_thread(side.project)
    response = await request

    assert response.status_code == 200, response.text
    assert response.json()["item"]["content"] == "red"
    assert response.json()["basis"]["position"] >= wanted


async def test_a_read_at_a_position_never_reached_gives_up_with_a_retryable_503_not_yet_visible(
        api: httpx.AsyncClient, writer: GroupCommitWriter, revised: tuple[int, int]) -> None:
    _, last = revised
    unprojected = await write(writer, c.ReviseMemory(space_id=SPACE, item_id=ITEM,
                                                     content="red"))
    for path in (ITEM_PATH, f"/v1/spaces/{SPACE}/items", f"/v1/spaces/{SPACE}/changes"):
        response = await api.get(path, params={"min_position": unprojected.position,
                                               "wait_ms": 30})
        assert response.status_code == 503
        assert response.headers["retry-after"] == "1"
        error = response.json()["error"]
        assert (error["code"], error["projected_position"]) == ("not_yet_visible", last)
        assert [f["path"] for f in error["fields"]] == ["query.min_position"]


# --- errors ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("path", "params", "tenant", "status", "code", "field"), [
    (f"/v1/spaces/{SPACE}/items/{UUID(int=7)}", {}, TENANT, 404, "not_found", None),
    (ITEM_PATH, {}, "globex", 404, "not_found", None),
    (f"/v1/spaces/other/items/{ITEM}", {}, TENANT, 404, "not_found", None),
    (f"/v1/spaces/other/items/{ITEM}/history", {}, TENANT, 404, "not_found", None),
    (f"{ITEM_PATH}/history", {}, "globex", 404, "not_found", None),
    (f"/v1/spaces/{SPACE}/sessions/{SESSION}/messages", {}, TENANT, 404, "not_found", None),
    (f"/v1/spaces/{SPACE}/items/not-a-uuid", {}, TENANT, 422, "invalid_request",
     "path.item_id"),
    (f"/v1/spaces/{SPACE}/items/not-a-uuid", {"source": "replay"}, TENANT, 422,
     "invalid_request", "path.item_id"),
    (ITEM_PATH, {"valid_at": "2024-01-01T00:00:00"}, TENANT, 422, "invalid_request",
     "query.valid_at"),
    (f"/v1/spaces/{SPACE}/items", {"recorded_at": "2024-01-01T00:00:00"}, TENANT, 422,
     "invalid_request", "query.recorded_at"),
    (f"/v1/spaces/{SPACE}/changes", {"since": "2024-01-01T00:00:00"}, TENANT, 422,
     "invalid_request", "query.since"),
    (f"/v1/spaces/{SPACE}/changes", {"after": "not a cursor!"}, TENANT, 400,
     "invalid_cursor", "query.after"),
    ("/v1/changes", {"after": _cursor({"v": 2, "p": 1})}, TENANT, 400, "invalid_cursor",
     "query.after"),
    ("/v1/changes", {"after": _cursor({"v": 1, "p": -1})}, TENANT, 400, "invalid_cursor",
     "query.after"),
    ("/v1/changes", {"after": _cursor([1])}, TENANT, 400, "invalid_cursor", "query.after"),
    ("/v1/changes", {"after": _cursor({"v": 1, "p": "3"})}, TENANT, 400, "invalid_cursor",
     "query.after"),
    (f"/v1/spaces/{SPACE}/items", {"limit": 0}, TENANT, 422, "invalid_request", "query.limit"),
    (f"/v1/spaces/{SPACE}/items", {"limit": 1001}, TENANT, 422, "invalid_request",
     "query.limit"),
    ("/v1/changes", {"limit": 1001}, TENANT, 422, "invalid_request", "query.limit"),
    (ITEM_PATH, {"as_of_position": -1}, TENANT, 422, "invalid_request",
     "query.as_of_position"),
    (ITEM_PATH, {"wait_ms": 30_001}, TENANT, 422, "invalid_request", "query.wait_ms"),
    (f"/v1/spaces/{SPACE}/items", {"after": "b"}, TENANT, 422, "invalid_request",
     "query.after"),
])
async def test_a_bad_or_unanswerable_read_gets_a_clear_error(
        api: httpx.AsyncClient, revised: tuple[int, int], path: str, params: dict[str, Any],
        tenant: str, status: int, code: str, field: str | None) -> None:
    response = await api.get(path, params=params, headers={TENANT_HEADER: tenant})
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert (error["status"], error["code"]) == (status, code)
    assert [f["path"] for f in error["fields"]] == ([field] if field else [])


# --- conversation, graph, health ---------------------------------------------------------

async def test_a_conversation_is_read_in_order_and_as_of_a_position(
        api: httpx.AsyncClient, writer: GroupCommitWriter, side: ReadSide) -> None:
    await write(writer, c.CreateSpace(space_id=SPACE))
    await write(writer, c.StartSession(space_id=SPACE, session_id=SESSION))
    said = [(await write(writer, c.AppendMessage(
        space_id=SPACE, session_id=SESSION, role="user" if i % 2 == 0 else "assistant",
        content=f"turn {i}", participant="p"))).position for i in range(5)]
    await write(writer, c.EndSession(space_id=SPACE, session_id=SESSION))
    side.project()
    path = f"/v1/spaces/{SPACE}/sessions/{SESSION}/messages"

    whole = await _ok(api, path)
    last_two = await _ok(api, path, limit=2)
    midway = await _ok(api, path, as_of_position=said[2])

    assert [(m["position"], m["role"], m["content"]) for m in whole["messages"]] == [
        (p, "user" if i % 2 == 0 else "assistant", f"turn {i}") for i, p in enumerate(said)]
    assert whole["status"] == "ended"
    assert [m["content"] for m in last_two["messages"]] == ["turn 3", "turn 4"]
    assert ([m["content"] for m in midway["messages"]], midway["status"]) == (
        ["turn 0", "turn 1", "turn 2"], "active")
    assert (await api.get(f"/v1/spaces/other/sessions/{SESSION}/messages")).status_code == 404


@pytest.fixture
async def graph_positions(writer: GroupCommitWriter, side: ReadSide) -> dict[str, int]:
    """Entities alice and acme, alice works_at acme (retracted), alice knows bob."""
    found: dict[str, int] = {}
    await write(writer, c.CreateSpace(space_id=SPACE))
    for entity, kind in (("alice", "person"), ("acme", "org"), ("bob", "person")):
        found[entity] = (await write(writer, c.UpsertEntity(
            space_id=SPACE, entity_id=entity, name=entity.title(), type=kind))).position
    works = await write(writer, c.AssertRelation(
        space_id=SPACE, relation_id=UUID(int=1), source_entity="alice",
        relation_type="works_at", target_entity="acme", confidence=0.9))
    found["works_at"] = works.position
    found["knows"] = (await write(writer, c.AssertRelation(
        space_id=SPACE, relation_id=UUID(int=2), source_entity="alice",
        relation_type="knows", target_entity="bob"))).position
    found["retracted"] = (await write(writer, c.RetractRelation(
        space_id=SPACE, relation_id=UUID(int=1)))).position
    found["renamed"] = (await write(writer, c.UpsertEntity(
        space_id=SPACE, entity_id="alice", name="Alice A.", type="person",
        aliases=("ali",)))).position
    side.project()
    return found


async def test_the_graph_holds_the_entities_and_relations_of_the_space(
        api: httpx.AsyncClient, graph_positions: dict[str, int]) -> None:
    body = await _ok(api, f"/v1/spaces/{SPACE}/graph")
    before_retraction = await _ok(api, f"/v1/spaces/{SPACE}/graph",
                                  as_of_position=graph_positions["knows"])

    assert [(e["entity_id"], e["name"], e["type"], e["aliases"]) for e in body["entities"]] == [
        ("acme", "Acme", "org", []), ("alice", "Alice A.", "person", ["ali"]),
        ("bob", "Bob", "person", [])]
    assert [(r["source_entity"], r["relation_type"], r["target_entity"], r["status"])
            for r in body["relations"]] == [("alice", "works_at", "acme", "retracted"),
                                            ("alice", "knows", "bob", "active")]
    assert body["relations"][0]["confidence"] == 0.9
    assert [r["status"] for r in before_retraction["relations"]] == ["active", "active"]


async def test_the_graph_as_of_a_position_keeps_an_entity_that_was_updated_since(
        api: httpx.AsyncClient, graph_positions: dict[str, int]) -> None:
    then = await _ok(api, f"/v1/spaces/{SPACE}/graph", as_of_position=graph_positions["knows"])
    assert [e["entity_id"] for e in then["entities"]] == ["acme", "alice", "bob"]


async def test_health_reports_projected_and_committed_positions_and_the_lag(
        api: httpx.AsyncClient, writer: GroupCommitWriter, side: ReadSide) -> None:
    await write(writer, c.CreateSpace(space_id=SPACE))
    positions = [(await write(writer, c.AssertMemory(space_id=SPACE, kind="fact",
                                                     content=f"{i}"))).position
                 for i in range(3)]
    side.project(up_to=positions[0])

    behind = await _ok(api, "/v1/query/health")
    side.project()
    caught_up = await _ok(api, "/v1/query/health")

    assert behind == {"status": "ok", "projected_position": positions[0],
                      "committed_position": positions[-1],
                      "projection_lag": positions[-1] - positions[0]}
    assert (caught_up["projected_position"], caught_up["projection_lag"]) == (positions[-1], 0)


async def test_every_read_reports_the_projection_position_and_lag(
        api: httpx.AsyncClient, writer: GroupCommitWriter, side: ReadSide,
        revised: tuple[int, int]) -> None:
    response = await api.get(ITEM_PATH)
    assert int(response.headers["Memledger-Projected-Position"]) == side.position()
    assert int(response.headers["Memledger-Projection-Lag"]) >= 0
