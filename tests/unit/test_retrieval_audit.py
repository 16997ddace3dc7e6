"""The retrieval audit without engines: what an audited call records, how its request is
pinned to its basis and read back for a replay, how a replay is compared, and the recorders."""

from datetime import UTC, datetime
from typing import Any

import pytest

from memledger_platform.auth import Principal
from memledger_query.core.context import Entry
from memledger_query.core.recorder import (
    IntakeRecorder,
    MemoryRecorder,
    NoRecorder,
    RecordingFailed,
)
from memledger_query.core.retrievals import (
    compare,
    context_request,
    pinned,
    record_context,
    record_search,
    search_request,
    shown_by_search,
)
from memledger_query.core.steering import FLAG, rules_then_candidates
from memledger_query.entrypoints.http import Problem
from memledger_query.entrypoints.retrieval_http import _may_read
from memledger_schemas.api.reads import Basis, Item
from memledger_schemas.api.retrievals import RetrievalRecord, Shown
from memledger_schemas.api.semantic import (
    ContextAnswer,
    ContextEntry,
    ContextRequest,
    ContextSection,
    SearchAnswer,
    SearchHit,
    SearchRequest,
)
from memledger_schemas.commands import CommandBase

AT = Basis(position=42, recorded_at=None, valid_at=datetime(2026, 3, 1, tzinfo=UTC))
ITEM_A, ITEM_B = "00000000-0000-0000-0000-00000000000a", "00000000-0000-0000-0000-00000000000b"


def hit(item_id: str, score: float, layer: str = "filtered") -> SearchHit:
    return SearchHit(item_id=item_id, space_id="notes", kind="fact", content="c", tags=[],
                     importance=0.5, confidence=1.0, session_id=None, agent_id=None,
                     valid_from=0.0, valid_to=None, layer=layer, score=score, relevance=score)


def search_answer(*hits: SearchHit) -> SearchAnswer:
    return SearchAnswer(basis=AT, mode="planning", threshold=0.25, model="m",
                        results=list(hits), collapsed={})


def record_of(command: Any, position: int = 50) -> RetrievalRecord:
    """The record the read side would show for a recorded command."""
    return RetrievalRecord.model_validate({
        **command.model_dump(mode="json", include={
            "operation", "query", "subject", "spaces", "parameters", "basis",
            "policy_version"}),
        "retrieval_id": str(command.retrieval_id), "position": position,
        "recorded_at": datetime(2026, 3, 1, tzinfo=UTC), "actor": command.actor,
        "results": [r.model_dump() for r in command.results]})


def test_an_audited_request_is_pinned_to_its_basis_position_and_valid_time() -> None:
    body = SearchRequest(query="tea?", min_position=40,
                         recorded_at=datetime(2026, 2, 1, tzinfo=UTC))
    fixed = pinned(body, AT)
    assert (fixed.as_of_position, fixed.valid_at) == (42, AT.valid_at)
    assert (fixed.recorded_at, fixed.min_position) == (None, None)


async def test_a_search_records_its_request_basis_and_results_and_answers_with_the_id() -> None:
    recorder = MemoryRecorder()
    body = pinned(SearchRequest(query="tea?", subject="Ada", spaces=["notes"], k=3,
                                audit=True), AT)
    answer = await record_search(recorder, "acme", "key:k1", body, ["notes", "side"],
                                 search_answer(hit(ITEM_A, 0.9), hit(ITEM_B, 0.5)), "rank-1")
    [(tenant, command)] = recorder.recorded
    assert (tenant, command.actor, command.operation) == ("acme", "key:k1", "search")
    assert (command.query, command.subject, command.spaces) == ("tea?", "Ada", ("notes",))
    assert command.parameters["granted"] == ["notes", "side"]
    assert {"query", "subject", "audit"}.isdisjoint(command.parameters)
    assert command.basis.position == 42
    assert [(r.ref, r.score) for r in command.results] == [(ITEM_A, 0.9), (ITEM_B, 0.5)]
    assert command.idempotency_key == f"retrieval:{command.retrieval_id}"
    assert (answer.retrieval_id, answer.retrieval_position) == (str(command.retrieval_id), 1)


async def test_a_recorded_search_reads_back_as_the_same_pinned_request() -> None:
    recorder = MemoryRecorder()
    body = pinned(SearchRequest(query="tea?", subject="Ada", spaces=["notes"], k=3,
                                weights={"dense": 1.0, "keyword": 0.0}, audit=True), AT)
    await record_search(recorder, "acme", "key:k1", body, ["notes"], search_answer(), "r")
    again, granted = search_request(record_of(recorder.commands[0]))
    assert again == body.model_copy(update={"audit": False})
    assert granted == ["notes"]


async def test_a_context_bundle_records_every_entry_of_every_section_in_order() -> None:
    recorder = MemoryRecorder()
    body = pinned(ContextRequest(space_id="notes", audit=True), AT)
    bundle = ContextAnswer(
        basis=AT, budget_tokens=100, used_tokens=10, tokenizer="chars/4", query="tea?",
        rendered="", sections=[
            ContextSection(name="session", allowance=50, used_tokens=5, entries=[
                ContextEntry(text="user: tea?", ref=ITEM_B, tokens=3)]),
            ContextSection(name="memories", allowance=50, used_tokens=5, entries=[
                ContextEntry(text="- [fact] c", ref=ITEM_A, tokens=3, score=0.7)])])
    await record_context(recorder, "acme", "grpc", body, bundle, "r")
    command = recorder.commands[0]
    assert [(r.ref, r.score, r.section) for r in command.results] == [
        (ITEM_B, None, "session"), (ITEM_A, 0.7, "memories")]
    assert context_request(record_of(command)) == body.model_copy(
        update={"audit": False, "query": "tea?"})


async def test_a_call_that_cannot_be_recorded_is_refused_with_503() -> None:
    body = SearchRequest(query="tea?", audit=True)
    with pytest.raises(Problem) as refused:
        await record_search(NoRecorder(), "acme", "a", body, [], search_answer(), "r")
    assert (refused.value.status, refused.value.code) == (503, "audit_failed")


def test_a_retrieval_recorded_without_its_request_cannot_be_replayed() -> None:
    record = RetrievalRecord(
        retrieval_id=ITEM_A, position=3, recorded_at=AT.valid_at, actor="api",
        operation="search", query="tea?", subject=None, spaces=[], parameters={}, basis=AT,
        results=[], policy_version="v1")
    with pytest.raises(Problem) as refused:
        search_request(record)
    assert refused.value.status == 409


# --- comparing a replay ---------------------------------------------------------------------

A, B, C = (Shown(ref=r, score=s, section="filtered") for r, s in (("a", 0.9), ("b", 0.5),
                                                                   ("c", 0.4)))


def test_the_same_list_is_the_same() -> None:
    assert compare([A, B], [A, B]) == (True, True, [])


def test_a_drifted_score_keeps_the_items_but_is_a_difference() -> None:
    drifted = B.model_copy(update={"score": 0.51})
    same, same_items, differences = compare([A, B], [A, drifted])
    assert (same, same_items) == (False, True)
    assert [(d.rank, d.recorded, d.replayed) for d in differences] == [(1, B, drifted)]


def test_another_order_or_another_length_is_not_the_same_items() -> None:
    assert compare([A, B], [B, A])[:2] == (False, False)
    same, same_items, differences = compare([A, B], [A, B, C])
    assert (same, same_items) == (False, False)
    assert [(d.rank, d.recorded, d.replayed) for d in differences] == [(2, None, C)]


def test_a_search_answer_is_shown_as_its_hits_in_order() -> None:
    shown = shown_by_search(search_answer(hit(ITEM_A, 0.9, "session"), hit(ITEM_B, 0.5)))
    assert [(s.ref, s.section) for s in shown] == [(ITEM_A, "session"), (ITEM_B, "filtered")]


# --- recorders ------------------------------------------------------------------------------

class FakeSender:
    def __init__(self, reply: dict[str, Any] | None = None) -> None:
        self.reply = reply
        self.sent: list[tuple[str, list[CommandBase]]] = []

    async def send(self, tenant: str, commands: list[CommandBase]) -> list[dict[str, Any]]:
        self.sent.append((tenant, commands))
        if self.reply is None:
            raise TimeoutError
        return [self.reply]


async def _a_command() -> Any:
    recorder = MemoryRecorder()
    await record_search(recorder, "acme", "a", SearchRequest(query="q"), [], search_answer(),
                        "r")
    return recorder.commands[0]


async def test_the_intake_recorder_sends_the_command_and_returns_its_position() -> None:
    command, sender = await _a_command(), FakeSender({"position": 77, "ids": {}})
    recorded = await IntakeRecorder(sender).record("acme", command)
    assert (recorded.retrieval_id, recorded.position) == (str(command.retrieval_id), 77)
    assert sender.sent == [("acme", [command])]


@pytest.mark.parametrize("sender", [None, FakeSender(None),
                                    FakeSender({"error": {"message": "refused"}})],
                         ids=["not connected", "no answer", "refused"])
async def test_the_intake_recorder_fails_plainly(sender: FakeSender | None) -> None:
    with pytest.raises(RecordingFailed):
        await IntakeRecorder(sender).record("acme", await _a_command())


# --- steering-rule candidates ---------------------------------------------------------------

def item(item_id: str, kind: str, confidence: float) -> Item:
    return Item(item_id=item_id, space_id="notes", kind=kind, status="active",
                content=f"{kind} {item_id}", triple=None, confidence=confidence,
                importance=0.5, tags=[], sources=[], valid_from=AT.valid_at, valid_to=None,
                known_since_position=1, session_id=None, agent_id=None)


def test_candidates_come_after_the_steering_rules_and_before_the_preferences() -> None:
    candidate = Entry("- [steering_rule candidate] x", "c", 1.0, FLAG)
    entries = rules_then_candidates(
        [item("p", "preference", 0.9), item("r1", "steering_rule", 0.5),
         item("r2", "steering_rule", 0.8)], [candidate])
    assert [e.ref for e in entries] == ["r2", "r1", "c", "p"]
    assert [e.flag for e in entries] == [None, None, FLAG, None]


# --- who may read a retrieval ---------------------------------------------------------------

@pytest.mark.parametrize(("spaces", "grants", "visible"), [
    (["notes"], None, True),
    ([], None, True),
    (["notes"], {"notes", "side"}, True),
    (["notes", "side"], {"notes"}, False),
    ([], {"notes"}, False),
], ids=["whole-tenant key", "whole-tenant call, whole-tenant key", "granted",
        "one space not granted", "whole-tenant call, limited key"])
def test_a_retrieval_is_read_with_the_grants_its_call_needed(
        spaces: list[str], grants: set[str] | None, visible: bool) -> None:
    who = Principal("acme", "read", None if grants is None else frozenset(grants))
    assert _may_read(who, spaces) is visible
