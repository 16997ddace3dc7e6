"""Bi-temporal rectangles: how put / patch / end_at cut an item's rows, and what stays readable."""

from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memledger_platform.readmodel import temporal
from memledger_platform.readmodel.temporal import (
    Attrs,
    Change,
    Version,
    as_of,
    attrs_of,
    end_at,
    patch,
    put,
)

OLD, NEW = attrs_of({"content": "old"}), attrs_of({"content": "new"})
CAUSE = (("event_id", "evt-2"),)
FIRST, NEXT = 1, 2
"""Existing rows are known from position FIRST; the event under test is at position NEXT."""

Shape = tuple[int, int | None, str, int]
"""A current row as (valid_from year, valid_to year or None, content, sys_from)."""


def y(year: int) -> datetime:
    return datetime(year, 1, 1, tzinfo=UTC)


def span(end: int | None) -> datetime | None:
    return None if end is None else y(end)


def row(start: int, end: int | None, attrs: Attrs = OLD, sys_from: int = FIRST,
        sys_to: int | None = None) -> Version:
    return Version(y(start), span(end), sys_from, sys_to, attrs)


def content(version: Version) -> Any:
    return dict(version.attrs)["content"]


def shape(rows: Iterable[Version]) -> list[Shape]:
    return [(r.valid_from.year, None if r.valid_to is None else r.valid_to.year, content(r),
             r.sys_from) for r in rows]


def record(history: Sequence[Version], change: Change, position: int) -> list[Version]:
    """Every row ever known after ``change``: closed rows get ``sys_to``, none is deleted (what
    the projection does with a ``Change``)."""
    closed = {id(r) for r in change.closed}
    kept = [replace(r, sys_to=position) if id(r) in closed else r for r in history]
    return kept + list(change.inserted)


def overlapping(rows: Sequence[Version]) -> list[tuple[Version, Version]]:
    return [(a, b) for i, a in enumerate(rows) for b in rows[i + 1:]
            if a.overlaps(b.valid_from, b.valid_to)]


# --- rectangle cutting: one new assertion [s, e) against one current row [S, E) ------------

CUTS = [
    pytest.param((2020, 2024), (2010, 2015), False,
                 [(2010, 2015, "new", NEXT), (2020, 2024, "old", FIRST)],
                 id="entirely before"),
    pytest.param((2020, 2024), (2026, 2028), False,
                 [(2020, 2024, "old", FIRST), (2026, 2028, "new", NEXT)],
                 id="entirely after"),
    pytest.param((2020, 2024), (2018, 2022), True,
                 [(2018, 2022, "new", NEXT), (2022, 2024, "old", NEXT)],
                 id="overlapping its start"),
    pytest.param((2020, 2024), (2022, 2026), True,
                 [(2020, 2022, "old", NEXT), (2022, 2026, "new", NEXT)],
                 id="overlapping its end"),
    pytest.param((2020, 2024), (2020, 2022), True,
                 [(2020, 2022, "new", NEXT), (2022, 2024, "old", NEXT)],
                 id="equal start, shorter"),
    pytest.param((2020, 2024), (2022, 2024), True,
                 [(2020, 2022, "old", NEXT), (2022, 2024, "new", NEXT)],
                 id="equal end, later start"),
    pytest.param((2020, 2024), (2020, 2024), True,
                 [(2020, 2024, "new", NEXT)],
                 id="same start and end replaces it"),
    pytest.param((2020, 2024), (2018, 2026), True,
                 [(2018, 2026, "new", NEXT)],
                 id="covering it"),
    pytest.param((2020, 2024), (2021, 2023), True,
                 [(2020, 2021, "old", NEXT), (2021, 2023, "new", NEXT),
                  (2023, 2024, "old", NEXT)],
                 id="covered by it splits it in three"),
    pytest.param((2020, 2024), (2016, 2020), False,
                 [(2016, 2020, "new", NEXT), (2020, 2024, "old", FIRST)],
                 id="touching: new end is its start"),
    pytest.param((2020, 2024), (2024, 2026), False,
                 [(2020, 2024, "old", FIRST), (2024, 2026, "new", NEXT)],
                 id="touching: new start is its end"),
    # open-ended rows (valid_to None)
    pytest.param((2020, None), (2010, 2015), False,
                 [(2010, 2015, "new", NEXT), (2020, None, "old", FIRST)],
                 id="open row, new entirely before"),
    pytest.param((2020, None), (2016, 2020), False,
                 [(2016, 2020, "new", NEXT), (2020, None, "old", FIRST)],
                 id="open row, new touching its start"),
    pytest.param((2020, None), (2018, 2022), True,
                 [(2018, 2022, "new", NEXT), (2022, None, "old", NEXT)],
                 id="open row, new overlapping its start"),
    pytest.param((2020, None), (2022, 2023), True,
                 [(2020, 2022, "old", NEXT), (2022, 2023, "new", NEXT),
                  (2023, None, "old", NEXT)],
                 id="open row, new strictly inside"),
    pytest.param((2020, None), (2022, None), True,
                 [(2020, 2022, "old", NEXT), (2022, None, "new", NEXT)],
                 id="open row, open new from a later start"),
    pytest.param((2020, None), (2020, None), True,
                 [(2020, None, "new", NEXT)],
                 id="open row, same open period replaces it"),
    pytest.param((2020, None), (2018, None), True,
                 [(2018, None, "new", NEXT)],
                 id="open row, open new covering it"),
    pytest.param((2020, 2024), (2022, None), True,
                 [(2020, 2022, "old", NEXT), (2022, None, "new", NEXT)],
                 id="bounded row, open new overlapping its end"),
    pytest.param((2020, 2024), (2024, None), False,
                 [(2020, 2024, "old", FIRST), (2024, None, "new", NEXT)],
                 id="bounded row, open new touching its end"),
]


@pytest.mark.parametrize(("existing", "new", "closes_it", "after"), CUTS)
def test_a_put_closes_exactly_the_overlapped_row_and_leaves_these_current_rows(
        existing: tuple[int, int | None], new: tuple[int, int | None], closes_it: bool,
        after: list[Shape]) -> None:
    old = row(*existing)
    change = put([old], y(new[0]), span(new[1]), NEW, NEXT, CAUSE)
    assert change.closed == ((old,) if closes_it else ())
    current = temporal.apply([old], change)
    assert shape(current) == after
    assert all(r.sys_to is None for r in current)


def test_a_put_closes_the_old_row_by_identity_and_never_edits_it() -> None:
    old = row(2020, 2024)
    change = put([old], y(2021), y(2023), NEW, NEXT, CAUSE)
    assert change.closed[0] is old
    assert old.sys_to is None


def test_every_row_an_event_inserts_carries_its_cause_the_remainders_included() -> None:
    change = put([row(2020, None)], y(2021), y(2023), NEW, NEXT, CAUSE)
    assert len(change.inserted) == 3
    assert all(r.cause == CAUSE for r in change.inserted)


def test_a_put_into_an_item_with_no_rows_inserts_just_the_new_piece() -> None:
    change = put([], y(2020), None, NEW, FIRST)
    assert change.closed == ()
    assert shape(change.inserted) == [(2020, None, "new", FIRST)]


def test_a_put_spanning_two_rows_closes_both_and_keeps_their_outer_remainders() -> None:
    left, right = row(2018, 2021), row(2021, None, attrs_of({"content": "mid"}))
    change = put([left, right], y(2020), y(2022), NEW, NEXT)
    assert change.closed == (left, right)
    assert shape(temporal.apply([left, right], change)) == [
        (2018, 2020, "old", NEXT), (2020, 2022, "new", NEXT), (2022, None, "mid", NEXT)]


@pytest.mark.parametrize(("start", "end"), [(2022, 2022), (2023, 2021)],
                         ids=["empty", "inverted"])
def test_a_put_or_patch_over_an_interval_that_holds_nowhere_changes_nothing(
        start: int, end: int) -> None:
    rows = [row(2020, None)]
    assert put(rows, y(start), y(end), NEW, NEXT) == Change((), ())
    assert patch(rows, y(start), y(end), {"content": "new"}, NEXT) == Change((), ())


# --- interval edges: both axes are half-open ------------------------------------------------

def test_a_row_contains_its_valid_from_but_not_its_valid_to() -> None:
    version = row(2020, 2024)
    assert version.contains(y(2020))
    assert version.contains(y(2024) - timedelta(microseconds=1))
    assert not version.contains(y(2024))
    assert not version.contains(y(2020) - timedelta(microseconds=1))


def test_an_open_row_contains_every_later_instant() -> None:
    assert row(2020, None).contains(datetime(9999, 12, 31, tzinfo=UTC))


def test_a_row_is_known_at_its_sys_from_but_not_at_its_sys_to() -> None:
    version = row(2020, None, sys_from=3, sys_to=7)
    assert version.known_at(3)
    assert version.known_at(6)
    assert not version.known_at(7)
    assert not version.known_at(2)


def test_a_current_row_is_known_at_every_later_position() -> None:
    assert row(2020, None, sys_from=3).known_at(10**9)


def test_as_of_at_a_valid_boundary_picks_the_later_row() -> None:
    rows = [row(2020, 2022), row(2022, None, NEW)]
    assert content(_found(as_of(rows, y(2022), FIRST))) == "new"
    assert content(_found(as_of(rows, y(2022) - timedelta(microseconds=1), FIRST))) == "old"


def test_as_of_at_a_system_boundary_picks_the_row_known_from_that_position() -> None:
    rows = [row(2020, None, sys_to=NEXT), row(2020, None, NEW, sys_from=NEXT)]
    assert content(_found(as_of(rows, y(2021), NEXT))) == "new"
    assert content(_found(as_of(rows, y(2021), NEXT - 1))) == "old"


def test_as_of_finds_nothing_before_the_item_was_true_or_known() -> None:
    rows = [row(2020, None, sys_from=3)]
    assert as_of(rows, y(2019), 3) is None
    assert as_of(rows, y(2021), 2) is None


def _found(version: Version | None) -> Version:
    assert version is not None
    return version


# --- patch: change some attributes where the item was true ---------------------------------

def test_a_patch_changes_attributes_only_where_the_item_was_true() -> None:
    rows = [row(2020, 2022), row(2024, None)]
    change = patch(rows, y(2021), y(2025), {"content": "new"}, NEXT, CAUSE)
    assert change.closed == tuple(rows)
    current = temporal.apply(rows, change)
    assert shape(current) == [(2020, 2021, "old", NEXT), (2021, 2022, "new", NEXT),
                              (2024, 2025, "new", NEXT), (2025, None, "old", NEXT)]
    assert as_of(current, y(2023), NEXT) is None


def test_a_patch_keeps_the_attributes_it_does_not_change() -> None:
    old = row(2020, None, attrs_of({"content": "old", "importance": 0.5, "tags": ["a"]}))
    change = patch([old], y(2020), None, {"importance": 0.9}, NEXT)
    assert [dict(r.attrs) for r in change.inserted] == [
        {"content": "old", "importance": 0.9, "tags": ("a",)}]


def test_a_patch_splits_a_row_it_covers_only_in_part() -> None:
    old = row(2020, None)
    change = patch([old], y(2022), y(2023), {"content": "new"}, NEXT)
    assert shape(temporal.apply([old], change)) == [
        (2020, 2022, "old", NEXT), (2022, 2023, "new", NEXT), (2023, None, "old", NEXT)]


def test_a_patch_where_the_item_was_never_true_changes_nothing() -> None:
    assert patch([row(2020, 2022)], y(2023), None, {"content": "new"}, NEXT) == Change((), ())
    assert patch([], y(2020), None, {"content": "new"}, NEXT) == Change((), ())


def test_a_patch_freezes_list_values_so_attrs_stay_comparable() -> None:
    change = patch([row(2020, None)], y(2020), None, {"tags": ["x", "y"]}, NEXT)
    assert dict(change.inserted[0].attrs)["tags"] == ("x", "y")


# --- end_at: a retraction cuts valid time, never erases ------------------------------------

def test_end_at_keeps_the_left_remainder_and_closes_the_old_row() -> None:
    old = row(2020, None)
    change = end_at([old], y(2023), NEXT, CAUSE)
    assert change.closed == (old,)
    assert shape(change.inserted) == [(2020, 2023, "old", NEXT)]


def test_end_at_never_deletes_what_was_known_before() -> None:
    old = row(2020, None)
    history = record([old], end_at([old], y(2023), NEXT), NEXT)
    assert content(_found(as_of(history, y(2025), FIRST))) == "old"
    assert as_of(history, y(2025), NEXT) is None
    assert content(_found(as_of(history, y(2022), NEXT))) == "old"


def test_a_retraction_before_the_item_started_closes_everything() -> None:
    rows = [row(2020, 2022), row(2022, None, NEW)]
    change = end_at(rows, y(2019), NEXT)
    assert change == Change(tuple(rows), ())
    assert temporal.apply(rows, change) == []


def test_a_retraction_at_exactly_the_item_start_closes_everything() -> None:
    old = row(2020, None)
    assert end_at([old], y(2020), NEXT) == Change((old,), ())


def test_a_retraction_after_a_bounded_row_ended_leaves_it_alone() -> None:
    assert end_at([row(2020, 2022)], y(2022), NEXT) == Change((), ())


def test_a_retraction_closes_only_the_rows_it_cuts() -> None:
    early, late = row(2018, 2020), row(2020, None, NEW)
    change = end_at([early, late], y(2021), NEXT)
    assert change.closed == (late,)
    assert shape(temporal.apply([early, late], change)) == [
        (2018, 2020, "old", FIRST), (2020, 2021, "new", NEXT)]


# --- attrs ----------------------------------------------------------------------------------

def test_attrs_are_sorted_pairs_with_lists_frozen() -> None:
    assert attrs_of({"tags": ["a"], "content": "c"}) == (("content", "c"), ("tags", ("a",)))


def test_attrs_keep_a_triple_as_a_mapping_and_sources_as_a_sequence() -> None:
    attrs = dict(attrs_of({"triple": {"subject": "Alice", "predicate": "works_at",
                                      "object": "Acme"},
                           "sources": [{"type": "message", "ref": "m1"}]}))
    assert attrs["triple"] == {"subject": "Alice", "predicate": "works_at", "object": "Acme"}
    assert attrs["sources"] == ({"type": "message", "ref": "m1"},)


# --- invariants over any sequence of events -------------------------------------------------

BASE = y(2000)
Op = tuple[str, int, int | None]
"""(operation, start in days from BASE, length in days or None for open-ended; a length <= 0
makes an interval that holds nowhere)."""


def day(offset: int) -> datetime:
    return BASE + timedelta(days=offset)


ops = st.lists(st.tuples(st.sampled_from(["put", "patch", "end_at"]),
                         st.integers(0, 40), st.one_of(st.none(), st.integers(-3, 15))),
               min_size=1, max_size=12)


def step(current: Sequence[Version], op: Op, position: int) -> Change:
    kind, start, length = op
    end = None if length is None else day(start + length)
    value = f"v{position}"
    if kind == "put":
        return put(current, day(start), end, attrs_of({"content": value}), position)
    if kind == "patch":
        return patch(current, day(start), end, {"content": value}, position)
    return end_at(current, day(start), position)


def run(sequence: Sequence[Op]) -> tuple[list[Version], list[Version], list[list[Version]]]:
    """Apply ``sequence`` from position 1: (current rows, history, current rows after each)."""
    current: list[Version] = []
    history: list[Version] = []
    snapshots: list[list[Version]] = []
    for position, op in enumerate(sequence, start=1):
        change = step(current, op, position)
        current = temporal.apply(current, change)
        history = record(history, change, position)
        snapshots.append(current)
    return current, history, snapshots


@settings(max_examples=300, deadline=None)
@given(ops)
def test_no_two_current_rows_ever_overlap_in_valid_time(sequence: list[Op]) -> None:
    current, _, _ = run(sequence)
    assert overlapping(current) == []
    assert all(r.valid_to is None or r.valid_from < r.valid_to for r in current)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_every_closed_row_was_closed_after_it_was_known(sequence: list[Op]) -> None:
    _, history, _ = run(sequence)
    assert all(r.sys_to > r.sys_from for r in history if r.sys_to is not None)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_the_rows_known_at_any_position_never_overlap_in_valid_time(sequence: list[Op]
                                                                    ) -> None:
    _, history, _ = run(sequence)
    for position in range(len(sequence) + 1):
        assert overlapping([r for r in history if r.known_at(position)]) == []


@settings(max_examples=300, deadline=None)
@given(ops)
def test_what_was_known_at_a_position_never_changes_afterwards(sequence: list[Op]) -> None:
    current, history, snapshots = run(sequence)
    assert sorted((r for r in history if r.sys_to is None), key=lambda r: r.valid_from
                  ) == current
    for position, snapshot in enumerate(snapshots, start=1):
        known = [replace(r, sys_to=None) for r in history if r.known_at(position)]
        assert sorted(known, key=lambda r: r.valid_from) == snapshot
