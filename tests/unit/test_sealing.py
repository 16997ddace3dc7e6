"""What the writer seals and under whom: every free-text field about a subject's data under
that subject, an audited query under every subject whose data it touched (so erasing any one
of them erases it), and idempotency keys as a keyed digest, never as sent."""

from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

import orjson
import pytest

from memledger_ingest.core.results import request_hash
from memledger_ingest.core.writer import GroupCommitWriter
from memledger_platform.crypto import (
    DIGEST_PREFIX,
    ERASED,
    MemoryKeyring,
    combined,
    open_document,
    seal_payload,
    sealed_key_ids,
)
from memledger_platform.eventstore import IdempotencyRecord
from memledger_platform.eventstore.memory import InMemoryEventStore
from memledger_schemas import commands as c

SECRET = "ada-lovelace-7731"


@pytest.fixture
def keyring() -> MemoryKeyring:
    return MemoryKeyring()


@pytest.fixture
def store() -> InMemoryEventStore:
    return InMemoryEventStore()


@pytest.fixture
async def writer(store: InMemoryEventStore, keyring: MemoryKeyring
                 ) -> AsyncIterator[GroupCommitWriter]:
    started = GroupCommitWriter(store, keyring=keyring)
    started.start()
    try:
        yield started
    finally:
        started.stop()


def _documents(store: InMemoryEventStore, event_type: str) -> list[dict[str, Any]]:
    return [orjson.loads(e.document()) for e in store.read_all(0, 1_000)
            if e.event_type == event_type]


def test_a_combined_key_opens_only_while_every_subjects_key_exists() -> None:
    keyring = MemoryKeyring()
    ada, bob = (keyring.for_writing("acme", who, "main") for who in ("ada", "bob"))
    key = combined([bob, ada, bob])
    assert key.key_id == "+".join(sorted({ada.key_id, bob.key_id}))
    sealed = seal_payload({"query": SECRET}, "retrieval.performed", "e1", key)
    document = {"event_id": "e1", "event_type": "retrieval.performed", "payload": sealed}
    assert sealed_key_ids(orjson.dumps(document)) == {ada.key_id, bob.key_id}
    assert open_document(document, keyring.key)["payload"]["query"] == SECRET
    keyring.destroy("acme", "bob")
    assert open_document(document, keyring.key)["payload"]["query"] == ERASED
    assert combined([ada]) == ada


async def test_tags_reasons_and_session_titles_are_sealed_under_their_subject(
        writer: GroupCommitWriter, store: InMemoryEventStore, keyring: MemoryKeyring) -> None:
    await writer.submit("acme", [c.CreateSpace(space_id="main")])
    [session] = await writer.submit("acme", [c.StartSession(
        space_id="main", subject_id="u7", title=f"call with {SECRET}")])
    [made] = await writer.submit("acme", [c.AssertMemory(
        space_id="main", kind="fact", subject_id="u7", content="likes tea",
        tags=(f"tag-{SECRET}",))])
    item = UUID(made.ids["item_id"])
    await writer.submit("acme", [
        c.ReviseMemory(space_id="main", item_id=item, tags=("tea",), reason=f"{SECRET} said"),
        c.RetractMemory(space_id="main", item_id=item, reason=f"{SECRET} took it back"),
        c.EndSession(space_id="main", session_id=UUID(session.ids["session_id"]),
                     reason=f"{SECRET} left")])
    assert SECRET not in b"".join(e.data for e in store.read_all(0, 100)).decode()
    keyring.destroy("acme", "u7")
    opened = [open_document(d, keyring.key)["payload"] for d in (
        *_documents(store, "session.started"), *_documents(store, "memory.asserted"),
        *_documents(store, "memory.revised"), *_documents(store, "memory.retracted"),
        *_documents(store, "session.ended"))]
    assert [p.get("title") for p in opened[:1]] == [ERASED]
    assert [p["tags"] for p in opened[1:3]] == [[], []]
    assert [p["reason"] for p in opened[2:]] == [ERASED] * 3


def _retrieval(results: list[str], session: str | None = None, **fields: Any
               ) -> c.RecordRetrieval:
    return c.RecordRetrieval.model_validate({
        "retrieval_id": UUID(int=len(results) + 1 + (session is not None)),
        "operation": "search", "query": SECRET, "spaces": ["main"], "session_id": session,
        "basis": {"position": 1, "recorded_at": None, "valid_at": "2026-01-01T00:00:00Z"},
        "results": [{"ref": r, "score": 0.5, "section": "filtered"} for r in results],
        "policy_version": "rank-test", **fields})


async def _memories(writer: GroupCommitWriter, *subjects: str) -> list[str]:
    made = await writer.submit("acme", [c.AssertMemory(
        space_id="main", kind="fact", subject_id=s, content=f"about {s}") for s in subjects])
    return [m.ids["item_id"] for m in made]


async def test_an_audited_query_is_sealed_under_every_subject_it_showed_and_its_sessions(
        writer: GroupCommitWriter, store: InMemoryEventStore, keyring: MemoryKeyring) -> None:
    await writer.submit("acme", [c.CreateSpace(space_id="main")])
    ada, bob, cid = await _memories(writer, "ada", "bob", "cid")
    [session] = await writer.submit("acme", [c.StartSession(space_id="main",
                                                            subject_id="dan")])
    await writer.submit("acme", [
        _retrieval([ada, bob, "not-an-id"]),
        _retrieval([cid], session=session.ids["session_id"])])
    first, second = _documents(store, "retrieval.performed")
    assert (first["subject_id"], second["subject_id"]) == ("ada", "dan")
    assert set(first["key_id"].split("+")) == {keyring.for_writing("acme", s, "main").key_id
                                               for s in ("ada", "bob")}
    assert open_document(first, keyring.key)["payload"]["query"] == SECRET
    keyring.destroy("acme", "bob")  # one of those it showed
    keyring.destroy("acme", "dan")  # the other's session
    for document in (first, second):
        payload = open_document(document, keyring.key)["payload"]
        assert (payload["query"], payload["parameters"]) == (ERASED, {})


async def test_an_audited_query_that_touched_no_subject_is_sealed_under_its_space(
        writer: GroupCommitWriter, store: InMemoryEventStore) -> None:
    await writer.submit("acme", [c.CreateSpace(space_id="main")])
    await writer.submit("acme", [_retrieval([])])
    [document] = _documents(store, "retrieval.performed")
    assert document["subject_id"] == "space:main"
    assert SECRET not in orjson.dumps(document).decode()


async def test_an_idempotency_key_is_stored_as_a_keyed_digest_and_still_answers_retries(
        writer: GroupCommitWriter, store: InMemoryEventStore) -> None:
    await writer.submit("acme", [c.CreateSpace(space_id="main")])
    command = c.AssertMemory(space_id="main", kind="fact", content="x",
                             idempotency_key=f"signup-{SECRET}")
    [first] = await writer.submit("acme", [command])
    [again] = await writer.submit("acme", [command])
    [other] = await writer.submit("other", [c.CreateSpace(space_id="main",
                                                          idempotency_key=f"signup-{SECRET}")])
    assert (again.duplicate, again.event_ids) == (True, first.event_ids)
    assert not other.duplicate  # per tenant, as before
    [asserted] = _documents(store, "memory.asserted")
    assert asserted["idempotency_key"].startswith(DIGEST_PREFIX)
    assert SECRET not in b"".join(e.data for e in store.read_all(0, 100)).decode()
    assert SECRET not in repr(store.find_idempotent("acme", [asserted["idempotency_key"]]))


async def test_a_key_recorded_as_sent_before_digests_still_answers_its_retry(
        writer: GroupCommitWriter, store: InMemoryEventStore) -> None:
    command = c.CreateSpace(space_id="main", idempotency_key="legacy-1")
    [made] = await writer.submit("acme", [command.model_copy(update={"idempotency_key": None})])
    [event] = store.read_all(0, 1)
    store.append([], [IdempotencyRecord(
        "acme", "legacy-1", request_hash(command), event.stream_id, 1, 1,
        {"command": "create_space", "ids": made.ids, "event_ids": list(made.event_ids)})])
    [again] = await writer.submit("acme", [command])
    assert (again.duplicate, again.event_ids) == (True, made.event_ids)
