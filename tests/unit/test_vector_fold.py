"""The vector read model as a fold: one index point per bi-temporal row of an item, with its
keyword vector from the start and its dense vector once its content's embedding arrives;
corrections, retraction, supersession and archiving; redelivery and restarts; and, as a
property, the same as-of answers as the replay oracle (``Projection`` + ``temporal.as_of``)."""

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memledger_platform.embedding.embedder import HashingEmbedder
from memledger_platform.events import decode
from memledger_platform.readmodel import temporal
from memledger_platform.readmodel.projection import Projection
from memledger_platform.vectorindex.memory import InMemoryVectorIndex
from memledger_platform.vectorindex.port import (
    EMBEDDED_FROM,
    OPEN,
    IndexedPoint,
    Scope,
    in_scope,
)
from memledger_platform.vectorindex.sparse import encode_document, encode_query
from memledger_vectors.fold import _NAMESPACE, VectorFold, uuid5_text

TENANT, SPACE, MODEL = "acme", "notes", HashingEmbedder.model_id
ALICE = "0190a000-0000-7000-8000-0000000000a1"
BOB = "0190a000-0000-7000-8000-0000000000b2"
SUCCESSOR = "0190a000-0000-7000-8000-0000000000a2"
ACME, GLOBEX = "Alice works at Acme", "Alice works at Globex"
EMBEDDER = HashingEmbedder(dims=16)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

Rectangle = tuple[int, int | None, str, int, int | None]
"""A point as (valid_from year, valid_to year or None, content, sys_from, sys_to or None)."""
Snapshot = dict[str, tuple[dict[str, Any], tuple[float, ...] | None, Any]]
"""Every point by id: payload, dense vector, sparse vector."""


def at(year: int, month: int = 1) -> datetime:
    return datetime(year, month, 1, tzinfo=UTC)


def seconds(instant: datetime) -> float:
    return (instant - EPOCH).total_seconds()


def iso(instant: datetime | None) -> str | None:
    return None if instant is None else instant.isoformat()


def envelope(position: int, event_type: str, payload: dict[str, Any], *, version: int,
             recorded: datetime, valid_from: datetime | None = None,
             valid_to: datetime | None = None, item: str = ALICE, tenant: str = TENANT
             ) -> dict[str, Any]:
    """A relayed envelope document of ``item``'s stream (``version``: its stream version)."""
    return {"global_position": position, "recorded_at": recorded.isoformat(),
            "event_type": event_type, "event_id": f"evt-{position}", "tenant_id": tenant,
            "space_id": SPACE, "actor": "tester", "session_id": None, "agent_id": None,
            "valid_from": iso(valid_from), "valid_to": iso(valid_to),
            "stream_version": version, "payload": {"item_id": item, **payload}}


def embedded(position: int, item_version: int, text: str, *, model: str = MODEL,
             version: int | None = None, recorded: datetime | None = None, item: str = ALICE
             ) -> dict[str, Any]:
    """The enricher's embedding of ``text``, the content of ``item_version``."""
    vector = EMBEDDER.embed_query(text)
    return envelope(position, "memory.embedded", {
        "item_version": item_version, "model": model, "dims": len(vector), "vector": vector},
        version=version or position, recorded=recorded or at(2025, position), item=item)


ASSERTED = envelope(1, "memory.asserted", {
    "item_id": ALICE, "kind": "fact", "content": ACME, "tags": ["work"], "importance": 0.5,
    "confidence": 1.0}, version=1, recorded=at(2025, 1), valid_from=at(2020))
EMBEDDED = embedded(2, 1, ACME)


def later(position: int, event_type: str, payload: dict[str, Any], *,
          valid_from: datetime | None = None, valid_to: datetime | None = None
          ) -> dict[str, Any]:
    """An event of Alice's stream at ``position`` (also its stream version), recorded in
    2025-0<position>."""
    return envelope(position, event_type, payload, version=position,
                    recorded=at(2025, position), valid_from=valid_from, valid_to=valid_to)


def fold_batch(fold: VectorFold, index: InMemoryVectorIndex,
               documents: Iterable[dict[str, Any]]) -> None:
    """Fold ``documents`` and write what they made, as the consumer does after each batch."""
    for document in documents:
        fold.apply(decode(document))
    upserts, gone = fold.take()
    index.upsert(upserts)
    index.delete(gone)


class Projected:
    """An index and the fold that fills it, written after each batch as the consumer does."""

    def __init__(self, index: InMemoryVectorIndex | None = None, **options: Any) -> None:
        self.index = index or InMemoryVectorIndex()
        self.fold = VectorFold(self.index.points, MODEL, **options)

    def apply(self, *documents: dict[str, Any]) -> "Projected":
        fold_batch(self.fold, self.index, documents)
        return self

    def points(self, item: str = ALICE) -> list[IndexedPoint]:
        return sorted(self.index.points(TENANT, item),
                      key=lambda p: (p.payload["sys_from"], p.payload["valid_from"]))

    def current(self, item: str = ALICE) -> list[IndexedPoint]:
        return [p for p in self.points(item) if p.payload["sys_to"] == OPEN]

    def snapshot(self, items: Iterable[str] = (ALICE,)) -> Snapshot:
        return {p.point_id: (p.payload, None if p.vector is None else tuple(p.vector), p.sparse)
                for item in items for p in self.index.points(TENANT, item)}


def project(*documents: dict[str, Any]) -> Projected:
    return Projected().apply(*documents)


def year(value: float) -> int | None:
    return None if value == OPEN else (EPOCH + timedelta(seconds=value)).year


def rectangles(points: Iterable[IndexedPoint]) -> list[Rectangle]:
    return [(year(p.payload["valid_from"]) or 0, year(p.payload["valid_to"]),
             p.payload["content"], int(p.payload["sys_from"]),
             None if p.payload["sys_to"] == OPEN else int(p.payload["sys_to"]))
            for p in points]


def dense_of(text: str) -> Any:
    return pytest.approx(EMBEDDER.embed_query(text), abs=1e-6)


def now(**scope: Any) -> Scope:
    return Scope(TENANT, valid_at=seconds(scope.pop("valid_at", at(2026))), **scope)


# --- one assertion and its embedding --------------------------------------------------------

def test_an_assertion_becomes_one_point_with_keywords_and_no_dense_vector_yet() -> None:
    [point] = project(ASSERTED).points()
    assert point.vector is None
    assert point.sparse == encode_document(ACME)
    assert {k: point.payload[k] for k in (
        "tenant", "item_id", "space", "kind", "tags", "content", "importance", "confidence",
        "content_version", "valid_from", "valid_to", "sys_from", "sys_to", "archived_from")
    } == {"tenant": TENANT, "item_id": ALICE, "space": SPACE, "kind": "fact", "tags": ["work"],
          "content": ACME, "importance": 0.5, "confidence": 1.0, "content_version": 1,
          "valid_from": seconds(at(2020)), "valid_to": OPEN, "sys_from": 1.0, "sys_to": OPEN,
          "archived_from": OPEN}


def test_an_assertion_without_valid_from_is_valid_from_when_it_was_recorded() -> None:
    asserted = envelope(1, "memory.asserted", {"kind": "fact", "content": ACME},
                        version=1, recorded=at(2025, 1))
    [point] = project(asserted).points()
    assert point.payload["valid_from"] == seconds(at(2025, 1))
    assert point.payload["content_at"] == seconds(at(2025, 1))


def test_the_embedding_of_that_version_sets_the_dense_vector() -> None:
    [point] = project(ASSERTED, EMBEDDED).points()
    assert point.vector == dense_of(ACME)
    assert point.sparse == encode_document(ACME)


def test_an_embedding_by_another_model_is_ignored_and_remembered_as_skipped() -> None:
    projected = project(ASSERTED, embedded(2, 1, ACME, model="other/v9"))
    assert [p.vector for p in projected.points()] == [None]
    assert projected.fold.skipped_models == {"other/v9"}


def test_an_embedding_of_a_content_version_no_row_has_changes_no_point() -> None:
    projected = project(ASSERTED, embedded(2, 7, GLOBEX))
    assert [p.vector for p in projected.points()] == [None]


def test_an_embedding_that_arrives_in_a_later_batch_is_added_to_the_written_point() -> None:
    projected = project(ASSERTED).apply(EMBEDDED)
    assert [p.vector for p in projected.points()] == [dense_of(ACME)]


def test_a_point_records_the_position_its_vector_came_at_and_keeps_it_when_read_back(
        ) -> None:
    [unembedded] = project(ASSERTED).points()
    assert EMBEDDED_FROM not in unembedded.payload
    projected = project(ASSERTED, EMBEDDED)
    assert [p.payload[EMBEDDED_FROM] for p in projected.points()] == [2.0]
    # a later change to the item, folded from the points read back, keeps it
    again = Projected(projected.index).apply(later(3, "memory.archived", {"reason": "old"}))
    assert [(p.payload["archived_from"], p.payload[EMBEDDED_FROM])
            for p in again.points()] == [(3.0, 2.0)]


def test_a_new_items_assertion_does_not_ask_the_index_and_a_later_event_does() -> None:
    asked: list[tuple[str, str]] = []
    index = InMemoryVectorIndex()

    def load(tenant: str, item: str) -> list[IndexedPoint]:
        asked.append((tenant, item))
        return index.points(tenant, item)

    fold = VectorFold(load, MODEL, cache_items=0)
    fold.apply(decode(ASSERTED))
    index.upsert(fold.take()[0])
    assert asked == []
    fold.apply(decode(EMBEDDED))  # evicted (no cache): read back from the index
    assert asked == [(TENANT, ALICE)]


def test_events_the_vector_model_ignores_only_advance_its_position() -> None:
    projected = project(ASSERTED, later(5, "session.started", {"session_id": "s1"}))
    assert projected.fold.position == 5
    assert len(projected.points()) == 1


# --- revisions ------------------------------------------------------------------------------

def test_a_revision_with_content_closes_the_old_point_and_opens_one_without_a_vector() -> None:
    moved = later(3, "memory.revised", {"content": GLOBEX})
    old, before, new = project(ASSERTED, EMBEDDED, moved).points()
    assert (old.payload["content"], old.payload["sys_to"], old.vector) == (
        ACME, 3.0, dense_of(ACME))
    assert (new.payload["content"], new.payload["content_version"]) == (GLOBEX, 3)
    assert (new.payload["sys_from"], new.payload["sys_to"]) == (3.0, OPEN)
    assert new.vector is None
    assert new.sparse == encode_document(GLOBEX)
    # Valid from when it was recorded: before then, Alice was still at Acme (and embedded).
    assert new.payload["valid_from"] == before.payload["valid_to"] == seconds(at(2025, 3))
    assert (before.payload["content"], before.vector) == (ACME, dense_of(ACME))
    assert old.sparse == before.sparse == encode_document(ACME)


def test_the_new_contents_embedding_sets_the_vector_of_the_new_row_only() -> None:
    moved = later(3, "memory.revised", {"content": GLOBEX})
    projected = project(ASSERTED, EMBEDDED, moved, embedded(4, 3, GLOBEX))
    assert [(p.payload["content"], p.vector) for p in projected.current()] == [
        (ACME, dense_of(ACME)), (GLOBEX, dense_of(GLOBEX))]
    assert projected.points()[0].vector == dense_of(ACME)


def test_a_revision_without_content_keeps_the_dense_vector_on_the_new_rows() -> None:
    reweighed = later(3, "memory.revised", {"importance": 0.9, "tags": ["job"]})
    projected = project(ASSERTED, EMBEDDED, reweighed)
    newest = projected.current()[-1]
    assert (newest.payload["importance"], newest.payload["tags"]) == (0.9, ["job"])
    assert newest.payload["content_version"] == 1
    assert [p.vector for p in projected.points()] == [dense_of(ACME)] * 3


def test_a_correction_for_an_interval_cuts_the_row_into_three_rectangles() -> None:
    corrected = later(3, "memory.revised", {"content": GLOBEX},
                      valid_from=at(2021), valid_to=at(2022))
    projected = project(ASSERTED, EMBEDDED, corrected)
    assert rectangles(projected.points()) == [
        (2020, None, ACME, 1, 3),
        (2020, 2021, ACME, 3, None),
        (2021, 2022, GLOBEX, 3, None),
        (2022, None, ACME, 3, None)]
    assert [p.vector is not None for p in projected.current()] == [True, False, True]


# --- the end of an item ---------------------------------------------------------------------

def test_a_retraction_closes_valid_time_and_keeps_what_was_known_before() -> None:
    retracted = later(3, "memory.retracted", {"valid_until": "2023-01-01T00:00:00+00:00"})
    projected = project(ASSERTED, EMBEDDED, retracted)
    assert rectangles(projected.points()) == [(2020, None, ACME, 1, 3), (2020, 2023, ACME, 3, None)]
    vector = EMBEDDER.embed_query(ACME)
    assert projected.index.search(vector, now(valid_at=at(2024)), 5) == []
    assert len(projected.index.search(vector, now(valid_at=at(2022)), 5)) == 1
    assert len(projected.index.search(vector, now(valid_at=at(2024), position=2), 5)) == 1


def test_a_retraction_without_valid_until_ends_the_item_when_it_was_recorded() -> None:
    projected = project(ASSERTED, later(3, "memory.retracted", {"reason": "left"}))
    assert [p.payload["valid_to"] for p in projected.current()] == [seconds(at(2025, 3))]


def test_a_superseded_item_stops_being_valid_when_the_supersession_was_recorded() -> None:
    superseded = later(3, "memory.superseded", {"superseded_by": SUCCESSOR, "reason": "merged"})
    projected = project(ASSERTED, EMBEDDED, superseded)
    assert rectangles(projected.points()) == [(2020, None, ACME, 1, 3), (2020, 2025, ACME, 3, None)]
    assert projected.current()[0].payload["valid_to"] == seconds(at(2025, 3))
    assert projected.current()[0].vector == dense_of(ACME)


def test_archiving_hides_every_point_from_current_search_but_not_from_earlier_positions(
        ) -> None:
    moved = later(3, "memory.revised", {"content": GLOBEX})
    projected = project(ASSERTED, EMBEDDED, moved, embedded(4, 3, GLOBEX),
                        later(5, "memory.archived", {"reason": "retention"}))
    assert {p.payload["archived_from"] for p in projected.points()} == {5.0}
    vector, keywords = EMBEDDER.embed_query(GLOBEX), encode_query("Globex")
    for position in (None, 5, 6):
        assert projected.index.search(vector, now(position=position), 5) == []
        assert projected.index.search_sparse(keywords, now(position=position), 5) == []
    [dense] = projected.index.search(vector, now(position=4), 5)
    [sparse] = projected.index.search_sparse(keywords, now(position=4), 5)
    assert dense.payload["content"] == sparse.payload["content"] == GLOBEX


# --- redelivery and restarts -----------------------------------------------------------------

STORY = (ASSERTED, EMBEDDED,
         later(3, "memory.revised", {"content": GLOBEX}, valid_from=at(2021), valid_to=at(2022)),
         later(4, "memory.revised", {"importance": 0.8}),
         later(5, "memory.retracted", {"reason": "left"}),
         later(6, "memory.archived", {"reason": "retention"}),
         embedded(7, 3, GLOBEX))
"""Every kind of change, ending with an embedding that arrives after the archiving."""


def test_the_story_leaves_closed_and_current_points_all_archived_and_embedded() -> None:
    # What the redelivery tests compare against, so they compare something real.
    points = project(*STORY).points()
    assert {p.payload["archived_from"] for p in points} == {6.0}
    assert all(p.vector == dense_of(p.payload["content"]) for p in points)
    assert rectangles(points) == [
        (2020, None, ACME, 1, 3),
        (2020, 2021, ACME, 3, None), (2021, 2022, GLOBEX, 3, None), (2022, None, ACME, 3, 4),
        (2022, 2025, ACME, 4, None), (2025, None, ACME, 4, 5),
        (2025, 2025, ACME, 5, None)]


@pytest.mark.parametrize("batches", [
    [STORY, STORY],
    [STORY[:5], STORY[3:]],
    [STORY[:6], STORY[5:6], STORY[6:]],
    [STORY[:3], STORY[1:3], STORY[1:]],
], ids=["the whole log twice", "overlapping batches", "one event twice", "rewound twice"])
def test_redelivered_events_leave_exactly_the_same_points(
        batches: list[Sequence[dict[str, Any]]]) -> None:
    projected = Projected()
    for batch in batches:
        projected.apply(*batch)
    assert projected.snapshot() == project(*STORY).snapshot()


@pytest.mark.parametrize("replayed", range(len(STORY) + 1))
def test_after_a_restart_reapplying_the_last_events_leaves_exactly_the_same_points(
        replayed: int) -> None:
    before = project(*STORY)
    restarted = Projected(before.index).apply(*STORY[len(STORY) - replayed:])
    assert restarted.snapshot() == project(*STORY).snapshot()


def test_a_restart_in_the_middle_of_the_log_goes_on_from_the_points_it_finds() -> None:
    first = project(*STORY[:4])
    resumed = Projected(first.index).apply(*STORY[3:])
    assert resumed.snapshot() == project(*STORY).snapshot()


def test_an_item_evicted_from_the_cache_keeps_the_changes_not_yet_written() -> None:
    bob = envelope(2, "memory.asserted", {"kind": "fact", "content": "Bob likes tea"},
                   version=1, recorded=at(2025, 2), item=BOB)
    documents = (ASSERTED, bob, later(3, "memory.revised", {"content": GLOBEX}))
    small = Projected(cache_items=1).apply(*documents)
    assert small.snapshot((ALICE, BOB)) == project(*documents).snapshot((ALICE, BOB))


# --- the differential property: as-of answers equal the replay oracle's ----------------------

ITEMS = (ALICE, BOB)
INSTANTS = tuple(at(y) for y in (2019, 2020, 2021, 2022, 2023, 2024))
PROBES = (*INSTANTS, at(2025, 2), at(2025, 7), at(2026, 1), at(2030))
TEXTS = ("red apples", "green pears", "blue plums", "grey figs")


@dataclass(frozen=True)
class Step:
    item: int
    kind: str
    text: str
    with_content: bool
    start: datetime | None
    end: datetime | None
    gap: int
    """How far after the previous event's position this one is."""


maybe_instant = st.sampled_from([*INSTANTS, None])


@st.composite
def interval(draw: st.DrawFn) -> tuple[datetime | None, datetime | None]:
    start, end = draw(maybe_instant), draw(maybe_instant)
    if start and end and end <= start:
        start, end = end, start if end < start else None
    return start, end


@st.composite
def step(draw: st.DrawFn) -> Step:
    start, end = draw(interval())
    kind = draw(st.sampled_from(["assert", "assert", "revise", "revise", "retract", "supersede",
                                 "embed"]))
    return Step(draw(st.integers(0, len(ITEMS) - 1)), kind, draw(st.sampled_from(TEXTS)),
                draw(st.booleans()), start, end, draw(st.integers(1, 3)))


histories = st.lists(step(), min_size=1, max_size=12)


def history(steps: Sequence[Step]) -> list[dict[str, Any]]:
    """Envelope documents for ``steps``: positions increasing (with gaps), recorded monthly
    from 2025, stream versions counted per item."""
    versions, contents = dict.fromkeys(ITEMS, 0), dict.fromkeys(ITEMS, 1)
    documents, position = [], 0
    for s in steps:
        item = ITEMS[s.item]
        position += s.gap
        versions[item] += 1
        documents.append(document(s, item, position, versions[item], contents[item]))
        if s.kind == "assert" or (s.kind == "revise" and s.with_content):
            contents[item] = versions[item]
    return documents


def document(s: Step, item: str, position: int, version: int, content_version: int
             ) -> dict[str, Any]:
    """The event of step ``s`` (an embedding is of the item's latest content version)."""
    recorded = at(2025) + timedelta(days=30 * position)
    times: dict[str, Any] = {"valid_from": s.start, "valid_to": s.end}
    if s.kind == "assert":
        payload: dict[str, Any] = {"kind": "fact", "content": s.text, "tags": [s.text[:3]]}
        return envelope(position, "memory.asserted", payload, version=version,
                        recorded=recorded, item=item, **times)
    if s.kind == "revise":
        payload = {"content": s.text} if s.with_content else {"importance": 0.9}
        return envelope(position, "memory.revised", payload, version=version,
                        recorded=recorded, item=item, **times)
    if s.kind == "retract":
        return envelope(position, "memory.retracted", {"valid_until": iso(s.start)},
                        version=version, recorded=recorded, item=item)
    if s.kind == "supersede":
        return envelope(position, "memory.superseded", {
            "superseded_by": SUCCESSOR, "reason": "newer"}, version=version,
            recorded=recorded, item=item)
    return embedded(position, content_version, s.text, version=version, recorded=recorded,
                    item=item)


def replay(documents: Sequence[dict[str, Any]]) -> Projection:
    oracle = Projection()
    for d in documents:
        oracle.apply(decode(d))
    return oracle


def as_of(oracle: Projection, valid_at: datetime, position: int | None
          ) -> list[tuple[str, Any, Any]]:
    """(item, content, importance) of each item the replay oracle finds true at ``valid_at``
    as known at ``position`` (``None``: now)."""
    known = oracle.position if position is None else position
    rows = [(item, temporal.as_of(oracle.rows.get((TENANT, item), []), valid_at, known))
            for item in ITEMS]
    return sorted((item, dict(row.attrs)["content"], dict(row.attrs)["importance"])
                  for item, row in rows if row is not None)


@settings(max_examples=200, deadline=None)
@given(steps=histories, data=st.data())
def test_the_points_in_scope_are_the_rows_a_replay_finds_as_of_any_time_and_position(
        steps: list[Step], data: st.DataObject) -> None:
    documents = history(steps)
    points = [p for item in ITEMS for p in project(*documents).index.points(TENANT, item)]
    oracle = replay(documents)
    positions = [int(d["global_position"]) for d in documents]
    instants = [*PROBES, *(datetime.fromisoformat(d["recorded_at"]) for d in documents)]
    for _ in range(data.draw(st.integers(1, 8), label="probes")):
        valid_at = data.draw(st.sampled_from(instants), label="valid_at")
        position = data.draw(st.sampled_from(
            [None, 0, *positions, *(p - 1 for p in positions)]), label="position")
        scope = Scope(TENANT, valid_at=seconds(valid_at), position=position)
        found = sorted((p.payload["item_id"], p.payload["content"], p.payload["importance"])
                       for p in points if in_scope(p.payload, scope))
        assert found == as_of(oracle, valid_at, position)


@settings(max_examples=100, deadline=None)
@given(steps=histories, cut=st.floats(0, 1), rewind=st.floats(0, 1),
       restart=st.booleans())
def test_any_redelivered_suffix_of_any_history_leaves_exactly_the_same_points(
        steps: list[Step], cut: float, rewind: float, restart: bool) -> None:
    documents = history(steps)
    split = int(cut * len(documents))
    again = int(rewind * split)
    projected = Projected().apply(*documents[:split])
    if restart:
        projected = Projected(projected.index)
    projected.apply(*documents[again:])
    assert projected.snapshot(ITEMS) == project(*documents).snapshot(ITEMS)


def test_an_embedding_whose_subject_was_erased_before_it_was_folded_is_left_out() -> None:
    """Behind a backlog, the embedding of an item whose subject has since been erased is read
    with its sealed vector gone (``None``): nothing to add; the erasure drops the points."""
    erased = embedded(2, 1, ACME)
    erased["payload"]["vector"] = None
    assert [p.vector for p in project(ASSERTED, erased).points()] == [None]


@given(st.text(max_size=200))
def test_a_rows_point_id_is_the_uuid5_of_its_name(name: str) -> None:
    """Point ids name rows for good: made faster, they must stay the ids written before."""
    assert uuid5_text(name) == str(uuid.uuid5(_NAMESPACE, name))
