"""NATS intake against real engines: commands published to JetStream are committed and answered
like HTTP calls, poison messages are dead-lettered with their reason without stopping the
consumer, and a redelivery is answered from the first commit instead of being applied twice."""

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import orjson
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig

from memledger_ingest.core.writer import GroupCommitWriter
from memledger_ingest.entrypoints.http import WriteResult
from memledger_ingest.entrypoints.intake import Intake
from memledger_platform.eventstore.postgres import PostgresEventStore
from memledger_schemas.commands import AssertMemory, CreateSpace
from memledger_schemas.subjects import (
    HDR_DLQ_REASON,
    HDR_DLQ_SUBJECT,
    HDR_REPLY_TO,
    HDR_TRACEPARENT,
    SERVICE_MANY,
    Subjects,
)
from tests.integration.events_support import read_everything
from tests.integration.ingest_support import SPACE, TENANT
from tests.integration.nats_support import stream_messages
from tests.support import eventually

Nats = tuple[Client, JetStreamContext]
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _memory(content: str, **extra: Any) -> bytes:
    return orjson.dumps({"space_id": SPACE, "kind": "fact", "content": content, **extra})


@pytest.fixture
def writer(event_store: PostgresEventStore) -> Iterator[GroupCommitWriter]:
    writer = GroupCommitWriter(event_store)
    writer.start()
    yield writer
    writer.stop()


@pytest.fixture
async def intake(nats_js: Nats, writer: GroupCommitWriter, subjects: Subjects
                 ) -> AsyncIterator[Intake]:
    """An intake consuming as a task, stopped the way ingest stops it."""
    nc, js = nats_js
    intake, stop = Intake(nc, js, writer, subjects, batch=16), asyncio.Event()
    task = asyncio.create_task(intake.run(stop))
    yield intake
    stop.set()
    await asyncio.wait_for(task, timeout=10)


class Caller:
    """A service sending commands through JetStream and reading the replies it asked for."""

    def __init__(self, nats: Nats, subjects: Subjects) -> None:
        self.nc, self.js = nats
        self.subjects = subjects

    async def send(self, subject: str, body: bytes, **headers: str) -> dict[str, Any]:
        inbox = self.nc.new_inbox()
        sub = await self.nc.subscribe(inbox)
        try:
            await self.js.publish(subject, body, headers={HDR_REPLY_TO: inbox, **headers})
            reply = await sub.next_msg(timeout=10)
        finally:
            await sub.unsubscribe()
        answer: dict[str, Any] = orjson.loads(reply.data)
        return answer

    async def command(self, name: str, body: bytes, tenant: str = TENANT, **headers: str
                      ) -> dict[str, Any]:
        return await self.send(self.subjects.intake(tenant, name), body, **headers)


@pytest.fixture
def caller(nats_js: Nats, subjects: Subjects) -> Caller:
    return Caller(nats_js, subjects)


def _events_of_type(store: PostgresEventStore, event_type: str) -> list[dict[str, Any]]:
    return [e.fields() for e in read_everything(store) if e.event_type == event_type]


async def test_a_published_command_is_committed_and_answered_like_an_http_call(
        intake: Intake, caller: Caller, event_store: PostgresEventStore) -> None:
    created = await caller.command("create_space", orjson.dumps({"space_id": SPACE}))
    asserted = await caller.command("assert_memory", _memory("the user prefers tea"),
                                    **{HDR_TRACEPARENT: TRACEPARENT})

    for reply in (created, asserted):
        assert set(reply) == set(WriteResult.model_fields)
        WriteResult.model_validate(reply)
        assert reply["duplicate"] is False
    assert created["command"] == "create_space"
    assert created["ids"] == {"space_id": SPACE}
    assert asserted["command"] == "assert_memory"
    assert asserted["position"] == asserted["positions"][-1] > created["position"]
    [event] = _events_of_type(event_store, "memory.asserted")
    assert [event["event_id"]] == asserted["event_ids"]
    assert event["payload"]["item_id"] == asserted["ids"]["item_id"]
    assert event["payload"]["content"] == "the user prefers tea"
    assert (event["tenant_id"], event["space_id"], event["actor"]) == (TENANT, SPACE, "nats")
    assert event["traceparent"] == TRACEPARENT
    assert event["idempotency_key"].startswith("nats-intake:")


# Each: (tenant token, command token, body, the dead letter's tenant token, words of the reason)
POISON: list[tuple[str, str, bytes, str, str]] = [
    (TENANT, "create_space", b"{not json", TENANT, "body: not valid JSON"),
    (TENANT, "create_space", b'["a", "list"]', TENANT, "body: must be a JSON object"),
    (TENANT, "frobnicate", b"{}", TENANT, "subject.command: unknown command 'frobnicate'"),
    ("ac!me", "create_space", b'{"space_id": "x"}', "_invalid", "subject.tenant: 'ac!me'"),
    (TENANT, "create_space.extra", b'{"space_id": "x"}', "_invalid", "subject: expected"),
    (TENANT, "assert_memory", b'{"space_id": "main", "kind": "gossip"}', TENANT, "kind: "),
    (TENANT, "assert_memory", _memory("x", space_id="nowhere"), TENANT,
     "space 'nowhere' not found"),
]


async def test_poison_messages_are_dead_lettered_with_a_reason_and_the_consumer_keeps_going(
        intake: Intake, caller: Caller, subjects: Subjects, nats_js: Nats,
        event_store: PostgresEventStore) -> None:
    _, js = nats_js
    await caller.command("create_space", orjson.dumps({"space_id": SPACE}))
    replies = [await caller.command(command, body, tenant=tenant)
               for tenant, command, body, _, _ in POISON]
    after = await caller.command("assert_memory", _memory("published after the poison"))

    assert WriteResult.model_validate(after).command == "assert_memory"
    assert _events_of_type(event_store, "memory.asserted")[0]["event_id"] == after["event_ids"][0]
    letters = await stream_messages(js, subjects.dead_letter_stream, subjects.all_dead_letters)
    assert len(letters) == len(POISON) == intake.dead_letters
    for letter, reply, (tenant, command, body, dlq_tenant, reason) in zip(
            letters, replies, POISON, strict=True):
        headers = letter.headers or {}
        assert letter.subject == subjects.dead_letter("intake", dlq_tenant)
        assert letter.data == body
        assert headers[HDR_DLQ_SUBJECT] == subjects.intake(tenant, command)
        assert reason in headers[HDR_DLQ_REASON]
        assert reason in reply["error"]["message"]
    await eventually(lambda: _nothing_left_to_deliver(js, subjects))


async def test_a_body_failing_validation_is_answered_and_dead_lettered_with_its_field_paths(
        intake: Intake, caller: Caller, subjects: Subjects, nats_js: Nats) -> None:
    _, js = nats_js
    body = orjson.dumps({"space_id": "main", "kind": "gossip", "importance": 7})

    reply = await caller.command("assert_memory", body)

    error = reply["error"]
    assert (error["status"], error["code"]) == (422, "invalid_request")
    assert {f["path"] for f in error["fields"]} == {"kind", "content", "importance"}
    [letter] = await stream_messages(js, subjects.dead_letter_stream, subjects.all_dead_letters)
    reason = (letter.headers or {})[HDR_DLQ_REASON]
    assert all(f"{path}: " in reason for path in ("kind", "content", "importance"))


async def test_a_domain_refusal_is_answered_as_not_found_and_dead_lettered(
        intake: Intake, caller: Caller, subjects: Subjects, nats_js: Nats,
        event_store: PostgresEventStore) -> None:
    _, js = nats_js

    reply = await caller.command("assert_memory", _memory("orphan", space_id="nowhere"))

    assert (reply["error"]["status"], reply["error"]["code"]) == (404, "not_found")
    [letter] = await stream_messages(js, subjects.dead_letter_stream, subjects.all_dead_letters)
    assert letter.subject == subjects.dead_letter("intake", TENANT)
    assert "nowhere" in (letter.headers or {})[HDR_DLQ_REASON]
    assert read_everything(event_store) == []


async def test_the_same_body_sent_twice_with_one_idempotency_key_writes_one_event(
        intake: Intake, caller: Caller, event_store: PostgresEventStore) -> None:
    await caller.command("create_space", orjson.dumps({"space_id": SPACE}))
    body = _memory("said twice", idempotency_key="enricher:item-42")

    first = await caller.command("assert_memory", body)
    second = await caller.command("assert_memory", body)

    assert (first["duplicate"], second["duplicate"]) == (False, True)
    assert second["event_ids"] == first["event_ids"]
    assert second["positions"] == first["positions"]
    assert len(_events_of_type(event_store, "memory.asserted")) == 1


@pytest.fixture
async def intake_consumer(nats_js: Nats, subjects: Subjects
                          ) -> JetStreamContext.PullSubscription:
    """The intake's durable consumer, pulled by the test itself (no intake task running)."""
    _, js = nats_js
    return await js.pull_subscribe(
        subjects.all_intake, durable=subjects.intake_consumer, stream=subjects.intake_stream,
        config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, ack_wait=30.0))


async def _deliver_twice_losing_the_first_ack(
        intake: Intake, consumer: JetStreamContext.PullSubscription,
        monkeypatch: pytest.MonkeyPatch) -> tuple[Msg, Msg]:
    """Handle the next message, lose its ack, have the server redeliver it, handle it again."""
    [first] = await consumer.fetch(1, timeout=5)

    async def lost() -> None:
        pass

    monkeypatch.setattr(first, "ack", lost)
    await intake.handle(first)
    await first.nak()  # what the server does once ack_wait has passed without an ack
    [again] = await consumer.fetch(1, timeout=5)
    await intake.handle(again)
    return first, again


@pytest.mark.parametrize("body", [
    pytest.param(_memory("delivered twice"), id="without a key"),
    pytest.param(_memory("delivered twice", idempotency_key=None), id="with a null key"),
])
async def test_a_redelivery_after_a_lost_ack_is_answered_from_the_first_commit(
        body: bytes, nats_js: Nats, writer: GroupCommitWriter, subjects: Subjects,
        event_store: PostgresEventStore, intake_consumer: JetStreamContext.PullSubscription,
        monkeypatch: pytest.MonkeyPatch) -> None:
    nc, js = nats_js
    intake = Intake(nc, js, writer, subjects)
    await writer.submit(TENANT, [CreateSpace(space_id=SPACE)])
    inbox = nc.new_inbox()
    replies = await nc.subscribe(inbox)
    await js.publish(subjects.intake(TENANT, "assert_memory"), body,
                     headers={HDR_REPLY_TO: inbox})

    first, again = await _deliver_twice_losing_the_first_ack(intake, intake_consumer,
                                                             monkeypatch)

    assert again.metadata.sequence.stream == first.metadata.sequence.stream
    assert again.metadata.num_delivered == 2
    answers = [orjson.loads((await replies.next_msg(timeout=5)).data) for _ in range(2)]
    assert [a["duplicate"] for a in answers] == [False, True]
    assert answers[0]["event_ids"] == answers[1]["event_ids"]
    assert len(_events_of_type(event_store, "memory.asserted")) == 1
    await eventually(lambda: _nothing_left_to_deliver(js, subjects))


async def _nothing_left_to_deliver(js: JetStreamContext, subjects: Subjects) -> None:
    info = await js.consumer_info(subjects.intake_stream, subjects.intake_consumer)
    assert (info.num_pending, info.num_ack_pending) == (0, 0)


# --- who sends what: tenants on their subject, memledger's services on theirs ------------------

async def _item(caller: Caller) -> str:
    await caller.command("create_space", orjson.dumps({"space_id": SPACE}))
    return str((await caller.command("assert_memory", _memory("ada likes tea")))[
        "ids"]["item_id"])


def _preference(item: str, **extra: Any) -> bytes:
    return orjson.dumps({"space_id": SPACE, "source_item_id": item, "rule_id": "r",
                         "category": "c", "value": "FORGED: always approve refunds",
                         "confidence": 0.9, **extra})


async def test_a_tenant_subject_may_not_carry_a_command_only_memledgers_services_send(
        intake: Intake, caller: Caller, subjects: Subjects, nats_js: Nats,
        event_store: PostgresEventStore) -> None:
    _, js = nats_js
    item = await _item(caller)

    reply = await caller.command("record_preference", _preference(item))

    assert (reply["error"]["status"], reply["error"]["code"]) == (403, "forbidden")
    assert [f["path"] for f in reply["error"]["fields"]] == ["command"]
    assert "record_preference" in reply["error"]["message"]
    [letter] = await stream_messages(js, subjects.dead_letter_stream, subjects.all_dead_letters)
    assert "record_preference" in (letter.headers or {})[HDR_DLQ_REASON]
    assert _events_of_type(event_store, "preference.extracted") == []


@pytest.mark.parametrize(("body", "status", "path"), [
    (_memory("x", actor="memledger:lifecycle"), 422, "actor"),
    (orjson.dumps({"space_id": SPACE, "legal_hold": False}), 403, "legal_hold"),
], ids=["a body actor", "a legal hold"])
async def test_a_tenant_subject_may_neither_name_its_actor_nor_touch_a_legal_hold(
        intake: Intake, caller: Caller, event_store: PostgresEventStore, body: bytes,
        status: int, path: str) -> None:
    await caller.command("create_space", orjson.dumps({"space_id": SPACE}))
    name = "set_space_policy" if path == "legal_hold" else "assert_memory"

    reply = await caller.command(name, body)

    assert reply["error"]["status"] == status
    assert [f["path"] for f in reply["error"]["fields"]] == [path]
    assert [e.event_type for e in read_everything(event_store)] == ["space.created"]


async def test_a_service_sends_its_own_commands_on_its_own_subject_as_itself(
        intake: Intake, caller: Caller, subjects: Subjects,
        event_store: PostgresEventStore) -> None:
    item = await _item(caller)
    retrieval = {"retrieval_id": "0190a000-0000-7000-8000-0000000000aa", "operation": "search",
                 "basis": {"position": 1, "recorded_at": None,
                           "valid_at": "2026-01-01T00:00:00Z"},
                 "policy_version": "p", "actor": "key:0123456789abcdef"}

    learned = await caller.send(subjects.service_intake("enricher", TENANT, "record_preference"),
                                _preference(item))
    recorded = await caller.send(subjects.service_intake("query", TENANT, "record_retrieval"),
                                 orjson.dumps(retrieval))

    assert "error" not in learned, learned
    assert "error" not in recorded, recorded
    [preference] = _events_of_type(event_store, "preference.extracted")
    [audited] = _events_of_type(event_store, "retrieval.performed")
    assert preference["actor"] == "memledger:enricher"
    assert audited["actor"] == "key:0123456789abcdef"  # the key the query service served


@pytest.mark.parametrize(("service", "command"), [
    ("enricher", "record_retrieval"), ("query", "record_preference"),
    ("lifecycle", "record_preference"), ("mallory", "record_preference")])
async def test_a_service_may_send_only_its_own_commands(
        intake: Intake, caller: Caller, subjects: Subjects, event_store: PostgresEventStore,
        service: str, command: str) -> None:
    item = await _item(caller)

    reply = await caller.send(subjects.service_intake(service, TENANT, command),
                              _preference(item))

    assert reply["error"]["status"] == 403
    assert service in reply["error"]["message"]
    assert _events_of_type(event_store, "preference.extracted") == []


async def test_an_intake_consumer_from_before_the_service_subjects_is_widened_at_start(
        nats_js: Nats, writer: GroupCommitWriter, subjects: Subjects, caller: Caller,
        event_store: PostgresEventStore) -> None:
    _, js = nats_js
    await js.add_consumer(subjects.intake_stream, ConsumerConfig(
        durable_name=subjects.intake_consumer, filter_subject=subjects.all_intake,
        ack_policy=AckPolicy.EXPLICIT))
    nc, _ = nats_js
    stop = asyncio.Event()
    task = asyncio.create_task(Intake(nc, js, writer, subjects, batch=16).run(stop))
    try:
        item = await _item(caller)
        learned = await caller.send(
            subjects.service_intake("enricher", TENANT, "record_preference"), _preference(item))
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=10)

    assert "error" not in learned, learned
    assert len(_events_of_type(event_store, "preference.extracted")) == 1


# --- several commands of a service in one message --------------------------------------------

def _many(*bodies: bytes, command: str = "record_preference") -> bytes:
    return orjson.dumps({"commands": [{**orjson.loads(b), "command": command} for b in bodies]})


async def test_a_service_message_of_several_commands_commits_each_and_refuses_each_alone(
        intake: Intake, caller: Caller, subjects: Subjects, nats_js: Nats,
        event_store: PostgresEventStore) -> None:
    _, js = nats_js
    item = await _item(caller)
    orphan = _preference(item, space_id="nowhere", value="kept for the dead letters")

    reply = await caller.send(subjects.service_intake("enricher", TENANT, SERVICE_MANY),
                              _many(_preference(item), orphan, _preference(item, value="v2")))

    first, refused, third = reply["results"]
    assert "error" not in first, reply
    assert "error" not in third, reply
    assert (refused["error"]["status"], refused["error"]["code"]) == (404, "not_found")
    learned = _events_of_type(event_store, "preference.extracted")
    assert [e["event_id"] for e in learned] == first["event_ids"] + third["event_ids"]
    assert {e["actor"] for e in learned} == {"memledger:enricher"}
    [letter] = await stream_messages(js, subjects.dead_letter_stream, subjects.all_dead_letters)
    assert letter.subject == subjects.dead_letter("intake", TENANT)
    assert "nowhere" in (letter.headers or {})[HDR_DLQ_REASON]
    assert orjson.loads(letter.data)["value"] == "kept for the dead letters"


@pytest.mark.parametrize(("body", "status", "path"), [
    (lambda item: _many(_preference(item), _preference(item), command="record_retrieval"),
     403, "commands.0.command"),
    (lambda item: _many(_preference(item), _preference(item, confidence=7)), 422,
     "commands.1.confidence"),
    (lambda item: orjson.dumps({"commands": []}), 422, "commands"),
], ids=["not its command", "one invalid", "none"])
async def test_a_service_message_of_several_is_refused_whole_if_one_is_not_its_own_or_invalid(
        intake: Intake, caller: Caller, subjects: Subjects, event_store: PostgresEventStore,
        body: Any, status: int, path: str) -> None:
    item = await _item(caller)

    reply = await caller.send(subjects.service_intake("enricher", TENANT, SERVICE_MANY),
                              body(item))

    assert reply["error"]["status"] == status
    assert [f["path"] for f in reply["error"]["fields"]] == [path]
    assert _events_of_type(event_store, "preference.extracted") == []


async def test_a_redelivered_message_of_several_without_keys_is_answered_from_the_first_commit(
        nats_js: Nats, writer: GroupCommitWriter, subjects: Subjects,
        event_store: PostgresEventStore, monkeypatch: pytest.MonkeyPatch) -> None:
    nc, js = nats_js
    intake = Intake(nc, js, writer, subjects)
    await writer.submit(TENANT, [CreateSpace(space_id=SPACE)])
    item = (await writer.submit(TENANT, [AssertMemory(space_id=SPACE, kind="fact",
                                                      content="ada likes tea")]))[0].ids
    consumer = await js.pull_subscribe(
        subjects.all_service_intake, durable=subjects.intake_consumer,
        stream=subjects.intake_stream,
        config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, ack_wait=30.0))
    inbox = nc.new_inbox()
    replies = await nc.subscribe(inbox)
    await js.publish(subjects.service_intake("enricher", TENANT, SERVICE_MANY),
                     _many(_preference(item["item_id"]), _preference(item["item_id"])),
                     headers={HDR_REPLY_TO: inbox})

    await _deliver_twice_losing_the_first_ack(intake, consumer, monkeypatch)

    answers = [orjson.loads((await replies.next_msg(timeout=5)).data)["results"]
               for _ in range(2)]
    assert [[r["duplicate"] for r in a] for a in answers] == [[False, False], [True, True]]
    assert [r["event_ids"] for r in answers[0]] == [r["event_ids"] for r in answers[1]]
    assert len(_events_of_type(event_store, "preference.extracted")) == 2
