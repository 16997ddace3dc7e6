"""The gRPC reads beyond items and search answer as their HTTP routes do, on the real engines:
conversations, sessions, the graph, listings, stats, the lifecycle and forming reads, the vector
digest; their refusals name the field at fault."""

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar
from uuid import uuid4

import grpc
import pytest
from google.protobuf.message import Message

from memledger_platform import grpc_server
from memledger_platform.endpoints import Endpoints
from memledger_schemas.grpc.v1 import ingest_pb2 as ipb
from memledger_schemas.grpc.v1 import query_pb2 as qpb
from tests.integration.grpc_support import Apis, apis_of_their_own, as_message

SPACE = "crm"
M = TypeVar("M", bound=Message)


@pytest.fixture(scope="module")
async def apis(engines: Endpoints, tmp_path_factory: pytest.TempPathFactory
               ) -> AsyncIterator[Apis]:
    """One pipeline for the module: one test writes the story (in ``SPACE``, the only writes),
    the others ask what refuses or finds nothing whatever was written."""
    async with apis_of_their_own(engines.postgres_dsn, engines.nats_url,
                                 tmp_path_factory.mktemp("grpc-reads")) as found:
        yield found


async def _submit(apis: Apis, command: str, **body: Any) -> ipb.WriteResult:
    return await apis.ingest.Submit(ipb.CommandRequest(command=command,
                                                       json_body=json.dumps(body)),
                                    metadata=apis.metadata)


async def _story(apis: Apis) -> dict[str, Any]:
    """A space with an agent, a conversation, two entities related, a fact about Alice that
    was superseded, and a policy."""
    await _submit(apis, "create_space", space_id=SPACE, name="customers")
    await _submit(apis, "register_agent", agent_id="helper", name="Helper")
    session = (await _submit(apis, "start_session", space_id=SPACE, agent_id="helper")
               ).ids["session_id"]
    for role, text in (("user", "Alice moved to Lisbon"), ("assistant", "Noted")):
        await _submit(apis, "append_message", space_id=SPACE, session_id=session, role=role,
                      content=text, participant="Alice" if role == "user" else "Helper")
    old = (await _submit(apis, "assert_memory", space_id=SPACE, kind="fact",
                         content="Alice lives in Porto", triple={
                             "subject": "Alice", "predicate": "lives_in", "object": "Porto"})
           ).ids["item_id"]
    new = (await _submit(apis, "assert_memory", space_id=SPACE, kind="fact",
                         content="Alice lives in Lisbon")).ids["item_id"]
    await _submit(apis, "supersede_memory", space_id=SPACE, item_id=old, superseded_by=new,
                  reason="she moved")
    for entity, name in (("alice", "Alice"), ("lisbon", "Lisbon")):
        await _submit(apis, "upsert_entity", space_id=SPACE, entity_id=entity, name=name,
                      type="person" if entity == "alice" else "city")
    await _submit(apis, "assert_relation", space_id=SPACE, source_entity="alice",
                  relation_type="lives_in", target_entity="lisbon")
    last = await _submit(apis, "set_space_policy", space_id=SPACE, max_items=100)
    return {"session": session, "old": old, "last": last.position}


async def _http(apis: Apis, method: str, path: str, **params: Any) -> dict[str, Any]:
    response = await apis.http.request(method, path, params=params)
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()
    return found


def _without_now(answer: Message) -> Message:
    """An answer without its basis' valid time (now: when it was asked)."""
    if answer.DESCRIPTOR.fields_by_name.get("basis") is not None:
        answer.basis.ClearField("valid_at")  # type: ignore[attr-defined]
    return answer


async def _alike(apis: Apis, call: Callable[..., Awaitable[M]], request: Message, path: str,
                 **params: Any) -> M:
    """The gRPC answer, once checked equal to the HTTP route's."""
    found = await call(request, metadata=apis.metadata)
    over_http = as_message(await _http(apis, "GET", path, **params), type(found)())
    assert _without_now(found) == _without_now(over_http)
    return found


async def test_every_new_read_answers_over_grpc_as_over_http(apis: Apis) -> None:
    story = await _story(apis)
    q, at = apis.query, story["last"]
    pinned = {"as_of_position": at}
    talk = await _alike(apis, q.Messages, qpb.MessagesRequest(
        space_id=SPACE, session_id=story["session"], as_of_position=at),
        f"/v1/spaces/{SPACE}/sessions/{story['session']}/messages", **pinned)
    assert [m.content for m in talk.messages] == ["Alice moved to Lisbon", "Noted"]
    sessions = await _alike(apis, q.ListSessions, qpb.ListSessionsRequest(
        space_id=SPACE, participant="Alice", min_position=at),
        f"/v1/spaces/{SPACE}/sessions", participant="Alice", min_position=at)
    assert [s.session_id for s in sessions.sessions] == [story["session"]]
    graph = await _alike(apis, q.Graph, qpb.GraphRequest(space_id=SPACE, as_of_position=at),
                         f"/v1/spaces/{SPACE}/graph", **pinned)
    assert {e.entity_id for e in graph.entities} == {"alice", "lisbon"}
    near = await _alike(apis, q.Neighbours, qpb.NeighboursRequest(
        space_id=SPACE, entity_id="alice", as_of_position=at),
        f"/v1/spaces/{SPACE}/entities/alice/neighbours", **pinned)
    assert [n.entity_id for n in near.neighbours] == ["lisbon"]
    await _alike(apis, q.ItemsMentioning, qpb.ItemsMentioningRequest(
        space_id=SPACE, entity_id="alice", as_of_position=at),
        f"/v1/spaces/{SPACE}/entities/alice/items", **pinned)
    spaces = await _alike(apis, q.ListSpaces, qpb.ListSpacesRequest(as_of_position=at),
                          "/v1/spaces", **pinned)
    assert [s.name for s in spaces.spaces] == ["customers"]
    agents = await _alike(apis, q.ListAgents, qpb.ListAgentsRequest(as_of_position=at),
                          "/v1/agents", **pinned)
    assert [a.agent_id for a in agents.agents] == ["helper"]
    await _alike(apis, q.ListErasures, qpb.ListErasuresRequest(limit=5), "/v1/erasures", limit=5)
    stats = await _alike(apis, q.SpaceStats, qpb.SpaceStatsRequest(space_id=SPACE, min_position=at),
                         f"/v1/spaces/{SPACE}/stats", min_position=at)
    assert stats.messages == 2
    chain = await _alike(apis, q.Chain, qpb.ChainRequest(
        space_id=SPACE, item_id=story["old"], as_of_position=at),
        f"/v1/spaces/{SPACE}/items/{story['old']}/chain", **pinned)
    assert len(chain.links) == 1
    policies = await _alike(apis, q.Policies, qpb.PoliciesRequest(
        space_id=SPACE, as_of_position=at), f"/v1/spaces/{SPACE}/policies", **pinned)
    assert policies.versions[-1].policy["max_items"] == 100
    await _alike(apis, q.MergeSuggestions, qpb.MergeSuggestionsRequest(
        space_id=SPACE, as_of_position=at), f"/v1/spaces/{SPACE}/merge-suggestions", **pinned)
    await _alike(apis, q.Profile, qpb.ProfileRequest(space_id=SPACE, subject="Alice",
                                               as_of_position=at),
                 f"/v1/spaces/{SPACE}/profiles/Alice", **pinned)
    await _alike(apis, q.Themes, qpb.ThemesRequest(space_id=SPACE, as_of_position=at),
                 f"/v1/spaces/{SPACE}/themes", **pinned)
    digest = await q.VectorsSummary(qpb.VectorsSummaryRequest(as_of_position=at, wait_ms=5_000),
                                    metadata=apis.metadata)
    assert digest.as_of_position == at


async def _refused(call: Awaitable[Any]) -> tuple[grpc.StatusCode, dict[str, Any]]:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    body = grpc_server.error_body(caught.value)
    assert body is not None, caught.value
    return caught.value.code(), body


@pytest.mark.parametrize(("method", "request_", "field"), [
    ("ListSpaces", qpb.ListSpacesRequest(limit=0), "limit"),
    ("ListSpaces", qpb.ListSpacesRequest(status="gone"), "status"),
    ("ListSessions", qpb.ListSessionsRequest(space_id=SPACE, after="not a cursor"), "after"),
    ("Messages", qpb.MessagesRequest(space_id=SPACE, session_id="nope"), "session_id"),
    ("Neighbours", qpb.NeighboursRequest(space_id=SPACE, entity_id="a", depth=99), "depth"),
    ("Chain", qpb.ChainRequest(space_id=SPACE, item_id="x"), "item_id"),
    ("Profile", qpb.ProfileRequest(space_id=SPACE, subject=""), "subject"),
    ("GetRetrieval", qpb.RetrievalRequest(retrieval_id="x"), "retrieval_id"),
    ("ListAgents", qpb.ListAgentsRequest(wait_ms=-1), "wait_ms"),
])
async def test_a_bad_field_is_invalid_argument_naming_it(apis: Apis, method: str,
                                                         request_: Message,
                                                         field: str) -> None:
    code, body = await _refused(getattr(apis.query, method)(request_, metadata=apis.metadata))
    assert code == grpc.StatusCode.INVALID_ARGUMENT, body
    assert field in {f["path"] for f in body["error"]["fields"]}, body


async def test_an_unknown_retrieval_or_space_is_not_found(apis: Apis) -> None:
    code, _ = await _refused(apis.query.GetRetrieval(
        qpb.RetrievalRequest(retrieval_id=str(uuid4())), metadata=apis.metadata))
    assert code == grpc.StatusCode.NOT_FOUND
    code, _ = await _refused(apis.query.SpaceStats(
        qpb.SpaceStatsRequest(space_id="nowhere"), metadata=apis.metadata))
    assert code == grpc.StatusCode.NOT_FOUND
