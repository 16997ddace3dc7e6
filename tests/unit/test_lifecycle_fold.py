"""The lifecycle fold: what a space's policy archives at a given moment, and which embeddings
are near-duplicates; a pure function of the events and the clock."""

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from memledger_lifecycle.fold import Archive, LifecycleFold, fold
from memledger_platform.events import Event

T0 = datetime(2026, 11, 1, tzinfo=UTC)
SESSION = str(UUID(int=7))
A, B, C = (str(UUID(int=n)) for n in (1, 2, 3))


class Log:
    """Events as the projector would see them, positions and times in order."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._positions = itertools.count(1)

    def add(self, event_type: str, at: datetime, space: str = "main",
            session: str | None = None, **payload: Any) -> "Log":
        position = next(self._positions)
        self.events.append(Event(position, at, event_type, str(UUID(int=1000 + position)),
                                 "acme", space, "tester", session, None, None, None, payload))
        return self

    def policy(self, at: datetime, version: int, **values: Any) -> "Log":
        return self.add("space.policy_set", at, policy_version=version, **values)

    def item(self, item_id: str, at: datetime, kind: str = "observation",
             session: str | None = None, **payload: Any) -> "Log":
        return self.add("memory.asserted", at, session=session, item_id=item_id, kind=kind,
                        content=f"memory {item_id}", **{"importance": 0.0, **payload})


def _archived(log: Log, now: datetime) -> dict[str, str]:
    return {a.item_id: a.rule for a in fold(log.events).archives(now)}


def test_session_memory_expires_its_ttl_after_the_session_ends_unless_promoted() -> None:
    log = (Log().policy(T0, 1, session_ttl_seconds=1800)
           .add("session.started", T0, session_id=SESSION)
           .item(A, T0 + timedelta(minutes=1), session=SESSION)
           .item(B, T0 + timedelta(minutes=2), session=SESSION)
           .add("memory.promoted", T0 + timedelta(minutes=3), item_id=B, layer="project")
           .add("session.ended", T0 + timedelta(minutes=10), session_id=SESSION))
    ended = T0 + timedelta(minutes=10)

    assert _archived(log, ended + timedelta(seconds=1799)) == {}
    (archive,) = fold(log.events).archives(ended + timedelta(seconds=1800))
    assert (archive.item_id, archive.rule, archive.policy_version) == (A, "ttl", 1)
    assert "the session ended at 2026-11-01T00:10:00+00:00" in archive.reason


def test_an_open_session_expires_after_inactivity() -> None:
    log = (Log().policy(T0, 1, session_ttl_seconds=60)
           .add("session.started", T0, session_id=SESSION)
           .item(A, T0, session=SESSION)
           .add("conversation.message_appended", T0 + timedelta(seconds=50), session=SESSION,
                session_id=SESSION, message_id=str(UUID(int=99)), role="user", content="hi"))

    assert _archived(log, T0 + timedelta(seconds=100)) == {}
    assert _archived(log, T0 + timedelta(seconds=110)) == {A: "ttl"}


def test_a_policy_governs_only_what_is_recorded_after_it_unless_retroactive() -> None:
    log = (Log().item(A, T0).policy(T0 + timedelta(hours=1), 1, retention_days={
        "observation": 1}).item(B, T0 + timedelta(hours=2)))
    later = T0 + timedelta(days=3)

    assert _archived(log, later) == {B: "retention"}
    log.policy(T0 + timedelta(days=2), 2, retention_days={"observation": 1}, retroactive=True)
    found = fold(log.events).archives(later)
    assert [(a.item_id, a.policy_version) for a in found] == [(A, 2), (B, 2)]


def test_a_legal_hold_archives_nothing_and_ecosystem_memory_is_permanent() -> None:
    log = (Log().policy(T0, 1, retention_days={"observation": 1})
           .item(A, T0 + timedelta(hours=1)).item(B, T0 + timedelta(hours=1), layer="ecosystem"))
    later = T0 + timedelta(days=30)

    assert _archived(log, later) == {A: "retention"}
    log.policy(T0 + timedelta(days=2), 2, legal_hold=True)
    assert _archived(log, later) == {}


def test_decay_forgets_the_unimportant_first_and_reinforcement_resets_it() -> None:
    log = (Log().policy(T0, 1, decay_half_life_days={"observation": 1.0}, forget_below=0.5)
           .item(A, T0 + timedelta(hours=1), importance=0.0)
           .item(B, T0 + timedelta(hours=1), importance=1.0)
           .item(C, T0 + timedelta(hours=1), importance=0.0)
           .add("memory.reaffirmed", T0 + timedelta(hours=20), item_id=C))
    a_day_on = T0 + timedelta(hours=1, days=1, minutes=1)

    assert _archived(log, a_day_on) == {A: "decay"}
    assert _archived(log, T0 + timedelta(hours=1, days=2, minutes=1)) == {
        A: "decay", B: "decay", C: "decay"}


def test_max_items_archives_the_weakest_beyond_the_limit() -> None:
    log = (Log().policy(T0, 1, max_items=2)
           .item(A, T0 + timedelta(hours=1), confidence=0.9)
           .item(B, T0 + timedelta(hours=1), confidence=0.4)
           .item(C, T0 + timedelta(hours=1), confidence=0.8))

    assert _archived(log, T0 + timedelta(days=1)) == {B: "max_items"}


def test_the_same_events_and_clock_decide_the_same_and_once_applied_nothing_more() -> None:
    log = (Log().policy(T0, 1, retention_days={"observation": 1}, max_items=1)
           .item(A, T0 + timedelta(hours=1)).item(B, T0 + timedelta(hours=2))
           .item(C, T0 + timedelta(days=5)))
    now = T0 + timedelta(days=5, hours=1)

    first, again = fold(log.events).archives(now), fold(log.events).archives(now)
    assert first == again
    assert len(first) == 2
    assert all(isinstance(a, Archive) and a.idempotency_key.endswith(":v1") for a in first)
    for archive in first:
        log.add("memory.archived", now, item_id=archive.item_id, reason=archive.reason,
                policy_version=archive.policy_version)
    assert fold(log.events).archives(now) == []


def _embedded(log: Log, item_id: str, vector: list[float], at: datetime) -> None:
    log.add("memory.embedded", at, item_id=item_id, item_version=1, model="m", dims=3,
            vector=vector)


def test_a_near_duplicate_embedding_in_the_same_scope_is_found_by_policy() -> None:
    log = Log().policy(T0, 1, consolidation="merge", merge_cosine=0.95)
    for item in (A, B):
        log.item(item, T0)
    log.item(C, T0, session=SESSION)
    _embedded(log, A, [1.0, 0.0, 0.0], T0)
    _embedded(log, C, [1.0, 0.0, 0.0], T0)  # a session's: not the project's duplicate
    _embedded(log, B, [0.99, 0.05, 0.0], T0)
    state = fold(log.events)

    (found,) = state.take_consolidations()
    assert (found.duplicate, found.survivor, found.action) == (B, A, "merge")
    assert found.similarity > 0.99
    assert state.take_consolidations() == []


def test_an_embedding_logged_with_an_overflowing_length_is_never_compared() -> None:
    log = Log().policy(T0, 1, consolidation="merge", merge_cosine=0.5).item(A, T0).item(B, T0)
    _embedded(log, A, [1e308, 1e308, 0.0], T0)  # logged before ingest refused such vectors
    _embedded(log, B, [1.0, 1.0, 0.0], T0)
    state = fold(log.events)

    assert state.items[("acme", A)].vector is None
    assert state.take_consolidations() == []


def test_a_consolidation_already_carried_out_is_not_offered_again() -> None:
    log = Log().policy(T0, 1, consolidation="suggest", merge_cosine=0.9).item(A, T0).item(B, T0)
    _embedded(log, A, [0.0, 1.0, 0.0], T0)
    _embedded(log, B, [0.0, 1.0, 0.0], T0)
    log.add("memory.superseded", T0, item_id=B, superseded_by=A, reason="merged")

    assert fold(log.events).take_consolidations() == []


def test_an_erased_subjects_vectors_are_dropped() -> None:
    state = LifecycleFold()
    log = Log().item(A, T0)
    _embedded(log, A, [1.0, 0.0, 0.0], T0)
    log.add("subject.erased", T0, subject_id="user:ada", key_id="k1")
    for event in log.events:
        state.apply(event, "user:ada" if event.event_type == "memory.asserted" else None)

    assert state.items[("acme", A)].vector is None
