"""Odd input over NATS intake: each message is answered and dead-lettered with a 422 naming
the field, the consumer keeps going, and nothing of it is written."""

import asyncio
from collections.abc import AsyncIterator
from uuid import uuid4

import orjson
import pytest

from memledger_ingest.core.writer import GroupCommitWriter
from memledger_ingest.entrypoints.intake import Intake
from memledger_platform.eventstore.postgres import PostgresEventStore
from memledger_schemas.subjects import HDR_DLQ_REASON, Subjects
from tests.integration.events_support import read_everything
from tests.integration.ingest_support import SPACE
from tests.integration.nats_support import stream_messages
from tests.integration.test_intake import Caller, Nats

DEEP = "{" + '"a": {' * 1_000 + "}" * 1_001
RETRIEVAL = (f'{{"retrieval_id": "{uuid4()}", "operation": "search", "parameters": {DEEP}, '
             '"basis": {"position": 1, "recorded_at": null, "valid_at": '
             '"2026-01-01T00:00:00Z"}, "policy_version": "p1"}').encode()

# Each: (command, body, the field path the refusal names)
ODD = [
    ("record_retrieval", RETRIEVAL, "parameters"),
    ("assert_memory", orjson.dumps({"space_id": SPACE, "kind": "fact", "content": "x",
                                    "valid_from": "9999-12-31T23:59:59-14:00"}), "valid_from"),
    ("assert_memory", orjson.dumps({"space_id": SPACE, "kind": "fact", "content": "x",
                                    "valid_to": "0001-01-01T00:00:00+14:00"}), "valid_to"),
    ("assert_memory", b'{"space_id": "main", "kind": "fact", "content": "a", "content": "b"}',
     "content"),
    ("record_embedding", orjson.dumps({
        "space_id": SPACE, "item_id": str(uuid4()), "item_version": 1, "model": "m",
        "dims": 2, "vector": [1e308, 1.0]}), "vector"),
]


@pytest.fixture
async def intake(nats_js: Nats, writer: GroupCommitWriter, subjects: Subjects
                 ) -> AsyncIterator[Intake]:
    nc, js = nats_js
    intake, stop = Intake(nc, js, writer, subjects, batch=16), asyncio.Event()
    task = asyncio.create_task(intake.run(stop))
    yield intake
    stop.set()
    await asyncio.wait_for(task, timeout=10)


async def test_odd_messages_are_dead_lettered_with_422_naming_the_field(
        intake: Intake, nats_js: Nats, subjects: Subjects,
        event_store: PostgresEventStore) -> None:
    _, js = nats_js
    caller = Caller(nats_js, subjects)
    await caller.command("create_space", orjson.dumps({"space_id": SPACE}))

    replies = [await caller.command(command, body) for command, body, _ in ODD]
    after = await caller.command("assert_memory", orjson.dumps(
        {"space_id": SPACE, "kind": "fact", "content": "sent after the odd ones"}))

    for reply, (_, _, path) in zip(replies, ODD, strict=True):
        error = reply["error"]
        assert (error["status"], error["code"]) == (422, "invalid_request"), error
        assert [f["path"] for f in error["fields"]] == [path]
    assert after["command"] == "assert_memory"
    letters = await stream_messages(js, subjects.dead_letter_stream, subjects.all_dead_letters)
    assert [(m.headers or {})[HDR_DLQ_REASON].split(":")[0] for m in letters] == [
        path for _, _, path in ODD]
    assert [e.event_type for e in read_everything(event_store)] == [
        "space.created", "memory.asserted"]
