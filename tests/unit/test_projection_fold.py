"""The read models as a pure fold of envelope documents: a fact that changed, was recorded late
and then corrected; retraction, supersession, archiving, redelivery and the change log."""

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from memledger_platform.events import VECTOR, decode
from memledger_platform.readmodel.projection import Projection
from memledger_platform.readmodel.temporal import Version, as_of

TENANT, SPACE, ACTOR = "acme", "notes", "tester"
ALICE = "0190a000-0000-7000-8000-0000000000a1"
SUCCESSOR = "0190a000-0000-7000-8000-0000000000a2"
KEY = (TENANT, ALICE)
ACME, GLOBEX = "Alice works at Acme", "Alice works at Globex"
MID_2021 = datetime(2021, 7, 1, tzinfo=UTC)

Rectangle = tuple[int, int | None, str, int, int | None]
"""A row as (valid_from year, valid_to year or None, content, sys_from, sys_to)."""


def envelope(position: int, event_type: str, payload: dict[str, Any], *, recorded: str,
             valid_from: str | None = None, valid_to: str | None = None) -> dict[str, Any]:
    """A committed envelope document, as stored, relayed or exported."""
    return {"global_position": position, "recorded_at": recorded, "event_type": event_type,
            "event_id": f"evt-{position}", "tenant_id": TENANT, "space_id": SPACE,
            "actor": ACTOR, "session_id": None, "agent_id": None, "valid_from": valid_from,
            "valid_to": valid_to, "payload": payload}


def fold(*documents: dict[str, Any]) -> Projection:
    projection = Projection()
    for document in documents:
        projection.apply(decode(document))
    return projection


def content(version: Version | None) -> Any:
    assert version is not None
    return dict(version.attrs)["content"]


def rectangles(rows: Iterable[Version]) -> list[Rectangle]:
    return [(r.valid_from.year, None if r.valid_to is None else r.valid_to.year, content(r),
             r.sys_from, r.sys_to) for r in sorted(rows, key=lambda r: (r.valid_from, r.sys_from))]


def at(year: int, month: int = 1) -> datetime:
    return datetime(year, month, 1, tzinfo=UTC)


ASSERTED = envelope(1, "memory.asserted", {
    "item_id": ALICE, "kind": "fact", "content": ACME, "tags": ["work"], "importance": 0.5},
    recorded="2025-01-10T09:00:00Z", valid_from="2020-01-01T00:00:00Z")
MOVED_LATE = envelope(2, "memory.revised", {
    "item_id": ALICE, "content": GLOBEX, "reason": "moved, recorded late"},
    recorded="2025-02-01T09:00:00Z", valid_from="2022-01-01T00:00:00Z")
CORRECTED = envelope(3, "memory.revised", {
    "item_id": ALICE, "content": GLOBEX, "reason": "the move was in 2021"},
    recorded="2025-03-01T09:00:00Z", valid_from="2021-01-01T00:00:00Z",
    valid_to="2022-01-01T00:00:00Z")
STORY = (ASSERTED, MOVED_LATE, CORRECTED)


def later(position: int, event_type: str, payload: dict[str, Any], **times: str
          ) -> dict[str, Any]:
    """An event after the story, recorded in 2025-0<position>."""
    return envelope(position, event_type, {"item_id": ALICE, **payload},
                    recorded=f"2025-0{position}-01T09:00:00Z", **times)


# --- the worked scenario: a changing fact, recorded late, then corrected --------------------

def test_as_we_knew_it_at_position_two_alice_was_still_at_acme_in_mid_2021() -> None:
    rows = fold(*STORY).rows[KEY]
    assert content(as_of(rows, MID_2021, 2)) == ACME


def test_after_the_correction_at_position_three_alice_was_at_globex_in_mid_2021() -> None:
    rows = fold(*STORY).rows[KEY]
    assert content(as_of(rows, MID_2021, 3)) == GLOBEX


def test_before_the_late_record_alice_was_known_at_acme_ever_after() -> None:
    rows = fold(*STORY).rows[KEY]
    assert content(as_of(rows, at(2030), 1)) == ACME
    assert content(as_of(rows, at(2030), 2)) == GLOBEX


def test_nothing_was_true_before_2020_as_known_at_any_position() -> None:
    rows = fold(*STORY).rows[KEY]
    assert all(as_of(rows, at(2019), position) is None for position in (1, 2, 3))


def test_history_keeps_every_rectangle_and_closed_rows_carry_the_position_that_closed_them(
        ) -> None:
    assert rectangles(fold(*STORY).rows[KEY]) == [
        (2020, None, ACME, 1, 2),
        (2020, 2022, ACME, 2, 3),
        (2020, 2021, ACME, 3, None),
        (2021, 2022, GLOBEX, 3, None),
        (2022, None, GLOBEX, 2, None)]


def test_the_current_rows_tile_valid_time_without_overlap() -> None:
    current = fold(*STORY).current(KEY)
    assert [(r.valid_from, r.valid_to) for r in sorted(current, key=lambda r: r.valid_from)
            ] == [(at(2020), at(2021)), (at(2021), at(2022)), (at(2022), None)]


def test_a_revision_keeps_the_attributes_it_does_not_change() -> None:
    globex = as_of(fold(*STORY).rows[KEY], MID_2021, 3)
    assert globex is not None
    assert dict(globex.attrs)["tags"] == ("work",)
    assert dict(globex.attrs)["kind"] == "fact"


def test_each_row_names_the_event_that_made_it() -> None:
    globex = as_of(fold(*STORY).rows[KEY], MID_2021, 3)
    assert globex is not None
    assert dict(globex.cause) == {"actor": ACTOR, "event_id": "evt-3",
                                  "event_type": "memory.revised"}


def test_revisions_count_as_versions_of_the_item() -> None:
    item = fold(*STORY).items[KEY]
    assert (item["version"], item["created_position"], item["updated_position"]) == (3, 1, 3)
    assert item["status"] == "active"


# --- retraction, supersession, archiving ----------------------------------------------------

def test_a_retraction_with_valid_until_ends_the_fact_then_and_marks_the_item() -> None:
    retracted = later(4, "memory.retracted", {"valid_until": "2024-01-01T00:00:00+00:00"})
    projection = fold(*STORY, retracted)
    rows = projection.rows[KEY]
    assert as_of(rows, at(2025), 4) is None
    assert content(as_of(rows, at(2023), 4)) == GLOBEX
    assert content(as_of(rows, at(2025), 3)) == GLOBEX
    assert projection.items[KEY]["status"] == "retracted"
    assert projection.items[KEY]["retracted_position"] == 4


def test_a_retraction_without_valid_until_ends_the_fact_when_it_was_recorded() -> None:
    projection = fold(*STORY, later(4, "memory.retracted", {"reason": "left"}))
    rows = projection.rows[KEY]
    assert content(as_of(rows, at(2025, 3), 4)) == GLOBEX
    assert as_of(rows, at(2025, 5), 4) is None


def test_a_retraction_before_the_item_was_true_closes_all_its_rows() -> None:
    projection = fold(*STORY, later(4, "memory.retracted", {"valid_until": "2019-01-01T00:00:00Z"}))
    assert projection.current(KEY) == []
    assert len(projection.rows[KEY]) == 5


def test_a_superseded_item_stops_being_true_when_recorded_and_names_its_successor() -> None:
    projection = fold(*STORY, later(4, "memory.superseded", {
        "superseded_by": SUCCESSOR, "reason": "merged"}))
    item = projection.items[KEY]
    assert (item["status"], item["superseded_by"], item["superseded_position"]) == (
        "superseded", SUCCESSOR, 4)
    rows = projection.rows[KEY]
    assert content(as_of(rows, at(2025, 3), 4)) == GLOBEX
    assert as_of(rows, at(2025, 5), 4) is None


def test_archiving_leaves_the_rows_alone_and_records_its_position() -> None:
    before = fold(*STORY).rows[KEY]
    projection = fold(*STORY, later(4, "memory.archived", {"reason": "retention"}))
    assert projection.rows[KEY] == before
    assert projection.items[KEY]["archived_position"] == 4
    assert projection.items[KEY]["status"] == "archived"


# --- delivery and the change log ------------------------------------------------------------

@pytest.mark.parametrize("again", [MOVED_LATE, CORRECTED], ids=["older", "same position"])
def test_a_redelivered_event_is_ignored(again: dict[str, Any]) -> None:
    projection = fold(*STORY)
    rows, changes = list(projection.rows[KEY]), list(projection.changes)
    projection.apply(decode(again))
    assert projection.rows[KEY] == rows
    assert projection.changes == changes
    assert projection.position == 3


def test_the_change_log_gets_one_row_per_event_with_the_item_as_subject() -> None:
    changes = fold(*STORY, later(4, "memory.archived", {"reason": "retention"})).changes
    assert [(c["position"], c["subject"], c["event_type"]) for c in changes] == [
        (1, ALICE, "memory.asserted"), (2, ALICE, "memory.revised"),
        (3, ALICE, "memory.revised"), (4, ALICE, "memory.archived")]


def test_a_change_row_carries_both_times_and_the_reason() -> None:
    change = fold(*STORY).changes[2]
    assert change["reason"] == "the move was in 2021"
    assert change["recorded_at"] == datetime(2025, 3, 1, 9, tzinfo=UTC)
    assert (change["valid_from"], change["valid_to"]) == (at(2021), at(2022))


def test_an_event_without_a_handler_still_gets_a_change_row_without_its_vector() -> None:
    embedded = later(4, "memory.embedded", {"item_version": 3, "model": "m", "dims": 2,
                                            "vector": [0.1, 0.2]})
    projection = fold(*STORY, embedded)
    assert projection.changes[-1]["subject"] == ALICE
    assert "vector" not in projection.changes[-1]["payload"]
    assert projection.position == 4


def test_a_stored_embedding_is_parsed_without_its_vector_which_is_never_opened() -> None:
    stored = {k: v for k, v in later(4, "memory.embedded", {
        "item_version": 3, "model": "m", "vector": "ml-enc:v1:key-1:AAAA"}).items()
        if k not in ("global_position", "recorded_at")}  # the commit fields come apart
    opened: list[dict[str, Any]] = []

    def opener(parsed: dict[str, Any]) -> dict[str, Any]:
        opened.append(dict(parsed["payload"]))
        return parsed

    event = decode(orjson.dumps(stored), position=4, recorded_at=at(2025, 4), opener=opener,
                   skip=VECTOR)

    assert opened == [{"item_id": ALICE, "item_version": 3, "model": "m"}]
    assert event.payload == opened[0]


def test_feedback_and_reaffirmation_become_one_signal_row_each_without_the_comment() -> None:
    rated = later(4, "feedback.recorded", {"feedback_id": SUCCESSOR, "signal": "rating",
                                           "rating": 2, "comment": "personal words"})
    used = later(5, "feedback.recorded", {"feedback_id": ALICE, "signal": "used"})
    reaffirmed = later(6, "memory.reaffirmed", {})
    projection = fold(*STORY, rated, used, reaffirmed)
    assert [(s["position"], s["item_id"], s["signal"], s["rating"])
            for s in projection.signals] == [(4, ALICE, "rating", 2), (5, ALICE, "used", None),
                                             (6, ALICE, "reaffirmed", None)]
    assert "comment" not in projection.signals[0]


def test_a_retrieval_is_the_subject_of_its_change_row() -> None:
    retrieval = envelope(4, "retrieval.performed", {"retrieval_id": SUCCESSOR, "results": []},
                         recorded="2025-04-01T09:00:00Z")
    assert fold(*STORY, retrieval).changes[-1]["subject"] == SUCCESSOR


def test_event_from_decodes_iso_times_into_aware_datetimes() -> None:
    event = decode(CORRECTED)
    assert event.recorded_at == datetime(2025, 3, 1, 9, tzinfo=UTC)
    assert (event.valid_from, event.valid_to) == (at(2021), at(2022))
    assert decode(MOVED_LATE).valid_to is None


# --- a valid interval that holds nowhere ---------------------------------------------------

def test_a_revision_bounded_only_by_a_valid_to_before_it_was_recorded_changes_no_row() -> None:
    # valid_from defaults to recorded_at (2025-04), so the interval [2025-04, 2023) is empty.
    until_2023 = later(4, "memory.revised", {"content": "Alice worked at Globex, part time"},
                       valid_to="2023-01-01T00:00:00Z")
    before = fold(*STORY).rows[KEY]
    projection = fold(*STORY, until_2023)
    assert projection.rows[KEY] == before
    assert projection.changes[-1]["position"] == 4
