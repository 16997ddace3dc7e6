"""Conversation messages in the vector read model: one point per message, valid from when it
was said and known from when it was appended, found by keywords at once and by meaning once
embedded; redelivery and restarts leave the same points; an erased subject's message leaves
the index and is never written back."""

from datetime import UTC, datetime
from typing import Any

import pytest

from memledger_platform.crypto import ERASED
from memledger_platform.embedding.embedder import HashingEmbedder
from memledger_platform.events import decode
from memledger_platform.vectorindex.memory import InMemoryVectorIndex
from memledger_platform.vectorindex.port import (
    EMBEDDED_FROM,
    OPEN,
    IndexedPoint,
    Scope,
    in_scope,
)
from memledger_platform.vectorindex.sparse import encode_query
from memledger_vectors.fold import VectorFold
from memledger_vectors.messages import point_id_of
from tests.unit.test_vector_fold import fold_batch

TENANT, SPACE, MODEL = "acme", "notes", HashingEmbedder.model_id
SESSION = "0190a000-0000-7000-8000-0000000000c1"
HELLO = "0190a000-0000-7000-8000-0000000000e1"
REPLY = "0190a000-0000-7000-8000-0000000000e2"
ALICE = "0190a000-0000-7000-8000-0000000000a1"
EMBEDDER = HashingEmbedder(dims=16)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
SAID = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
RECORDED = datetime(2026, 3, 1, tzinfo=UTC)
TEXT = "I went to a pottery class in Lisbon last weekend"


def seconds(instant: datetime) -> float:
    return (instant - EPOCH).total_seconds()


def appended(position: int, message: str = HELLO, *, content: str = TEXT,
             said: datetime | None = SAID, role: str = "user", subject: str | None = "dana",
             participant: str | None = "Dana") -> dict[str, Any]:
    return {"global_position": position, "recorded_at": RECORDED.isoformat(),
            "event_type": "conversation.message_appended", "event_id": f"evt-{position}",
            "tenant_id": TENANT, "space_id": SPACE, "actor": "tester", "session_id": SESSION,
            "agent_id": "scribe", "valid_from": said and said.isoformat(), "valid_to": None,
            "stream_version": position, "subject_id": subject,
            "payload": {"session_id": SESSION, "message_id": message, "role": role,
                        "content": content, "participant": participant}}


def embedded(position: int, message: str = HELLO, *, text: str = TEXT, model: str = MODEL
             ) -> dict[str, Any]:
    vector = EMBEDDER.embed_query(text)
    return {"global_position": position, "recorded_at": RECORDED.isoformat(),
            "event_type": "conversation.message_embedded", "event_id": f"evt-{position}",
            "tenant_id": TENANT, "space_id": SPACE, "actor": "enricher",
            "session_id": SESSION, "agent_id": None, "valid_from": None, "valid_to": None,
            "stream_version": 1, "payload": {"session_id": SESSION, "message_id": message,
                                             "model": model, "dims": len(vector),
                                             "vector": vector}}


class Projected:
    """An index and the fold that fills it, written after each batch as the consumer does."""

    def __init__(self, index: InMemoryVectorIndex | None = None) -> None:
        self.index = index or InMemoryVectorIndex()
        self.fold = VectorFold(self.index.points, MODEL, sessions=self.index.session_messages)

    def apply(self, *documents: dict[str, Any]) -> "Projected":
        fold_batch(self.fold, self.index, documents)
        return self

    def point(self, message: str = HELLO) -> IndexedPoint:
        [found] = self.index.points(TENANT, message)
        return found

    def snapshot(self) -> dict[str, Any]:
        return {p.point_id: (p.payload, p.vector, p.sparse)
                for m in (HELLO, REPLY) for p in self.index.points(TENANT, m)}


def scope(valid_at: datetime = RECORDED, position: int | None = None, **narrower: Any) -> Scope:
    return Scope(tenant=TENANT, valid_at=seconds(valid_at), position=position, **narrower)


def test_an_appended_message_becomes_one_point_with_its_scope_and_keywords_only() -> None:
    point = Projected().apply(appended(3)).point()
    p = point.payload
    assert point.point_id == point_id_of(TENANT, HELLO)
    assert (p["kind"], p["layer"], p["item_id"], p["session"], p["agent"], p["space"]) == (
        "message", "conversation", HELLO, SESSION, "scribe", SPACE)
    assert (p["role"], p["participant"], p["subject_id"], p["content"]) == (
        "user", "Dana", "dana", TEXT)
    assert (p["valid_from"], p["valid_to"], p["sys_from"], p["sys_to"]) == (
        seconds(SAID), OPEN, 3.0, OPEN)
    assert point.vector is None
    assert point.sparse is not None
    assert point.sparse.indices


def test_a_message_without_said_at_is_valid_from_when_it_was_recorded() -> None:
    point = Projected().apply(appended(3, said=None)).point()
    assert point.payload["valid_from"] == point.payload["content_at"] == seconds(RECORDED)


def test_a_message_ages_from_when_it_was_said() -> None:
    assert Projected().apply(appended(3)).point().payload["content_at"] == seconds(SAID)


def test_its_embedding_sets_the_dense_vector_and_its_position_and_keeps_everything_else(
        ) -> None:
    projected = Projected().apply(appended(3))
    before = projected.point()
    after = projected.apply(embedded(4)).point()
    assert after.vector is not None
    assert EMBEDDED_FROM not in before.payload
    assert (after.payload, after.sparse) == ({**before.payload, EMBEDDED_FROM: 4.0},
                                             before.sparse), "and when the vector came"


def test_an_embedding_by_another_model_is_skipped_and_remembered_as_such() -> None:
    projected = Projected().apply(appended(3), embedded(4, model="other-model"))
    assert projected.point().vector is None
    assert projected.fold.skipped_models == {"other-model"}


def test_an_embedding_that_arrives_after_a_restart_is_added_to_the_point_in_the_index() -> None:
    first = Projected().apply(appended(3))
    again = Projected(first.index).apply(embedded(4))
    assert again.point().vector is not None


def test_an_embedding_of_a_message_the_index_never_held_makes_no_point() -> None:
    assert Projected().apply(embedded(4)).index.count() == 0


@pytest.mark.parametrize(("valid_at", "position", "found"), [
    (datetime(2023, 5, 8, 13, 55, tzinfo=UTC), None, False),
    (SAID, None, True),
    (datetime(2024, 1, 1, tzinfo=UTC), 2, False),
    (datetime(2024, 1, 1, tzinfo=UTC), 3, True),
    (RECORDED, None, True),
], ids=["before it was said", "as it was said", "before it was appended",
        "as it was appended", "now"])
def test_as_of_search_finds_a_message_from_when_it_was_said_and_appended(
        valid_at: datetime, position: int | None, found: bool) -> None:
    point = Projected().apply(appended(3)).point()
    assert in_scope(point.payload, scope(valid_at, position)) is found


def test_role_and_participant_narrow_to_messages_and_items_never_pass_them() -> None:
    index = InMemoryVectorIndex()
    Projected(index).apply(appended(3), appended(4, REPLY, role="assistant",
                                                 participant="Scribe", content=TEXT))
    item = {"tenant": TENANT, "space": SPACE, "kind": "fact", "valid_from": 0.0,
            "valid_to": OPEN, "sys_from": 1.0, "sys_to": OPEN}
    query = encode_query("pottery class")

    def found(**narrower: Any) -> set[str]:
        return {h.payload["item_id"] for h in index.search_sparse(query, scope(**narrower), 9)}

    assert found() == {HELLO, REPLY}
    assert found(roles=("user",)) == {HELLO}
    assert found(roles=("user", "assistant")) == {HELLO, REPLY}
    assert found(participant="Scribe") == {REPLY}
    assert found(kinds=("fact",)) == set()
    assert found(layers=("project",)) == set()
    assert not in_scope(item, scope(roles=("user",)))
    assert not in_scope(item, scope(participant="Dana"))
    assert in_scope(item, scope())


def test_redelivering_a_suffix_of_the_log_leaves_exactly_the_same_points() -> None:
    log = [appended(3), embedded(4), appended(5, REPLY, role="assistant"), embedded(6, REPLY)]
    once = Projected().apply(*log)
    for start in range(len(log)):
        again = Projected(InMemoryVectorIndex())
        again.apply(*log)
        again.apply(*log[start:])
        assert again.snapshot() == once.snapshot()
        # and after a restart (a fold that has to read the index back)
        restarted = Projected(again.index).apply(*log[start:])
        assert restarted.snapshot() == once.snapshot()


def test_an_erased_subjects_message_leaves_the_index_and_is_never_written_back() -> None:
    projected = Projected().apply(appended(3), appended(4, REPLY, subject="scribe"))
    projected.fold.apply(decode(embedded(5)))  # folded, not yet written
    assert projected.index.delete_subject(TENANT, "dana") == 1
    projected.fold.forget_subject(TENANT, "dana")
    projected.apply()
    assert projected.index.points(TENANT, HELLO) == []
    assert projected.index.points(TENANT, REPLY) != []


def test_a_message_opened_to_its_placeholder_makes_no_point_and_removes_an_old_one() -> None:
    projected = Projected().apply(appended(3))
    # Redelivered after its subject's key was destroyed: the content opens to "[erased]".
    projected.apply(appended(3, content=ERASED), embedded(4))
    assert projected.index.points(TENANT, HELLO) == []
    assert Projected().apply(appended(3, content=ERASED)).index.count() == 0


THIRD = "0190a000-0000-7000-8000-0000000000e3"
FOURTH = "0190a000-0000-7000-8000-0000000000e4"


def keyword_hits(projected: Projected, words: str) -> list[str]:
    found = projected.index.search_sparse(encode_query(words), scope(), 10)
    return sorted(h.payload["item_id"] for h in found)


def test_a_message_is_found_by_the_name_of_who_said_it() -> None:
    projected = Projected().apply(appended(3), appended(4, REPLY, participant="Sam",
                                                       content="Sounds lovely"))
    assert keyword_hits(projected, "Dana") == sorted([HELLO, REPLY])  # REPLY: its turn before
    assert keyword_hits(projected, "Sam") == [REPLY]


def test_the_words_of_the_two_turns_before_a_message_count_among_its_keywords() -> None:
    projected = Projected().apply(
        appended(3, content="What did you research lately?"),
        appended(4, REPLY, content="Adoption agencies, mostly"),
        appended(5, THIRD, content="Sounds like a big step"),
        appended(6, FOURTH, content="It is"))
    assert keyword_hits(projected, "research") == sorted([HELLO, REPLY, THIRD])
    assert keyword_hits(projected, "adoption") == sorted([REPLY, THIRD, FOURTH])


def test_the_turns_before_count_only_within_the_session_and_the_data_subject() -> None:
    other_session = appended(4, REPLY, content="Adoption agencies")
    other_session["payload"] = {**other_session["payload"],
                                "session_id": "0190a000-0000-7000-8000-0000000000c2"}
    projected = Projected().apply(
        appended(3, content="What did you research lately?"), other_session,
        appended(5, THIRD, content="Adoption agencies", subject="sam"))
    assert keyword_hits(projected, "research") == [HELLO]


def test_after_a_restart_the_turns_before_are_read_back_from_the_index() -> None:
    log = [appended(3, content="What did you research lately?"),
           appended(4, REPLY, content="Adoption agencies, mostly")]
    whole = Projected().apply(*log, appended(5, THIRD, content="Big step"))
    restarted = Projected(Projected().apply(*log).index).apply(
        appended(5, THIRD, content="Big step"))
    assert restarted.point(THIRD).sparse == whole.point(THIRD).sparse
    assert keyword_hits(restarted, "research") == sorted([HELLO, REPLY, THIRD])


def test_an_embedding_whose_subject_was_erased_before_it_was_folded_is_left_out() -> None:
    erased = embedded(4)
    erased["payload"]["vector"] = None
    assert Projected().apply(appended(3), erased).point().vector is None
