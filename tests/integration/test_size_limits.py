"""Bodies near every size limit, sent to ingest and query served together behind the request
limits (API keys required, personal data sealed, the whole pipeline behind the writer): a body
at a field's limit commits, one past it is refused naming the field (422); a body of just
``MEMLEDGER_HTTP_MAX_BODY_BYTES`` (a batch of large commands) commits, one byte more is refused
(413), declared or not. Every answer comes (the client waits far longer than any write should
take: a wedged writer fails here, without timing anything), and the writer takes the next
write. (The default limit, 32 MiB, is sent to `memledger up`: ``tests/e2e/test_largest_body``.)"""

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import orjson
import pytest

from memledger_platform.endpoints import Endpoints
from memledger_schemas.commands import MAX_BATCH
from tests.integration.locked_support import MAX_BODY, Locked, locked_world
from tests.support import large_batch

WIDE = "€"
"""Three bytes in UTF-8: a limit counted in characters holds three times as many bytes."""
CONTENT, SHORT, REASON, TAGS, TAG, SOURCES, ALIASES = 65_536, 512, 2_048, 32, 64, 32, 64

Body = Callable[[int, Locked], dict[str, Any]]


def _memory(**fields: Any) -> dict[str, Any]:
    return {"kind": "fact", "content": "a fact", **fields}


LIMITS: list[tuple[str, str, Body, int, str]] = [
    # what, path ({item}, {session}: the world's), body of size n, the limit, the field
    ("content", "/v1/spaces/main/memories", lambda n, w: _memory(content=WIDE * n), CONTENT,
     "content"),
    ("tags", "/v1/spaces/main/memories", lambda n, w: _memory(
        tags=[f"{i:0{TAG}d}" for i in range(n)]), TAGS, "tags"),
    ("a tag", "/v1/spaces/main/memories", lambda n, w: _memory(tags=["t" * n]), TAG,
     "tags.0"),
    ("sources", "/v1/spaces/main/memories", lambda n, w: _memory(sources=[
        {"type": "url", "ref": WIDE * SHORT}] * n), SOURCES, "sources"),
    ("a triple", "/v1/spaces/main/memories", lambda n, w: _memory(triple={
        "subject": WIDE * n, "predicate": WIDE * n, "object": WIDE * n}), SHORT,
     "triple.subject"),
    ("an idempotency key", "/v1/spaces/main/memories", lambda n, w: _memory(
        idempotency_key=WIDE * n), SHORT, "idempotency_key"),
    ("a subject id", "/v1/spaces/main/memories", lambda n, w: _memory(subject_id="s" * n),
     SHORT, "subject_id"),
    ("a revision's reason", "/v1/spaces/main/memories/{item}/revise", lambda n, w: {
        "importance": 0.7, "reason": WIDE * n}, REASON, "reason"),
    ("a message", "/v1/spaces/main/sessions/{session}/messages", lambda n, w: {
        "role": "user", "content": WIDE * n}, CONTENT, "content"),
    ("a session's title", "/v1/spaces/main/sessions", lambda n, w: {"title": WIDE * n},
     SHORT, "title"),
    ("aliases", "/v1/spaces/main/entities", lambda n, w: {
        "entity_id": f"many-{n}", "name": "Ana", "type": "person",
        "aliases": [WIDE * SHORT] * n}, ALIASES, "aliases"),
    ("feedback's comment", "/v1/spaces/main/feedback", lambda n, w: {
        "item_id": w.items[1], "signal": "used", "comment": WIDE * n}, CONTENT, "comment"),
    ("a space's description", "/v1/spaces", lambda n, w: {
        "space_id": f"described-{n}", "description": WIDE * n}, CONTENT, "description"),
    ("a batch", "/v1/batch", lambda n, w: {"commands": [
        {"command": "assert_memory", "space_id": "notes", **_memory(content=f"#{i}")}
        for i in range(n)]}, MAX_BATCH, "commands"),
]


@pytest.fixture(scope="module")
async def world(engines: Endpoints, tmp_path_factory: pytest.TempPathFactory
                ) -> AsyncIterator[Locked]:
    async with locked_world(engines, tmp_path_factory.mktemp("vectors")) as found:
        yield found


@pytest.mark.parametrize(("what", "path", "body", "limit", "field"), LIMITS,
                         ids=[case[0] for case in LIMITS])
async def test_a_body_at_a_fields_limit_commits_and_one_past_it_is_refused_naming_it(
        world: Locked, what: str, path: str, body: Body, limit: int, field: str) -> None:
    route = path.format(item=world.items[0], session=world.sessions[0])
    async with world.client() as api:
        at = await api.post(route, json=body(limit, world))
        past = await api.post(route, json=body(limit + 1, world))

    assert at.status_code == 201, at.text[:500]
    assert past.status_code == 422, past.text[:500]
    assert field in [f["path"] for f in past.json()["error"]["fields"]], past.text[:500]
    await _the_writer_takes_the_next_write(world)


async def _post(api: httpx.AsyncClient, body: bytes, chunked: bool = False
                ) -> httpx.Response:
    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 64 * 1024):
            yield body[start:start + 64 * 1024]

    return await api.post("/v1/batch", content=chunks() if chunked else body,
                          headers={"content-type": "application/json"})


async def test_a_batch_of_just_the_largest_body_commits_and_one_byte_more_is_413(
        world: Locked) -> None:
    largest = large_batch(MAX_BODY, "notes")
    async with world.client() as api:
        at = await _post(api, largest)
        past = await _post(api, large_batch(MAX_BODY + 1, "notes"))
        past_undeclared = await _post(api, large_batch(MAX_BODY + 1, "notes"), chunked=True)

    assert at.status_code == 201, at.text[:500]
    assert len(at.json()["results"]) == len(orjson.loads(largest)["commands"]) > 10
    for refused in (past, past_undeclared):
        assert refused.status_code == 413, refused.text[:500]
        assert refused.json()["error"]["code"] == "too_large"
    await _the_writer_takes_the_next_write(world)


async def _the_writer_takes_the_next_write(world: Locked) -> None:
    async with world.client() as api:
        answer = await api.post("/v1/spaces/main/memories", json=_memory(content="and then"))
    assert answer.status_code == 201, answer.text
