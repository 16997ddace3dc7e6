"""Hypothesis-generated NATS intake traffic on the real engines: malformed JSON, bodies of the
wrong shape or types, fields past their limits, unknown commands, tenant tokens that are not
tenant ids, subjects of the wrong form and commands the domain refuses, interleaved with valid
commands (some sent twice under one idempotency key). Every bad message is answered with an
error and dead-lettered with its reason, the consumer keeps going, and every valid command is
committed exactly once."""

import asyncio
import string
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from memledger_ingest.core.writer import GroupCommitWriter
from memledger_ingest.entrypoints.intake import Intake
from memledger_platform.eventstore.postgres import PostgresEventStore
from memledger_schemas.commands import BY_NAME
from memledger_schemas.subjects import HDR_DLQ_REASON, HDR_DLQ_SUBJECT, Subjects
from tests.integration.events_support import read_everything
from tests.integration.ingest_support import SPACE, TENANT
from tests.integration.nats_support import stream_messages
from tests.integration.test_intake import Caller, Nats
from tests.support import eventually

PROGRAMS, LENGTH = 6, 50
"""Six generated sequences of up to 50 messages each (the same ones every run)."""


@dataclass(frozen=True)
class Message:
    tenant: str
    """The subject's tenant token (with any extra tokens after the command)."""
    command: str
    body: bytes
    reason: str = ""
    """Words the dead letter's reason must contain; empty for a valid command."""
    dlq_tenant: str = TENANT
    twice: bool = False


def _valid(body: dict[str, Any], twice: bool = False) -> Message:
    return Message(TENANT, "assert_memory", orjson.dumps(body), twice=twice)


def _poison(body: bytes, reason: str, *, tenant: str = TENANT, command: str = "assert_memory",
            dlq_tenant: str = TENANT) -> Message:
    return Message(tenant, command, body, reason, dlq_tenant)


def _memory(**fields: Any) -> dict[str, Any]:
    return {"space_id": SPACE, "kind": "fact", "content": "placeholder", **fields}


_json = st.recursive(st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
                     | st.floats(allow_nan=False, allow_infinity=False)
                     | st.text(max_size=20),
                     lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=10)
_not_text = _json.filter(lambda v: not isinstance(v, str))
_token = st.text(string.ascii_lowercase + "_", min_size=1, max_size=24)
_bad_tenant = st.text(string.ascii_letters + "!@#%&+=~:,()", min_size=1, max_size=80).filter(
    lambda t: not (len(t) <= 64 and all(ch.isalnum() or ch in "_-" for ch in t)))

MESSAGES = st.one_of(
    st.builds(lambda key: _valid(_memory(idempotency_key=key), twice=True),
              st.text(string.ascii_letters, min_size=8, max_size=16)),
    st.just(None).map(lambda _: _valid(_memory())),
    st.binary(max_size=300).map(lambda b: _poison(b"\xff" + b, "body: not valid JSON")),
    _json.filter(lambda v: not isinstance(v, dict)).map(
        lambda v: _poison(orjson.dumps(v), "body: must be a JSON object")),
    _not_text.map(lambda v: _poison(orjson.dumps(_memory(content=v)), "content: ")),
    st.sampled_from(["gossip", "", "FACT"]).map(
        lambda k: _poison(orjson.dumps(_memory(kind=k)), "kind: ")),
    st.tuples(_json, _json).map(lambda v: _poison(orjson.dumps(_memory(
        importance=v[0] if not isinstance(v[0], int | float) else 7, surprise=v[1])),
        "surprise: ")),
    st.integers(65_537, 400_000).map(
        lambda n: _poison(orjson.dumps(_memory(content="x" * n)), "content: ")),
    _token.filter(lambda t: t not in BY_NAME).map(
        lambda t: _poison(b"{}", f"unknown command {t!r}", command=t)),
    _bad_tenant.map(lambda t: _poison(orjson.dumps(_memory()), "subject.tenant: ", tenant=t,
                                      dlq_tenant="_invalid")),
    _token.map(lambda t: _poison(orjson.dumps(_memory()), "subject: expected",
                                 command=f"assert_memory.{t}", dlq_tenant="_invalid")),
    st.just(_poison(orjson.dumps(_memory(command="create_space")), "command: body says")),
    st.just(_poison(orjson.dumps(_memory(space_id="nowhere")), "space 'nowhere' not found")),
)


def _programs() -> list[list[Message]]:
    drawn: list[list[Message]] = []

    @settings(max_examples=PROGRAMS, derandomize=True, database=None, deadline=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(st.lists(MESSAGES, min_size=LENGTH // 2, max_size=LENGTH))
    def collect(program: list[Message]) -> None:
        drawn.append(program)

    collect()
    return drawn


def _numbered(programs: list[list[Message]]) -> list[Message]:
    """One sequence; each valid command gets content (and key) of its own."""
    return [_own(message, n) if not message.reason else message
            for n, message in enumerate(m for program in programs for m in program)]


def _own(message: Message, n: int) -> Message:
    body = orjson.loads(message.body)
    body["content"] = f"valid command {n}"
    if "idempotency_key" in body:
        body["idempotency_key"] = f"{body['idempotency_key']}-{n}"
    return replace(message, body=orjson.dumps(body))


@pytest.fixture
async def intake(nats_js: Nats, writer: GroupCommitWriter, subjects: Subjects
                 ) -> AsyncIterator[Intake]:
    """An intake consuming as a task, as ingest runs it."""
    nc, js = nats_js
    intake, stop = Intake(nc, js, writer, subjects, batch=16), asyncio.Event()
    task = asyncio.create_task(intake.run(stop))
    yield intake
    stop.set()
    await asyncio.wait_for(task, timeout=10)


@pytest.fixture
def caller(nats_js: Nats, subjects: Subjects) -> Caller:
    return Caller(nats_js, subjects)


async def test_generated_intake_traffic_dead_letters_each_bad_message_and_commits_good_ones_once(
        intake: Intake, caller: Caller, subjects: Subjects, nats_js: Nats,
        event_store: PostgresEventStore) -> None:
    _, js = nats_js
    await caller.command("create_space", orjson.dumps({"space_id": SPACE}))
    messages = _numbered(_programs())
    bad = [m for m in messages if m.reason]
    good = [m for m in messages if not m.reason]

    replies = []
    for message in messages:
        for _ in range(2 if message.twice else 1):
            replies.append((message, await caller.command(message.command, message.body,
                                                          tenant=message.tenant)))

    for message, reply in replies:
        if message.reason:
            assert message.reason in reply["error"]["message"], (message, reply)
        else:
            assert "error" not in reply, (message, reply)
    letters = await stream_messages(js, subjects.dead_letter_stream, subjects.all_dead_letters)
    assert len(letters) == len(bad) == intake.dead_letters
    for letter, message in zip(letters, bad, strict=True):
        headers = letter.headers or {}
        assert message.reason in headers[HDR_DLQ_REASON]
        assert headers[HDR_DLQ_SUBJECT] == subjects.intake(message.tenant, message.command)
        assert letter.subject == subjects.dead_letter("intake", message.dlq_tenant)
        assert letter.data == message.body
    committed = Counter(e.fields()["payload"]["content"] for e in read_everything(event_store)
                        if e.event_type == "memory.asserted")
    assert committed == Counter(orjson.loads(m.body)["content"] for m in good)
    assert len(bad) > 3 * PROGRAMS
    assert len(good) > PROGRAMS
    await eventually(lambda: _nothing_left(js, subjects))


async def _nothing_left(js: Any, subjects: Subjects) -> None:
    info = await js.consumer_info(subjects.intake_stream, subjects.intake_consumer)
    assert (info.num_pending, info.num_ack_pending) == (0, 0)
