"""COPY text lines: the rebuild writes the change log straight from events, and that line is
the one the projector writes from the fold's change rows."""

from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from memledger_platform.events import decode
from memledger_platform.readmodel.projection import Projection
from memledger_projector.core import copytext

RECORDED = "2025-01-10T09:00:00.123456Z"


def event(position: int, event_type: str, payload: dict[str, Any], **fields: Any
          ) -> dict[str, Any]:
    return {"global_position": position, "recorded_at": RECORDED, "event_type": event_type,
            "event_id": f"0190a000-0000-7000-8000-{position:012d}", "tenant_id": "acme",
            "space_id": "notes", "actor": "tester", "session_id": None, "agent_id": None,
            "valid_from": None, "valid_to": None, "payload": payload, **fields}


EVENTS = [
    event(1, "space.created", {"name": "Notes"}),
    event(2, "memory.asserted", {"item_id": "0190a000-0000-7000-8000-0000000000a1",
                                 "kind": "fact", "content": "tab\there, back\\slash"},
          valid_from="2020-01-01T00:00:00+05:30", actor="someone\twith a tab"),
    event(3, "memory.revised", {"item_id": "0190a000-0000-7000-8000-0000000000a1",
                                "content": "new\nline", "reason": "moved\\away"},
          valid_to="2030-01-01T00:00:00Z"),
    event(4, "memory.embedded", {"item_id": "0190a000-0000-7000-8000-0000000000a1",
                                 "vector": [0.5, 0.25], "model": "m"}),
    event(5, "memory.retracted", {"item_id": "0190a000-0000-7000-8000-0000000000a1",
                                  "reason": {"code": 7}}),
]


def test_a_change_line_made_from_an_event_is_the_line_of_its_change_row() -> None:
    projection = Projection()
    events = [decode(document) for document in EVENTS]
    for e in events:
        projection.apply(e)

    assert [copytext.change_line(e) for e in events] == [
        copytext.change_line_of(row) for row in projection.changes]


def test_a_change_line_escapes_free_text_and_leaves_the_vector_out() -> None:
    lines = [copytext.change_line(decode(document)) for document in EVENTS]

    assert b"someone\\twith a tab" in lines[1]
    assert b"moved\\\\away" in lines[2]
    assert b"vector" not in lines[3]
    assert all(line.count(b"\t") == 11 and line.endswith(b"\n") for line in lines)


@pytest.mark.parametrize("instant", [
    datetime(2025, 1, 10, 9, 0, tzinfo=UTC),
    datetime(2025, 1, 10, 9, 0, 0, 123456, tzinfo=ZoneInfo("Etc/UTC")),
    datetime(2025, 6, 1, 12, 30, tzinfo=ZoneInfo("Europe/Paris")),
    datetime(2020, 1, 1, tzinfo=timezone(timedelta(hours=-3, minutes=-30))),
    datetime(1890, 1, 1, tzinfo=ZoneInfo("Europe/Amsterdam")),  # an offset with seconds
    datetime(2020, 1, 1, 0, 0, 0, 5),
])
def test_an_instant_is_written_as_isoformat_writes_it(instant: datetime) -> None:
    assert copytext.iso(instant) == instant.isoformat().encode()


def test_an_items_rows_are_written_each_as_its_own_line_would_be() -> None:
    # Revisions over parts of the valid time cut rows in two (bounds shared between rows)
    # and leave an unbounded end; times in several zones, one an offset with seconds.
    item = "0190a000-0000-7000-8000-0000000000b2"
    history = [
        event(1, "memory.asserted", {"item_id": item, "kind": "fact", "content": "a"},
              valid_from="2020-01-01T00:00:00+05:30"),
        event(2, "memory.revised", {"item_id": item, "content": "b"},
              valid_from="2021-01-01T00:00:00Z", valid_to="2022-01-01T00:00:00-03:30"),
        event(3, "memory.revised", {"item_id": item, "content": "c", "tags": ["x"]},
              valid_from="1890-01-01T00:00:00+00:19:32"),
        event(4, "memory.retracted", {"item_id": item, "reason": "gone"}),
    ]
    projection = Projection(keep_changes=False)
    for document in history:
        projection.apply(decode(document))
    rows = projection.rows[("acme", item)]
    assert len(rows) > 6
    assert any(r.valid_to is None for r in rows)
    expected = [copytext.version_line(
        "acme", item, copytext.valid_range(r.valid_from, r.valid_to), r.sys_from, r.sys_to,
        copytext.attrs_json(r.attrs), copytext.attrs_json(r.cause)) for r in rows]
    assert list(copytext.version_lines(projection.rows)) == expected
