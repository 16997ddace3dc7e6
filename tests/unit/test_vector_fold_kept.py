"""Items the vector fold's cache lets go, kept compactly: taken back without reading the item
from the index, their vectors read by point id (one read a batch) when a point needs one, the
same points as a fold that never lets an item go; a full budget keeps what it holds."""

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from memledger_platform.readmodel.temporal import Version
from memledger_platform.vectorindex.memory import InMemoryVectorIndex
from memledger_platform.vectorindex.port import IndexedPoint, Vector
from memledger_vectors.fold import VectorFold
from memledger_vectors.kept import ENTRY_BYTES, Item, compact, expand
from tests.unit.test_vector_fold import (
    ALICE,
    BOB,
    ITEMS,
    MODEL,
    STORY,
    TENANT,
    Projected,
    Snapshot,
    at,
    embedded,
    envelope,
    fold_batch,
    histories,
    history,
    project,
)


class Counted:
    """An index, the fold that fills it (its cache holding ``cache_items``, the rest kept
    up to ``kept_bytes``), and every read the fold made of the index."""

    def __init__(self, *, cache_items: int = 0, kept_bytes: int = 1 << 20,
                 index: InMemoryVectorIndex | None = None) -> None:
        self.index = index or InMemoryVectorIndex()
        self.loads: list[str] = []
        self.reads: list[list[str]] = []
        self.fold = VectorFold(self._load, MODEL, cache_items=cache_items,
                               vectors=self._vectors, kept_bytes=kept_bytes)

    def _load(self, tenant: str, item: str) -> list[IndexedPoint]:
        self.loads.append(item)
        return self.index.points(tenant, item)

    def _vectors(self, point_ids: Sequence[str]) -> dict[str, Vector]:
        self.reads.append(list(point_ids))
        return self.index.vectors(point_ids)

    def apply(self, *documents: dict[str, Any]) -> "Counted":
        fold_batch(self.fold, self.index, documents)
        return self

    def snapshot(self, items: Sequence[str] = ITEMS) -> Snapshot:
        return {p.point_id: (p.payload, None if p.vector is None else tuple(p.vector), p.sparse)
                for item in items for p in self.index.points(TENANT, item)}


def asserted(position: int, item: str, text: str, **extra: Any) -> dict[str, Any]:
    return envelope(position, "memory.asserted", {"kind": "fact", "content": text, **extra},
                    version=1, recorded=at(2025, 1), valid_from=at(2020), item=item)


def revised(position: int, item: str, version: int, text: str) -> dict[str, Any]:
    return envelope(position, "memory.revised", {"content": text}, version=version,
                    recorded=at(2025, 1), valid_from=at(2020 + version), item=item)


def test_the_story_event_by_event_with_no_cache_reads_no_item_back_and_ends_the_same() -> None:
    counted = Counted()
    for document in STORY:
        counted.apply(document)
    assert counted.snapshot((ALICE,)) == project(*STORY).snapshot()
    assert counted.loads == []
    assert counted.reads  # the revisions wrote again points of a content embedded before


def test_a_kept_item_comes_back_with_its_rows_ids_and_when_its_vectors_came() -> None:
    fold = project(*STORY).fold
    item = fold._items[(TENANT, ALICE)]
    blob = compact(item)
    assert blob is not None
    again = expand(blob)
    assert again.rows == item.rows
    assert [p for _, p in again.rows] == [p for _, p in item.rows]
    assert (again.embedded_from, again.archived_from) == (item.embedded_from, item.archived_from)
    assert again.vectors == {}
    # every point of an embedded content version is named, to read its vector from
    assert set(again.unread) == set(item.vectors) == {1, 3}
    assert all(dict(row.attrs)["content_version"] == version
               for version, ids in again.unread.items() for row, p in again.rows if p in ids)


def test_an_item_with_a_value_that_has_no_compact_form_is_not_kept() -> None:
    row = Version(at(2020), None, 1, None, (("content", object()), ("content_version", 1)))
    assert compact(Item(rows=[(row, "0190a000-0000-7000-8000-0000000000a1")])) is None
    assert compact(Item(rows=[(row, "not-a-uuid")])) is None


def test_the_vectors_of_a_batch_of_kept_items_are_read_at_once() -> None:
    items = [f"0190a000-0000-7000-8000-00000000000{n}" for n in range(3)]
    counted = Counted()
    counted.apply(*(asserted(n + 1, item, f"fact {n}") for n, item in enumerate(items)))
    counted.apply(*(embedded(n + 4, 1, f"fact {n}", item=item) for n, item in enumerate(items)))
    counted.reads.clear()
    counted.apply(*(revised(n + 7, item, 3, f"fact {n} again") for n, item in enumerate(items)))
    assert len(counted.reads) == 1
    assert len(counted.reads[0]) == 3
    assert counted.loads == []
    everything = Projected().apply(*(asserted(n + 1, item, f"fact {n}")
                                     for n, item in enumerate(items)))
    everything.apply(*(embedded(n + 4, 1, f"fact {n}", item=item)
                       for n, item in enumerate(items)))
    everything.apply(*(revised(n + 7, item, 3, f"fact {n} again")
                       for n, item in enumerate(items)))
    assert counted.snapshot(items) == everything.snapshot(items)


def test_a_full_budget_keeps_what_it_holds_so_a_cycle_through_more_items_misses_only_the_rest(
        ) -> None:
    items = [f"0190a000-0000-7000-8000-00000000000{n}" for n in range(3)]
    first = compact(Projected().apply(asserted(1, items[0], "fact 0")).fold._items[
        (TENANT, items[0])])
    assert first is not None
    counted = Counted(kept_bytes=len(first) + ENTRY_BYTES)  # room for one item only
    counted.apply(*(asserted(n + 1, item, f"fact {n}") for n, item in enumerate(items)))
    for round_ in range(2, 4):
        for n, item in enumerate(items):
            counted.apply(revised(10 * round_ + n, item, round_, f"fact {n} v{round_}"))
    # the first item was kept and came back each round; the others, not kept, were read
    assert sorted(set(counted.loads)) == items[1:]
    assert counted.loads.count(items[1]) == counted.loads.count(items[2]) == 2
    assert len(counted.fold.kept) == 1


def test_an_erased_subjects_kept_items_go_and_others_stay() -> None:
    alice = {**asserted(1, ALICE, "Alice likes tea"), "subject_id": "subject-a"}
    bob = asserted(2, BOB, "Bob likes coffee")
    counted = Counted().apply(alice, bob)
    assert len(counted.fold.kept) == 2
    counted.fold.forget_subject(TENANT, "subject-a")
    assert len(counted.fold.kept) == 1
    counted.apply(revised(3, BOB, 2, "Bob likes tea"))
    assert counted.loads == []
    counted.apply(revised(4, ALICE, 2, "Alice likes water"))
    assert counted.loads == [ALICE]


def test_forgetting_everything_drops_the_kept_items_too() -> None:
    counted = Counted().apply(asserted(1, ALICE, "Alice likes tea"))
    assert len(counted.fold.kept) == 1
    assert counted.fold.kept.used > ENTRY_BYTES
    counted.fold.forget()
    assert (len(counted.fold.kept), counted.fold.kept.used) == (0, 0)


@settings(max_examples=100, deadline=None)
@given(steps=histories, sizes=st.lists(st.integers(1, 4), min_size=1, max_size=12),
       rewind=st.floats(0, 1))
def test_any_history_in_any_batches_with_no_cache_leaves_exactly_the_same_points(
        steps: list[Any], sizes: list[int], rewind: float) -> None:
    documents = history(steps)
    counted, start = Counted(), 0
    for size in sizes * len(documents):
        if start >= len(documents):
            break
        counted.apply(*documents[start:start + size])
        start += size
    counted.apply(*documents[int(rewind * len(documents)):])  # a redelivered suffix
    assert counted.snapshot() == project(*documents).snapshot(ITEMS)


def test_kept_rows_keep_microseconds_of_valid_time() -> None:
    instant = at(2020) + timedelta(microseconds=123_457)
    document = envelope(1, "memory.asserted", {"kind": "fact", "content": "to the micro"},
                        version=1, recorded=at(2025, 1), valid_from=instant)
    item = Projected().apply(document).fold._items[(TENANT, ALICE)]
    blob = compact(item)
    assert blob is not None
    assert expand(blob).rows[0][0].valid_from == instant
