"""The gRPC API on the real engines: one scenario written and read over HTTP and gRPC gives the
same answers (writes, idempotent retries, an item now, as of and by replay, lists, history,
changes, search, context); refusals carry the HTTP error body under the mapped status code;
the changes feed streams and follows; replay exports the tenant's events."""

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from nats.aio.client import Client
from nats.js import JetStreamContext

from memledger_ingest.core.writer import GroupCommitWriter
from memledger_ingest.entrypoints import grpc_api as ingest_grpc
from memledger_platform import grpc_server
from memledger_platform.auth import Denied, Principal
from memledger_platform.endpoints import Endpoints
from memledger_platform.eventstore.postgres import PostgresEventStore
from memledger_schemas.grpc.v1 import ingest_pb2 as ipb
from memledger_schemas.grpc.v1 import ingest_pb2_grpc
from memledger_schemas.grpc.v1 import query_pb2 as qpb
from memledger_schemas.subjects import Subjects
from tests.integration.events_support import read_everything
from tests.integration.grpc_support import TENANT, Apis, as_dict, as_message, both_apis

ITEM = UUID("0190a000-0000-7000-8000-00000000a11c")
SPACE = "hr"
Y2020, Y2021, Y2022, Y2023 = (f"{y}-01-01T00:00:00Z" for y in (2020, 2021, 2022, 2023))


@pytest.fixture
async def apis(engines: Endpoints, event_store: PostgresEventStore, pg_schema: str,
               nats_js: tuple[Client, JetStreamContext], subjects: Subjects,
               writer: GroupCommitWriter, tmp_path: Path) -> AsyncIterator[Apis]:
    async with both_apis(engines.postgres_dsn, event_store, pg_schema, nats_js, subjects,
                         writer, tmp_path / "vectors") as found:
        yield found


def _ts(text: str) -> Timestamp:
    stamp = Timestamp()
    stamp.FromJsonString(text)
    return stamp


async def _submit(apis: Apis, command: str, body: dict[str, Any], *,
                  tenant: str = TENANT, **request: Any) -> ipb.WriteResult:
    return await apis.ingest.Submit(
        ipb.CommandRequest(command=command, json_body=json.dumps(body), **request),
        metadata=((grpc_server.TENANT_METADATA, tenant),))


async def _post(apis: Apis, path: str, body: dict[str, Any], status: int = 201
                ) -> dict[str, Any]:
    response = await apis.http.post(path, json=body)
    assert response.status_code == status, response.text
    found: dict[str, Any] = response.json()
    return found


async def _get(apis: Apis, path: str, status: int = 200, **params: Any) -> dict[str, Any]:
    response = await apis.http.get(path, params=params)
    assert response.status_code == status, response.text
    found: dict[str, Any] = response.json()
    return found


async def _refused(call: Awaitable[Any]) -> tuple[grpc.StatusCode, dict[str, Any]]:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    body = grpc_server.error_body(caught.value)
    assert body is not None, caught.value
    return caught.value.code(), body


async def _story(apis: Apis) -> int:
    """Alice at Acme since 2020 (over HTTP); the move to Globex in 2022 (over gRPC); a
    preference (gRPC, with a key). Returns the last position."""
    await _submit(apis, "create_space", {"space_id": SPACE})
    await _post(apis, f"/v1/spaces/{SPACE}/memories", {
        "item_id": str(ITEM), "kind": "fact", "content": "Alice works at Acme",
        "triple": {"subject": "alice", "predicate": "works_at", "object": "acme"},
        "tags": ["work"], "valid_from": Y2020})
    await _submit(apis, "revise_memory", {
        "space_id": SPACE, "item_id": str(ITEM), "content": "Alice works at Globex",
        "valid_from": Y2022, "reason": "she told us she moved"})
    tea = await _submit(apis, "assert_memory", {
        "space_id": SPACE, "kind": "preference", "content": "Alice prefers tea over coffee"},
        idempotency_key="alice-tea-1")
    return tea.position


async def test_writes_over_either_api_answer_alike_and_a_retry_is_the_same_result(
        apis: Apis) -> None:
    created = await _submit(apis, "create_space", {"space_id": SPACE})
    assert (created.command, created.ids["space_id"], created.duplicate) == (
        "create_space", SPACE, False)
    body = {"kind": "fact", "content": "The sky is blue", "idempotency_key": "sky-1"}
    first = await _submit(apis, "assert_memory", {"space_id": SPACE, **body})
    over_http = await _post(apis, f"/v1/spaces/{SPACE}/memories", body, status=200)
    again = await _submit(apis, "assert_memory", {"space_id": SPACE, "kind": "fact",
                                                  "content": "The sky is blue"},
                          idempotency_key="sky-1")
    assert as_message(over_http, ipb.WriteResult()) == again
    assert (again.duplicate, again.event_ids, again.ids) == (True, first.event_ids, first.ids)
    batch = [ipb.CommandRequest(command="assert_memory", idempotency_key=f"b-{n}",
                                json_body=json.dumps({"space_id": SPACE, "kind": "fact",
                                                      "content": f"fact {n}"}))
             for n in range(2)]
    grpc_batch = await apis.ingest.SubmitBatch(ipb.BatchRequest(commands=batch),
                                               metadata=apis.metadata)
    http_batch = await _post(apis, "/v1/batch", {"commands": [
        {"command": "assert_memory", "space_id": SPACE, "kind": "fact", "content": f"fact {n}",
         "idempotency_key": f"b-{n}"} for n in range(2)]})
    assert [r.duplicate for r in grpc_batch.results] == [False, False]
    assert [r["event_ids"] for r in http_batch["results"]] == [
        list(r.event_ids) for r in grpc_batch.results]


async def test_reads_of_the_same_story_answer_alike_over_http_and_grpc(apis: Apis) -> None:
    last = await _story(apis)
    item_path = f"/v1/spaces/{SPACE}/items/{ITEM}"
    now = await apis.query.GetItem(qpb.GetItemRequest(
        space_id=SPACE, item_id=str(ITEM), valid_at=_ts(Y2023), min_position=last),
        metadata=apis.metadata)
    assert now == as_message(await _get(apis, item_path, valid_at=Y2023, min_position=last),
                             qpb.ItemAnswer())
    assert (now.item.content, now.basis.position) == ("Alice works at Globex", last)
    # position 2 claims the (alice, works_at) slot; 3 asserts the item
    as_known = await apis.query.GetItem(qpb.GetItemRequest(
        space_id=SPACE, item_id=str(ITEM), valid_at=_ts(Y2023), as_of_position=3),
        metadata=apis.metadata)
    assert as_known == as_message(await _get(apis, item_path, valid_at=Y2023,
                                             as_of_position=3), qpb.ItemAnswer())
    assert as_known.item.content == "Alice works at Acme"
    replayed = await apis.query.GetItem(qpb.GetItemRequest(
        space_id=SPACE, item_id=str(ITEM), valid_at=_ts(Y2021), source="replay"),
        metadata=apis.metadata)
    assert replayed == as_message(await _get(apis, item_path, valid_at=Y2021,
                                             source="replay"), qpb.ItemAnswer())
    assert as_dict(replayed.item)["triple"] == {"subject": "alice", "predicate": "works_at",
                                                "object": "acme"}

    listed = await apis.query.ListItems(qpb.ListItemsRequest(
        space_id=SPACE, valid_at=_ts(Y2023), kinds=["fact"]), metadata=apis.metadata)
    assert listed == as_message(await _get(apis, f"/v1/spaces/{SPACE}/items",
                                           valid_at=Y2023, kind="fact"), qpb.ItemList())
    history = await apis.query.History(qpb.HistoryRequest(space_id=SPACE, item_id=str(ITEM)),
                                       metadata=apis.metadata)
    over_http = as_message(await _get(apis, f"{item_path}/history"), qpb.ItemHistory())
    for answer in (history, over_http):  # a history's basis is valid now: when it was asked
        answer.basis.ClearField("valid_at")
    assert history == over_http
    assert [c.event_type for c in history.changes] == [
        "triple.claimed", "memory.asserted", "memory.revised"]
    assert as_dict(history.versions[0].attrs)["content"] == "Alice works at Acme"


async def test_changes_stream_the_pages_the_http_feed_pages_through(apis: Apis) -> None:
    last = await _story(apis)
    pages = [page async for page in apis.query.Changes(qpb.ChangesRequest(
        space_id=SPACE, limit=2, min_position=last), metadata=apis.metadata)]
    http_pages, cursor = [], None
    while True:
        params = {"limit": 2, **({"after": cursor} if cursor else {})}
        http_pages.append(await _get(apis, f"/v1/spaces/{SPACE}/changes", **params))
        cursor = http_pages[-1]["next_cursor"]
        if len(http_pages[-1]["changes"]) < 2:
            break
    assert pages == [as_message(p, qpb.ChangePage()) for p in http_pages]
    assert [len(p.changes) for p in pages] == [2, 2, 1]  # the slot claim is a change too
    assert as_dict(pages[1].changes[1].payload)["reason"] == "she told us she moved"


async def test_search_and_context_answer_alike_over_http_and_grpc(apis: Apis) -> None:
    last = await _story(apis)
    now = datetime.now(UTC).isoformat().replace("+00:00", "Z")  # the preference is from today
    body: dict[str, Any] = {"query": "tea over coffee", "valid_at": now, "threshold": 0.0,
            "weights": {"dense": 0.0, "keyword": 1.0}, "explain": True, "min_position": last}
    found = await apis.query.Search(qpb.SearchRequest(
        query=body["query"], valid_at=_ts(now), threshold=0.0, explain=True,
        weights=qpb.Weights(dense=0.0, keyword=1.0), min_position=last),
        metadata=apis.metadata)
    assert found == as_message(await _post(apis, "/v1/search", body, status=200),
                               qpb.SearchAnswer())
    assert found.results[0].content == "Alice prefers tea over coffee"
    assert found.results[0].explain["keyword_bm25"] > 0
    request: dict[str, Any] = {"space_id": SPACE, "query": "where does Alice work", "valid_at": now,
               "budget_tokens": 200, "min_position": last}
    bundle = await apis.query.Context(qpb.ContextRequest(
        space_id=SPACE, query=request["query"], valid_at=_ts(now), budget_tokens=200,
        min_position=last), metadata=apis.metadata)
    assert bundle == as_message(await _post(apis, "/v1/context", request, status=200),
                                qpb.ContextAnswer())
    assert "Alice prefers tea over coffee" in bundle.rendered


async def test_search_finds_messages_with_their_turns_alike_over_http_and_grpc(
        apis: Apis) -> None:
    await _submit(apis, "create_space", {"space_id": SPACE})
    session = (await _submit(apis, "start_session", {"space_id": SPACE})).ids["session_id"]
    for role, who, text in (("user", "Dana", "how was the week?"),
                            ("assistant", "Helper", "I joined a pottery class in Lisbon"),
                            ("user", "Dana", "that sounds lovely")):
        said = await _submit(apis, "append_message", {
            "space_id": SPACE, "session_id": session, "role": role, "content": text,
            "participant": who, "said_at": "2023-05-08T13:56:00Z"})
    body: dict[str, Any] = {"query": "pottery class", "kinds": ["message"], "window": 1,
                            "role": ["assistant"], "participant": "Helper", "threshold": 0.0,
                            "weights": {"dense": 0.0, "keyword": 1.0},
                            "valid_at": "2024-01-01T00:00:00Z",
                            "min_position": said.position}
    found = await apis.query.Search(qpb.SearchRequest(
        query="pottery class", kinds=["message"], window=1, role=["assistant"],
        participant="Helper", threshold=0.0, weights=qpb.Weights(dense=0.0, keyword=1.0),
        valid_at=_ts("2024-01-01T00:00:00Z"), min_position=said.position),
        metadata=apis.metadata)
    http = await _post(apis, "/v1/search", body, status=200)
    assert found == as_message(http, qpb.SearchAnswer())
    [hit] = found.results
    assert (hit.kind, hit.role, hit.participant, hit.session_id) == (
        "message", "assistant", "Helper", session)
    assert hit.message_id == hit.item_id
    assert hit.said_at.ToJsonString() == "2023-05-08T13:56:00Z"
    assert [t.content for t in hit.window.before] == ["how was the week?"]
    assert [t.content for t in hit.window.after] == ["that sounds lovely"]
    code, refused = await _refused(apis.query.Search(qpb.SearchRequest(
        query="x", kinds=["messages"], window=11), metadata=apis.metadata))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert {f["path"] for f in refused["error"]["fields"]} == {"kinds.0", "window"}


async def test_refusals_carry_the_http_error_body_under_the_mapped_status_code(
        apis: Apis) -> None:
    await _submit(apis, "create_space", {"space_id": SPACE})
    bad = {"kind": "fat", "content": ""}
    code, body = await _refused(_submit(apis, "assert_memory", {"space_id": SPACE, **bad}))
    http = await _post(apis, f"/v1/spaces/{SPACE}/memories", bad, status=422)
    assert (code, body) == (grpc.StatusCode.INVALID_ARGUMENT, http)
    assert {f["path"] for f in body["error"]["fields"]} == {"kind", "content"}

    revise = {"item_id": str(ITEM), "content": "x"}
    code, body = await _refused(_submit(apis, "revise_memory", {"space_id": SPACE, **revise}))
    http = await _post(apis, f"/v1/spaces/{SPACE}/memories/{ITEM}/revise", revise, status=404)
    assert (code, body) == (grpc.StatusCode.NOT_FOUND, http)

    code, body = await _refused(apis.query.GetItem(qpb.GetItemRequest(
        space_id=SPACE, item_id=str(ITEM), valid_at=_ts(Y2023), as_of_position=1),
        metadata=apis.metadata))
    http = await _get(apis, f"/v1/spaces/{SPACE}/items/{ITEM}", status=404, valid_at=Y2023,
                      as_of_position=1)
    assert (code, body) == (grpc.StatusCode.NOT_FOUND, http)

    stale = {"space_id": SPACE, "kind": "fact", "content": "x", "expected_version": 3}
    code, body = await _refused(_submit(apis, "assert_memory", stale))
    assert (code, body["error"]["code"]) == (grpc.StatusCode.ABORTED, "conflict")

    batch = [{"command": "assert_memory", "space_id": SPACE, "kind": "fact", "content": c}
             for c in ("fine", "")]
    code, body = await _refused(apis.ingest.SubmitBatch(ipb.BatchRequest(commands=[
        ipb.CommandRequest(command=c["command"], json_body=json.dumps(c)) for c in batch]),
        metadata=apis.metadata))
    http = await _post(apis, "/v1/batch", {"commands": batch}, status=422)
    assert (code, body) == (grpc.StatusCode.INVALID_ARGUMENT, http)
    assert body["error"]["fields"][0]["path"] == "commands.1.content"


@pytest.mark.parametrize(("call", "code", "path"), [
    ("unknown command", grpc.StatusCode.INVALID_ARGUMENT, "command"),
    ("body not json", grpc.StatusCode.INVALID_ARGUMENT, "json_body"),
    ("bad tenant", grpc.StatusCode.INVALID_ARGUMENT, "metadata.x-memledger-tenant"),
    ("bad cursor", grpc.StatusCode.INVALID_ARGUMENT, "after"),
    ("bad limit", grpc.StatusCode.INVALID_ARGUMENT, "limit"),
    ("not yet visible", grpc.StatusCode.UNAVAILABLE, "min_position"),
    ("never written", grpc.StatusCode.INVALID_ARGUMENT, "min_position"),
])
async def test_each_refusal_names_the_field_at_fault(apis: Apis, call: str,
                                                     code: grpc.StatusCode, path: str) -> None:
    tenant = (("x-memledger-tenant", "not a tenant!"),)
    written = await _submit(apis, "create_space", {"space_id": "written"})
    calls: dict[str, Callable[[], Awaitable[Any]]] = {
        "unknown command": lambda: _submit(apis, "assert_memories", {}),
        "body not json": lambda: apis.ingest.Submit(ipb.CommandRequest(
            command="create_space", json_body="{"), metadata=apis.metadata),
        "bad tenant": lambda: apis.ingest.Submit(ipb.CommandRequest(
            command="create_space", json_body='{"space_id": "x"}'), metadata=tenant),
        "bad cursor": lambda: _first(apis.query.Changes(qpb.ChangesRequest(after="nope"),
                                                        metadata=apis.metadata)),
        "bad limit": lambda: apis.query.ListItems(qpb.ListItemsRequest(space_id=SPACE, limit=0),
                                                  metadata=apis.metadata),
        "not yet visible": lambda: apis.query.History(qpb.HistoryRequest(
            space_id=SPACE, item_id=str(ITEM), min_position=written.position, wait_ms=0),
            metadata=apis.metadata),
        "never written": lambda: apis.query.History(qpb.HistoryRequest(
            space_id=SPACE, item_id=str(ITEM), min_position=10**6, wait_ms=0),
            metadata=apis.metadata),
    }
    found, body = await _refused(calls[call]())
    assert found == code
    assert [f["path"] for f in body["error"]["fields"]] == [path]


async def _first(stream: Any) -> Any:
    async for message in stream:
        return message
    return None


async def test_a_followed_changes_feed_sends_new_changes_until_cancelled(apis: Apis) -> None:
    await _submit(apis, "create_space", {"space_id": SPACE})
    first = await _submit(apis, "assert_memory", {"space_id": SPACE, "kind": "fact",
                                                  "content": "one"})
    stream = apis.query.Changes(qpb.ChangesRequest(space_id=SPACE, follow=True,
                                                   min_position=first.position),
                                metadata=apis.metadata)
    pages = aiter(stream)
    caught_up = await anext(pages)
    assert [c.event_type for c in caught_up.changes] == ["space.created", "memory.asserted"]
    later = await _submit(apis, "assert_memory", {"space_id": SPACE, "kind": "fact",
                                                  "content": "two"})
    fresh = await asyncio.wait_for(anext(pages), 30)
    assert [c.position for c in fresh.changes] == [later.position]
    resumed = await _get(apis, f"/v1/spaces/{SPACE}/changes", after=caught_up.next_cursor)
    assert [c["position"] for c in resumed["changes"]] == [later.position]
    stream.cancel()
    assert stream.cancelled()


async def test_replay_exports_the_callers_events_in_order_like_the_cli(
        apis: Apis, event_store: PostgresEventStore) -> None:
    for tenant in (TENANT, "globex"):
        for space in (SPACE, "ops"):
            await _submit(apis, "create_space", {"space_id": space}, tenant=tenant)
            await _submit(apis, "assert_memory", {"space_id": space, "kind": "fact",
                                                  "content": f"{tenant} {space}"},
                          tenant=tenant)
    logged = [e for e in read_everything(event_store) if e.fields()["tenant_id"] == TENANT]
    chunks = [c async for c in apis.query.Replay(qpb.ReplayRequest(batch=3),
                                                 metadata=apis.metadata)]
    assert [e.document for c in chunks for e in c.events] == [
        e.document().decode() for e in logged]
    assert [len(c.events) for c in chunks] == [3, 1]
    assert chunks[-1].through_position == event_store.max_position()
    narrowed = [e async for c in apis.query.Replay(qpb.ReplayRequest(
        space_id="ops", types=["memory.asserted"], to_position=7), metadata=apis.metadata)
        for e in c.events]
    assert [(e.position, e.event_type) for e in narrowed] == [
        (e.position, e.event_type) for e in logged
        if e.event_type == "memory.asserted" and e.fields()["space_id"] == "ops"
        and e.position <= 7]


async def test_the_injected_tenant_check_sees_the_callers_credential(
        writer: GroupCommitWriter, event_store: PostgresEventStore) -> None:
    def by_token(authorization: str | None, tenant_header: str | None,
                 client: str | None = None) -> Principal:
        if authorization != "Bearer globex-secret":
            raise Denied(401, "unauthenticated", "unknown token", "header.Authorization")
        return Principal("globex", "write")

    server, address = await grpc_server.start(
        [ingest_grpc.registrar(writer, by_token)], "127.0.0.1", 0, fallback=0,
        setting="MEMLEDGER_GRPC_PORT")
    request = ipb.CommandRequest(command="create_space", json_body='{"space_id": "s"}')
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            stub = ingest_pb2_grpc.IngestStub(channel)
            await stub.Submit(request, metadata=(("authorization", "Bearer globex-secret"),))
            code, body = await _refused(stub.Submit(request))
    finally:
        await server.stop(0)
    assert [e.fields()["tenant_id"] for e in read_everything(event_store)] == ["globex"]
    assert code == grpc.StatusCode.UNAUTHENTICATED
    assert body["error"]["fields"] == [{"path": "metadata.authorization",
                                        "reason": "unknown token"}]
