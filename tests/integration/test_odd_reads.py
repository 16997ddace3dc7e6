"""Odd reads (and a few odd writes) over HTTP and gRPC on the real engines: a position no write
has reached yet is refused at once naming the field, a space that does not exist is 404, a
search body must be JSON without a repeated key, a gRPC ``json_body`` is read as strictly as an
HTTP body. A position committed but not yet projected still waits (``test_query_api``)."""

import json
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import grpc
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from memledger_ingest.core.writer import GroupCommitWriter
from memledger_platform import grpc_server
from memledger_platform.endpoints import Endpoints
from memledger_platform.eventstore.postgres import PostgresEventStore
from memledger_schemas.grpc.v1 import ingest_pb2 as ipb
from memledger_schemas.grpc.v1 import query_pb2 as qpb
from memledger_schemas.subjects import Subjects
from tests.integration.grpc_support import Apis, apis_of_their_own, both_apis

SPACE = "hr"
ITEM = UUID("0190a000-0000-7000-8000-00000000a11c")
FAR = 10**12
"""A position far past anything written."""


@pytest.fixture(scope="module")
async def apis(engines: Endpoints, tmp_path_factory: pytest.TempPathFactory
               ) -> AsyncIterator[Apis]:
    """One pipeline for the module's tests: ``head`` is its only write (what the others send
    is refused), so the last committed position stays ``head``."""
    async with apis_of_their_own(engines.postgres_dsn, engines.nats_url,
                                 tmp_path_factory.mktemp("odd-reads")) as found:
        yield found


@pytest.fixture
async def own_apis(engines: Endpoints, event_store: PostgresEventStore, pg_schema: str,
                   nats_js: tuple[Client, JetStreamContext], subjects: Subjects,
                   writer: GroupCommitWriter, tmp_path: Path) -> AsyncIterator[Apis]:
    """A pipeline of the test's own, for one that writes."""
    async with both_apis(engines.postgres_dsn, event_store, pg_schema, nats_js, subjects,
                         writer, tmp_path / "vectors") as found:
        yield found


@pytest.fixture(scope="module")
async def head(apis: Apis) -> int:
    """A space with one memory; the last committed position."""
    assert (await apis.http.post("/v1/spaces", json={"space_id": SPACE})).status_code == 201
    written = await apis.http.post(f"/v1/spaces/{SPACE}/memories", json={
        "item_id": str(ITEM), "kind": "fact", "content": "Alice works at Acme"})
    assert written.status_code == 201, written.text
    position: int = written.json()["position"]
    return position


def _error(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    return error


def _paths(error: dict[str, Any]) -> list[str]:
    return [f["path"] for f in error["fields"]]


async def _refused(call: Awaitable[Any]) -> tuple[grpc.StatusCode, dict[str, Any]]:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    body = grpc_server.error_body(caught.value)
    assert body is not None, caught.value
    error: dict[str, Any] = body["error"]
    return caught.value.code(), error


# --- positions past the head -----------------------------------------------------------------

PAST_THE_HEAD = [
    (f"/v1/spaces/{SPACE}/items/{ITEM}", "as_of_position"),
    (f"/v1/spaces/{SPACE}/items/{ITEM}", "min_position"),
    (f"/v1/spaces/{SPACE}/items", "as_of_position"),
    (f"/v1/spaces/{SPACE}/changes", "min_position"),
    ("/v1/changes", "min_position"),
    (f"/v1/spaces/{SPACE}/graph", "as_of_position"),
    (f"/v1/spaces/{SPACE}/policies", "as_of_position"),
    (f"/v1/spaces/{SPACE}/items/{ITEM}/history", "min_position"),
]


async def test_a_read_past_the_last_committed_position_is_422_at_once_naming_the_field(
        apis: Apis, head: int) -> None:
    for path, field in PAST_THE_HEAD:
        response = await apis.http.get(path, params={field: FAR, "wait_ms": 10_000})

        error = _error(response, 422)
        assert _paths(error) == [f"query.{field}"], path
        assert error["committed_position"] == head
        assert str(head) in error["message"]


async def test_a_search_past_the_last_committed_position_is_422_naming_the_field(
        apis: Apis, head: int) -> None:
    for field in ("as_of_position", "min_position"):
        response = await apis.http.post("/v1/search", json={
            "query": "where does Alice work?", field: FAR, "wait_ms": 10_000})
        error = _error(response, 422)
        assert _paths(error) == [f"body.{field}"]
        assert error["committed_position"] == head


async def test_a_grpc_read_past_the_last_committed_position_is_invalid_argument(
        apis: Apis, head: int) -> None:
    calls: list[tuple[str, Awaitable[Any]]] = [
        ("as_of_position", apis.query.GetItem(qpb.GetItemRequest(
            space_id=SPACE, item_id=str(ITEM), as_of_position=FAR, wait_ms=10_000),
            metadata=apis.metadata)),
        ("min_position", apis.query.ListItems(qpb.ListItemsRequest(
            space_id=SPACE, min_position=FAR, wait_ms=10_000), metadata=apis.metadata)),
        ("min_position", apis.query.Search(qpb.SearchRequest(
            query="where does Alice work?", min_position=FAR, wait_ms=10_000),
            metadata=apis.metadata)),
        ("min_position", _first(apis.query.Changes(qpb.ChangesRequest(
            min_position=FAR, wait_ms=10_000), metadata=apis.metadata))),
    ]
    for field, call in calls:
        code, error = await _refused(call)
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert _paths(error) == [field]
        assert error["committed_position"] == head


async def _first(stream: Any) -> Any:
    async for page in stream:
        return page
    return None


# --- spaces that do not exist ---------------------------------------------------------------

async def test_a_read_of_a_space_that_does_not_exist_is_404(apis: Apis, head: int) -> None:
    seen = {"min_position": head}  # the space and its memory are projected
    for path in ("items", "changes", "graph", "policies", "merge-suggestions"):
        error = _error(await apis.http.get(f"/v1/spaces/nowhere/{path}", params=seen), 404)
        assert error["code"] == "not_found"
        assert "'nowhere'" in error["message"]
        found = await apis.http.get(f"/v1/spaces/{SPACE}/{path}", params=seen)
        assert found.status_code == 200, found.text


async def test_a_read_of_an_empty_space_that_exists_is_an_empty_answer(own_apis: Apis
                                                                      ) -> None:
    apis = own_apis
    created = await apis.http.post("/v1/spaces", json={"space_id": "empty"})
    seen = {"min_position": created.json()["position"]}
    for path in ("items", "graph", "policies", "changes?after=eyJ2IjoxLCJwIjo5OTl9"):
        response = await apis.http.get(f"/v1/spaces/empty/{path}", params=seen)
        assert response.status_code == 200, response.text


async def test_a_grpc_read_of_a_space_that_does_not_exist_is_not_found(apis: Apis, head: int
                                                                       ) -> None:
    for call in (apis.query.ListItems(qpb.ListItemsRequest(space_id="nowhere",
                                                           min_position=head),
                                      metadata=apis.metadata),
                 _first(apis.query.Changes(qpb.ChangesRequest(space_id="nowhere",
                                                              min_position=head),
                                           metadata=apis.metadata))):
        code, error = await _refused(call)
        assert code == grpc.StatusCode.NOT_FOUND
        assert "'nowhere'" in error["message"]


# --- request bodies ---------------------------------------------------------------------------

async def test_a_search_body_of_another_media_type_is_415(apis: Apis, head: int) -> None:
    response = await apis.http.post("/v1/search", content=json.dumps({"query": "Alice"}),
                                    headers={"content-type": "text/plain"})
    error = _error(response, 415)
    assert error["code"] == "unsupported_media_type"
    assert _paths(error) == ["header.Content-Type"]


async def test_a_search_body_with_a_key_given_twice_is_422_naming_it(apis: Apis, head: int
                                                                     ) -> None:
    response = await apis.http.post(
        "/v1/search", content=b'{"query": "Alice", "k": 3, "k": 50}',
        headers={"content-type": "application/json"})
    assert _paths(_error(response, 422)) == ["body.k"]


@pytest.mark.parametrize(("command", "body", "field"), [
    ("assert_memory", '{"space_id": "hr", "kind": "fact", "content": "a", "content": "b"}',
     "content"),
    ("assert_memory", json.dumps({"space_id": SPACE, "kind": "fact", "content": "x",
                                  "valid_from": "9999-12-31T23:59:59-14:00"}), "valid_from"),
    ("record_retrieval", json.dumps({
        "retrieval_id": str(uuid4()), "operation": "search", "basis": {
            "position": 1, "recorded_at": None, "valid_at": "2026-01-01T00:00:00Z"},
        "policy_version": "p1", "parameters": "PARAMETERS"}).replace(
        '"PARAMETERS"', "{" + '"a": {' * 1_000 + "}" * 1_001), "parameters"),
])
async def test_a_grpc_json_body_is_read_as_strictly_as_an_http_body(
        apis: Apis, head: int, command: str, body: str, field: str) -> None:
    code, error = await _refused(apis.ingest.Submit(
        ipb.CommandRequest(command=command, json_body=body), metadata=apis.metadata))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert _paths(error) == [field]


OFF_THE_CALENDAR = ("9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00")
"""Instants whose UTC form leaves years 1-9999 (a command refuses them: 422)."""


async def test_a_read_at_an_instant_off_the_calendar_never_fails_with_a_server_error(
        apis: Apis, head: int) -> None:
    gets = [(f"/v1/spaces/{SPACE}/items/{ITEM}", "valid_at"),
            (f"/v1/spaces/{SPACE}/items", "valid_at"), (f"/v1/spaces/{SPACE}/items", "recorded_at"),
            (f"/v1/spaces/{SPACE}/changes", "since"), (f"/v1/spaces/{SPACE}/graph", "valid_at")]
    posts = [("/v1/search", {"query": "Alice"}),
             ("/v1/context", {"space_id": SPACE, "query": "Alice"})]
    for instant in OFF_THE_CALENDAR:
        answers = [await apis.http.get(path, params={field: instant, "min_position": head})
                   for path, field in gets]
        answers += [await apis.http.post(route, json={**body, "valid_at": instant,
                                                      "min_position": head})
                    for route, body in posts]
        assert [a.status_code for a in answers if a.status_code >= 500] == []
