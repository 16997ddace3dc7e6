"""The ingest HTTP API over a real event store: statuses, field paths, idempotency, OCC."""

from collections.abc import AsyncIterator
from typing import Any
from uuid import uuid4

import httpx
import pytest

from memledger_ingest.core.writer import GroupCommitWriter
from memledger_ingest.entrypoints.http import create_app
from memledger_platform.auth import TENANT_HEADER, Gate
from memledger_platform.eventstore.postgres import PostgresEventStore
from memledger_platform.limits import RateLimiter, RateLimits
from memledger_schemas.commands import COMMANDS


async def _healthy() -> dict[str, Any]:
    return {"status": "ok"}


@pytest.fixture
async def writer(event_store: PostgresEventStore) -> AsyncIterator[GroupCommitWriter]:
    writer = GroupCommitWriter(event_store)
    writer.start()
    yield writer
    writer.stop()


def _client(writer: GroupCommitWriter, default_tenant: str | None = "default"
            ) -> httpx.AsyncClient:
    app = create_app(writer, _healthy, default_tenant)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


@pytest.fixture
async def api(writer: GroupCommitWriter) -> AsyncIterator[httpx.AsyncClient]:
    async with _client(writer) as client:
        response = await client.post("/v1/spaces", json={"space_id": "s1"})
        assert response.status_code == 201, response.text
        yield client


async def _assert_fact(api: httpx.AsyncClient, **extra: Any) -> httpx.Response:
    return await api.post("/v1/spaces/s1/memories",
                          json={"kind": "fact", "content": "The sky is blue", **extra})


def _paths(response: httpx.Response) -> list[str]:
    return [f["path"] for f in response.json()["error"]["fields"]]


async def test_a_write_returns_its_event_ids_position_and_the_new_item_id(
        api: httpx.AsyncClient, event_store: PostgresEventStore) -> None:
    response = await _assert_fact(api)
    assert response.status_code == 201
    body = response.json()
    assert body["command"] == "assert_memory"
    assert len(body["event_ids"]) == 1
    assert body["position"] == event_store.max_position()
    assert "item_id" in body["ids"]


async def test_bad_input_gets_422_naming_every_field_at_fault(api: httpx.AsyncClient) -> None:
    response = await api.post("/v1/spaces/s1/memories", json={"kind": "fat", "content": ""})
    assert response.status_code == 422
    assert set(_paths(response)) == {"kind", "content"}


@pytest.mark.parametrize(("body", "path"), [
    (b"{not json", "body"),
    (b"[1, 2]", "body"),
    (b'{"kind": "fact", "content": "x", "valid_from": "2026-01-01T00:00:00"}', "valid_from"),
    (b'{"kind": "fact", "content": "x", "surprise": 1}', "surprise"),
])
async def test_malformed_bodies_get_422_with_the_path(api: httpx.AsyncClient, body: bytes,
                                                      path: str) -> None:
    response = await api.post("/v1/spaces/s1/memories", content=body,
                              headers={"content-type": "application/json"})
    assert response.status_code == 422
    assert path in _paths(response)


async def test_a_path_that_contradicts_the_body_is_refused(api: httpx.AsyncClient) -> None:
    response = await _assert_fact(api, space_id="other")
    assert response.status_code == 422
    assert _paths(response) == ["space_id"]


async def test_an_unknown_space_is_404_and_nothing_is_written(
        api: httpx.AsyncClient, event_store: PostgresEventStore) -> None:
    before = event_store.max_position()
    response = await api.post("/v1/spaces/nope/memories", json={"kind": "fact", "content": "x"})
    assert response.status_code == 404
    assert event_store.max_position() == before


async def test_a_stale_expected_version_is_409_with_the_current_version(
        api: httpx.AsyncClient) -> None:
    item = (await _assert_fact(api)).json()["ids"]["item_id"]
    response = await api.post(f"/v1/spaces/s1/memories/{item}/revise",
                              json={"content": "The sky is grey", "expected_version": 5})
    assert response.status_code == 409
    assert response.json()["error"]["current_version"] == 1
    ok = await api.post(f"/v1/spaces/s1/memories/{item}/revise",
                        json={"content": "The sky is grey", "expected_version": 1})
    assert ok.status_code == 201
    assert ok.json()["stream_version"] == 2


async def test_a_retry_with_the_same_idempotency_key_returns_the_first_result(
        api: httpx.AsyncClient, event_store: PostgresEventStore) -> None:
    first = await _assert_fact(api, idempotency_key="retry-1")
    position = event_store.max_position()
    again = await _assert_fact(api, idempotency_key="retry-1")
    assert again.status_code == 200
    assert again.json() == {**first.json(), "duplicate": True}
    assert event_store.max_position() == position
    different = await api.post("/v1/spaces/s1/memories", json={
        "kind": "fact", "content": "Something else", "idempotency_key": "retry-1"})
    assert different.status_code == 422
    assert _paths(different) == ["idempotency_key"]


async def test_a_batch_is_atomic_and_names_the_failing_command(
        api: httpx.AsyncClient, event_store: PostgresEventStore) -> None:
    before = event_store.max_position()
    response = await api.post("/v1/batch", json={"commands": [
        {"command": "assert_memory", "space_id": "s1", "kind": "fact", "content": "a"},
        {"command": "assert_memory", "space_id": "missing", "kind": "fact", "content": "b"}]})
    assert response.status_code == 404
    assert response.json()["error"]["command_index"] == 1
    assert event_store.max_position() == before


async def test_a_batch_validation_error_names_the_command_and_field(
        api: httpx.AsyncClient) -> None:
    response = await api.post("/v1/batch", json={"commands": [
        {"command": "assert_memory", "space_id": "s1", "kind": "fact", "content": "a"},
        {"command": "assert_memory", "space_id": "s1", "kind": "fact", "content": ""}]})
    assert response.status_code == 422
    assert _paths(response) == ["commands.1.content"]


async def test_a_batch_commits_every_command_in_order(api: httpx.AsyncClient) -> None:
    response = await api.post("/v1/batch", json={"commands": [
        {"command": "create_space", "space_id": "s2"},
        {"command": "assert_memory", "space_id": "s2", "kind": "decision", "content": "Use PG"},
        {"command": "upsert_entity", "space_id": "s2", "entity_id": "pg", "name": "PostgreSQL",
         "type": "database"}]})
    assert response.status_code == 201
    positions = [r["position"] for r in response.json()["results"]]
    assert positions == sorted(positions)
    assert response.json()["position"] == positions[-1]


async def test_an_embedding_is_recorded_beside_its_item_without_moving_the_items_version(
        api: httpx.AsyncClient, event_store: PostgresEventStore) -> None:
    item = (await _assert_fact(api)).json()["ids"]["item_id"]
    embedding = {"item_version": 1, "model": "mini", "dims": 2, "vector": [0.6, 0.8]}

    response = await api.post(f"/v1/spaces/s1/memories/{item}/embedding", json=embedding)
    revision = await api.post(f"/v1/spaces/s1/memories/{item}/revise",
                              json={"content": "The sky is grey", "expected_version": 1})

    assert response.status_code == 201, response.text
    assert response.json()["command"] == "record_embedding"
    assert response.json()["position"] == event_store.max_position() - 1
    assert response.json()["ids"] == {"item_id": item}
    assert revision.status_code == 201, revision.text


async def test_an_embedding_of_an_unknown_item_is_404_and_nothing_is_written(
        api: httpx.AsyncClient, event_store: PostgresEventStore) -> None:
    before = event_store.max_position()
    response = await api.post(f"/v1/spaces/s1/memories/{uuid4()}/embedding", json={
        "item_version": 1, "model": "mini", "dims": 1, "vector": [1.0]})
    assert response.status_code == 404
    assert event_store.max_position() == before


async def test_tenants_never_see_each_others_items(api: httpx.AsyncClient) -> None:
    item = (await _assert_fact(api)).json()["ids"]["item_id"]
    other = {TENANT_HEADER: "other"}
    assert (await api.post("/v1/spaces", json={"space_id": "s1"}, headers=other)
            ).status_code == 201
    response = await api.post(f"/v1/spaces/s1/memories/{item}/retract", json={}, headers=other)
    assert response.status_code == 404


async def test_an_invalid_tenant_header_is_refused(api: httpx.AsyncClient) -> None:
    response = await api.post(
        "/v1/spaces", json={"space_id": "x"}, headers={TENANT_HEADER: "bad tenant!"})
    assert response.status_code == 422
    assert _paths(response) == [f"header.{TENANT_HEADER}"]


async def test_without_a_default_tenant_the_header_is_required(writer: GroupCommitWriter) -> None:
    async with _client(writer, default_tenant=None) as client:
        response = await client.post("/v1/spaces", json={"space_id": "x"})
    assert response.status_code == 422
    assert _paths(response) == [f"header.{TENANT_HEADER}"]


async def test_the_openapi_document_describes_every_command(api: httpx.AsyncClient) -> None:
    spec = (await api.get("/openapi.json")).json()
    for model in COMMANDS:
        operation = spec["paths"][model.http_path]["post"]
        ref = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        assert ref.rsplit("/", 1)[-1] in spec["components"]["schemas"]


async def test_a_tenant_over_its_rate_gets_429_with_retry_after_and_loses_no_accepted_write(
        writer: GroupCommitWriter, event_store: PostgresEventStore) -> None:
    limiter = RateLimiter(rate=0.01, burst=4)  # four requests, then one per 100 s
    app = create_app(writer, _healthy, "default", Gate(None, "default",
                                                       RateLimits(tenant=limiter)))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://test") as api:
        await api.post("/v1/spaces", json={"space_id": "main"})
        answers = [await api.post("/v1/spaces/main/memories",
                                  json={"kind": "fact", "content": f"fact {n}"})
                   for n in range(5)]
    assert [a.status_code for a in answers] == [201, 201, 201, 429, 429]
    assert int(answers[-1].headers["Retry-After"]) >= 1
    assert answers[-1].json()["error"]["code"] == "rate_limited"
    stored = [e for e in event_store.read_all(0, 100) if e.event_type == "memory.asserted"]
    assert len(stored) == 3


async def test_a_path_no_route_takes_is_a_json_problem_not_plain_text(
        api: httpx.AsyncClient) -> None:
    response = await api.get("/v1/no-such-route")
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"]["code"] == "not_found"


async def test_a_route_body_leaves_out_what_the_path_names_and_the_actor(
        api: httpx.AsyncClient) -> None:
    spec = (await api.get("/openapi.json")).json()
    operation = spec["paths"]["/v1/spaces/{space_id}/memories/{item_id}/revise"]["post"]
    body = spec["components"]["schemas"][operation["requestBody"]["content"][
        "application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]]
    path = {p["name"]: p["schema"] for p in operation["parameters"] if p["in"] == "path"}

    assert not {"space_id", "item_id", "actor"} & set(body["properties"])
    assert path["item_id"]["format"] == "uuid"
    assert "pattern" in path["space_id"]
    asserted = await _assert_fact(api)
    item = asserted.json()["ids"]["item_id"]
    answer = await api.post(f"/v1/spaces/s1/memories/{item}/revise", json={"importance": 0.2})
    assert answer.status_code == 201, answer.text
