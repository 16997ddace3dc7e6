"""Odd input at the ingest boundary, without engines (the command models, and the ingest HTTP
app over an in-memory event store): each is refused with a 4xx naming the field, never a 500,
and nothing is written."""

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

import httpx
import orjson
import pytest
from pydantic import ValidationError

from memledger_ingest.core.erasure import Erasure
from memledger_ingest.core.writer import GroupCommitWriter
from memledger_ingest.entrypoints.http import create_app
from memledger_platform.crypto import MemoryKeyring
from memledger_platform.eventstore.memory import InMemoryEventStore
from memledger_platform.jsonbody import is_json, repeated_key
from memledger_schemas import commands as c

DEEP = "{" + '"a": {' * 1_000 + "}" * 1_001
"""Parameters nested a thousand levels (orjson writes at most 254, so it is spelled out)."""
OFF_THE_CALENDAR = ["9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00"]
"""Instants whose UTC form falls outside years 1 to 9999."""


def _retrieval(parameters: str) -> bytes:
    return (f'{{"retrieval_id": "{uuid4()}", "operation": "search", "parameters": '
            f'{parameters}, "basis": {{"position": 1, "recorded_at": null, "valid_at": '
            f'"2026-01-01T00:00:00Z"}}, "policy_version": "p1"}}').encode()


def _embedding(vector: list[float]) -> dict[str, Any]:
    return {"item_version": 1, "model": "m", "dims": len(vector), "vector": vector}


def _locations(error: pytest.ExceptionInfo[ValidationError]) -> list[str]:
    return [".".join(str(p) for p in e["loc"]) for e in error.value.errors()]


# --- the command models ------------------------------------------------------------------

def test_parameters_nested_a_thousand_levels_deep_are_refused_naming_the_field() -> None:
    with pytest.raises(ValidationError) as refused:
        c.RecordRetrieval.model_validate(orjson.loads(_retrieval(DEEP)))
    assert _locations(refused) == ["parameters"]
    assert "levels" in refused.value.errors()[0]["msg"]


def test_a_nul_deep_inside_parameters_is_still_found() -> None:
    nested = "{" + '"a": {' * 20 + '"b": "x\\u0000y"' + "}" * 21
    with pytest.raises(ValidationError) as refused:
        c.RecordRetrieval.model_validate(orjson.loads(_retrieval(nested)))
    assert _locations(refused) == ["parameters"]


@pytest.mark.parametrize("instant", OFF_THE_CALENDAR)
def test_a_valid_time_that_leaves_the_calendar_in_utc_is_refused_naming_the_field(
        instant: str) -> None:
    with pytest.raises(ValidationError) as refused:
        c.AssertMemory.model_validate({"space_id": "s1", "kind": "fact", "content": "x",
                                       "valid_from": instant})
    assert _locations(refused) == ["valid_from"]
    assert "UTC" in refused.value.errors()[0]["msg"]


def test_the_last_instant_the_calendar_holds_in_utc_is_accepted() -> None:
    command = c.AssertMemory.model_validate({"space_id": "s1", "kind": "fact", "content": "x",
                                             "valid_from": "9999-12-31T09:59:59-14:00"})
    assert command.valid_from == datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)


@pytest.mark.parametrize("vector", [[1e308, 1.0], [1e7, 0.0], [0.0, 0.0], [1e-300, 0.0]])
def test_an_embedding_of_no_usable_length_is_refused_naming_the_vector(vector: list[float]
                                                                       ) -> None:
    with pytest.raises(ValidationError) as refused:
        c.RecordEmbedding.model_validate({"space_id": "s1", "item_id": str(uuid4()),
                                          **_embedding(vector)})
    assert _locations(refused) == ["vector"]
    assert "length" in refused.value.errors()[0]["msg"]


def test_an_embedding_of_any_ordinary_length_is_accepted() -> None:
    for vector in ([0.6, 0.8], [30.0, -40.0], [1e-3, 0.0]):
        c.RecordEmbedding.model_validate({"space_id": "s1", "item_id": str(uuid4()),
                                          **_embedding(vector)})


# --- JSON bodies -------------------------------------------------------------------------

@pytest.mark.parametrize(("content_type", "json"), [
    (None, True), ("application/json", True), ("Application/JSON; charset=utf-8", True),
    ("application/merge-patch+json", True), ("text/plain", False),
    ("application/x-www-form-urlencoded", False), ("multipart/form-data; boundary=x", False),
    ("text/json", False),
])
def test_only_json_media_types_are_json_bodies(content_type: str | None, json: bool) -> None:
    assert is_json(content_type) is json


@pytest.mark.parametrize(("raw", "path"), [
    (b'{"a": 1, "b": 2}', None),
    (b'{"a": 1, "a": 2}', "a"),
    (b'{"a": {"x": 1}, "b": {"x": 1, "y": [1, {"x": 2}]}}', None),
    (b'{"a": [1, 2, {"b": 1, "c": {"d": 1, "d": 2}}]}', "a.2.c.d"),
    (b'{"commands": [{"k": 1}, {"k": 1, "k": 2}]}', "commands.1.k"),
    (b'{"a": "\\"a\\": 1, ", "b": "{[", "c": 1, "c": 2}', "c"),
    (b'{"a\\u0062": 1, "ab": 2}', "ab"),
    (b'{"x": [[], {}, [{}]], "y": [{"z": 1}, {"z": 1}]}', None),
    (b'{"v": [0.5, -1e-3, 2], "w": {"v": [0.25, true, null, "s"]}}', None),
    (b'{"v": [0.5, 2, true, null, "s"], "w": [1.5, {"k": 1, "k": 2}]}', "w.1.k"),
])
def test_a_key_repeated_in_one_object_is_found_with_its_path(raw: bytes, path: str | None
                                                             ) -> None:
    assert repeated_key(raw, orjson.loads(raw)) == path


def test_a_repeat_is_found_a_thousand_levels_deep_without_recursion() -> None:
    raw = ("{" + '"a": {' * 1_000 + '"b": 1, "b": 2' + "}" * 1_001).encode()
    assert repeated_key(raw, orjson.loads(raw)) == ".".join(["a"] * 1_000 + ["b"])


# --- the ingest HTTP app -------------------------------------------------------------------

@dataclass
class Ingest:
    api: httpx.AsyncClient
    store: InMemoryEventStore
    keyring: MemoryKeyring
    writer: GroupCommitWriter


@pytest.fixture
def running() -> Iterator[tuple[InMemoryEventStore, MemoryKeyring, GroupCommitWriter]]:
    store, keyring = InMemoryEventStore(), MemoryKeyring()
    writer = GroupCommitWriter(store, keyring=keyring)
    writer.start()
    yield store, keyring, writer
    writer.stop()


@pytest.fixture
async def ingest(running: tuple[InMemoryEventStore, MemoryKeyring, GroupCommitWriter]
                 ) -> AsyncIterator[Ingest]:
    store, keyring, writer = running

    async def healthy() -> dict[str, Any]:
        return {"status": "ok"}

    app = create_app(writer, healthy, "acme", None, Erasure(store, keyring, writer))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://ingest") as api:
        assert (await api.post("/v1/spaces", json={"space_id": "s1"})).status_code == 201
        yield Ingest(api, store, keyring, writer)


def _paths(response: httpx.Response) -> list[str]:
    return [f["path"] for f in response.json()["error"]["fields"]]


async def test_a_body_of_another_media_type_is_refused_with_415_naming_the_header(
        ingest: Ingest) -> None:
    body = orjson.dumps({"kind": "fact", "content": "x"})
    for media in ("text/plain", "application/x-www-form-urlencoded"):
        response = await ingest.api.post("/v1/spaces/s1/memories", content=body,
                                         headers={"content-type": media})
        assert response.status_code == 415, response.text
        assert response.json()["error"]["code"] == "unsupported_media_type"
        assert _paths(response) == ["header.Content-Type"]
    unlabelled = await ingest.api.post("/v1/spaces/s1/memories", content=body)
    assert unlabelled.status_code == 201, unlabelled.text
    assert len(ingest.store.read_all(0, 100)) == 2  # the space and the unlabelled one


@pytest.mark.parametrize(("path", "raw", "field"), [
    ("/v1/spaces/s1/memories", b'{"kind": "fact", "content": "a", "content": "b"}',
     "content"),
    ("/v1/batch", b'{"commands": [{"command": "create_space", "space_id": "s2"}, {"command": '
     b'"assert_memory", "space_id": "s1", "kind": "fact", "kind": "preference", "content": "x"}]}',
     "commands.1.kind"),
])
async def test_a_key_given_twice_is_refused_with_422_naming_it(
        ingest: Ingest, path: str, raw: bytes, field: str) -> None:
    response = await ingest.api.post(path, content=raw,
                                     headers={"content-type": "application/json"})
    assert response.status_code == 422, response.text
    assert _paths(response) == [field]
    assert len(ingest.store.read_all(0, 100)) == 1


async def test_deep_parameters_over_http_are_422_naming_the_field(ingest: Ingest) -> None:
    response = await ingest.api.post("/v1/retrievals", content=_retrieval(DEEP),
                                     headers={"content-type": "application/json"})
    assert response.status_code == 422, response.text
    assert _paths(response) == ["parameters"]


@pytest.mark.parametrize("instant", OFF_THE_CALENDAR)
async def test_a_valid_time_off_the_calendar_over_http_is_422_naming_the_field(
        ingest: Ingest, instant: str) -> None:
    for field in ("valid_from", "valid_to"):
        response = await ingest.api.post("/v1/spaces/s1/memories", json={
            "kind": "fact", "content": "x", field: instant})
        assert response.status_code == 422, response.text
        assert _paths(response) == [field]


@pytest.mark.parametrize(("path", "raw", "field"), [
    ("/v1/spaces/s1/memories", b'{"kind": "fact", "content": "a\\u0000b"}', "content"),
    ("/v1/batch", b'{"commands": [{"command": "assert_memory", "space_id": "s1", "kind": '
     b'"fact", "content": "x", "tags": ["ok", "x\\u0000"]}]}', "commands.0.tags"),
    ("/v1/spaces/s%00/memories", b'{"kind": "fact", "content": "x"}', "space_id"),
])
async def test_a_nul_in_the_body_or_the_path_over_http_is_422_naming_the_field(
        ingest: Ingest, path: str, raw: bytes, field: str) -> None:
    """A body without the NUL escape is not walked for one (``commands.nul_free``): one with
    it, or a path that decodes to one, still is."""
    response = await ingest.api.post(path, content=raw,
                                     headers={"content-type": "application/json"})
    assert response.status_code == 422, response.text
    assert _paths(response) == [field]
    assert len(ingest.store.read_all(0, 100)) == 1


@pytest.mark.parametrize(("raw", "free"), [
    (b'{"content": "plain"}', True),
    (b'{"content": "a\\u0000b"}', False),
    (b'{"content": "a\\\\u0000b"}', False),  # an escaped backslash: checked, and clean
    (b'{"content": "a\\u00001"}', False),
])
def test_a_json_text_is_nul_free_only_without_the_nul_escape(raw: bytes, free: bool) -> None:
    assert c.nul_free(raw) is free
    assert ("\x00" not in str(orjson.loads(raw))) or not free


async def test_an_overflowing_embedding_over_http_is_422_naming_the_vector(ingest: Ingest
                                                                           ) -> None:
    response = await ingest.api.post(f"/v1/spaces/s1/memories/{uuid4()}/embedding",
                                     json=_embedding([1e308, 1.0]))
    assert response.status_code == 422, response.text
    assert _paths(response) == ["vector"]


@pytest.mark.parametrize("subject", ["u" * 600, "a%00b"])
async def test_a_subject_id_no_command_accepts_is_422_and_erases_nothing(ingest: Ingest,
                                                                          subject: str) -> None:
    response = await ingest.api.post(f"/v1/subjects/{subject}/erase")
    assert response.status_code == 422, response.text
    assert _paths(response) == ["path.subject_id"]
    assert len(ingest.store.read_all(0, 100)) == 1


@pytest.mark.parametrize("spelled", ["team/alice", "team%2Falice"])
async def test_a_subject_id_holding_a_slash_is_erased_over_http(ingest: Ingest, spelled: str
                                                                ) -> None:
    await ingest.writer.submit("acme", [c.AssertMemory(
        space_id="s1", kind="fact", content="Alice's secret", subject_id="team/alice")])
    assert ingest.keyring.spaces_of("acme", "team/alice") == ["s1"]
    response = await ingest.api.post(f"/v1/subjects/{spelled}/erase",
                                     json={"reason": "asked to"})
    assert response.status_code == 200, response.text
    receipt = response.json()
    assert receipt["subject_id"] == "team/alice"
    assert len(receipt["keys_destroyed"]) == 1
    assert ingest.keyring.spaces_of("acme", "team/alice") == []


def test_a_search_or_context_query_with_a_nul_is_refused_naming_the_query() -> None:
    from pydantic import ValidationError

    from memledger_schemas.api.semantic import ContextRequest, SearchRequest

    for build in (lambda: SearchRequest(query="a\x00b"),
                  lambda: ContextRequest(space_id="s", query="a\x00b")):
        with pytest.raises(ValidationError) as refused:
            build()
        assert refused.value.errors()[0]["loc"] == ("query",)
