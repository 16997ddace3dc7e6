"""Bi-temporal rectangles, XTDB style. Pure: no I/O, no clock.

Each memory item has rows ("versions"), each true over a half-open valid interval
``[valid_from, valid_to)`` (``None`` = unbounded) and known over a half-open system interval
``[sys_from, sys_to)`` of global positions (``sys_to`` ``None`` = still current). An event at
position P never changes the past: it closes (``sys_to = P``) the current rows it overlaps in
valid time, re-inserts the parts of them it does not cover, and inserts its own piece. So no two
current rows of an item overlap in valid time, and every state ever known can be read back.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

Attrs = tuple[tuple[str, Any], ...]
"""An item's attributes as sorted (name, value) pairs: comparable, and not mutated in place
(a triple stays a mapping, as read models return it; nothing hashes attributes)."""


def attrs_of(values: dict[str, Any]) -> Attrs:
    return tuple(sorted([(k, tuple(v) if type(v) is list else v) for k, v in values.items()]))


@dataclass(frozen=True, init=False)
class Version:
    """One rectangle: ``attrs`` were true over [valid_from, valid_to), known over
    [sys_from, sys_to). ``row_id`` is the store's id once written (``None`` before)."""

    valid_from: datetime
    valid_to: datetime | None
    sys_from: int
    sys_to: int | None
    attrs: Attrs
    cause: Attrs = ()
    row_id: int | None = field(default=None, compare=False)

    def __init__(self, valid_from: datetime, valid_to: datetime | None, sys_from: int,
                 sys_to: int | None, attrs: Attrs, cause: Attrs = (),
                 row_id: int | None = None) -> None:
        # The generated __init__ of a frozen dataclass sets each field through
        # object.__setattr__: 3x slower, and a fold makes a few of these per event.
        self.__dict__.update(valid_from=valid_from, valid_to=valid_to, sys_from=sys_from,
                             sys_to=sys_to, attrs=attrs, cause=cause, row_id=row_id)

    def overlaps(self, start: datetime, end: datetime | None) -> bool:
        return (end is None or self.valid_from < end) and (
            self.valid_to is None or start < self.valid_to)

    def contains(self, instant: datetime) -> bool:
        return self.valid_from <= instant and (self.valid_to is None or instant < self.valid_to)

    def known_at(self, position: int) -> bool:
        return self.sys_from <= position and (self.sys_to is None or position < self.sys_to)


class Change(NamedTuple):
    """What one event does to an item's rows: ``closed`` rows get ``sys_to`` = the event's
    position; ``inserted`` rows are new (current). A named tuple: a fold makes one per event
    (a frozen dataclass took several times as long to build)."""

    closed: tuple[Version, ...]
    inserted: tuple[Version, ...]


def put(current: Sequence[Version], start: datetime, end: datetime | None, attrs: Attrs,
        position: int, cause: Attrs = ()) -> Change:
    """``attrs`` hold over [start, end) from now on (an assertion, or a full correction). An
    empty interval changes nothing."""
    if _empty(start, end):
        return Change((), ())
    closed, kept = _cut(current, start, end, position, cause)
    piece = Version(start, end, position, None, attrs, cause)
    return Change(closed, (*kept, piece))


def patch(current: Sequence[Version], start: datetime, end: datetime | None,
          changes: dict[str, Any], position: int, cause: Attrs = ()) -> Change:
    """Change some attributes over [start, end), where the item was true; elsewhere (before it
    was asserted, after it was retracted) nothing is created. An empty interval changes
    nothing."""
    if _empty(start, end):
        return Change((), ())
    closed, kept = _cut(current, start, end, position, cause)
    pieces = [Version(max(r.valid_from, start), _min_end(r.valid_to, end), position, None,
                      _merge(r.attrs, changes), cause) for r in closed]
    return Change(closed, (*kept, *pieces))


def end_at(current: Sequence[Version], instant: datetime, position: int, cause: Attrs = ()
           ) -> Change:
    """The item stops being true at ``instant`` (a retraction): valid time is closed, never
    erased; what was known before stays readable as of earlier positions."""
    closed, kept = _cut(current, instant, None, position, cause)
    return Change(closed, kept)


def apply(current: Sequence[Version], change: Change) -> list[Version]:
    """The current rows after ``change`` (closed rows are recognised by identity: pass the
    very rows the change was computed from)."""
    gone = {id(r) for r in change.closed}
    return sorted([r for r in current if id(r) not in gone] + list(change.inserted),
                  key=lambda r: r.valid_from)


def as_of(rows: Iterable[Version], valid_at: datetime, position: int) -> Version | None:
    """The row true at ``valid_at`` as known at ``position`` (at most one exists)."""
    for row in rows:
        if row.known_at(position) and row.contains(valid_at):
            return row
    return None


def _cut(current: Sequence[Version], start: datetime, end: datetime | None, position: int,
         cause: Attrs) -> tuple[tuple[Version, ...], tuple[Version, ...]]:
    """The current rows overlapping [start, end), and the remainders of them outside it (new
    rows from ``position``, made by the event ``cause``)."""
    # ``Version.overlaps``, inline: a fold calls this for every change of an item
    closed = tuple([r for r in current if (end is None or r.valid_from < end)
                    and (r.valid_to is None or start < r.valid_to)])
    kept: list[Version] = []
    for row in closed:
        if row.valid_from < start:
            kept.append(Version(row.valid_from, start, position, None, row.attrs, cause))
        if end is not None and (row.valid_to is None or end < row.valid_to):
            kept.append(Version(end, row.valid_to, position, None, row.attrs, cause))
    return closed, tuple(kept)


def _empty(start: datetime, end: datetime | None) -> bool:
    # Possible in the log: a valid_to before the recording time with valid_from left to
    # default to it. Such an event holds nowhere in valid time.
    return end is not None and end <= start


def _min_end(a: datetime | None, b: datetime | None) -> datetime | None:
    if a is None:
        return b
    return a if b is None else min(a, b)


def _merge(attrs: Attrs, changes: dict[str, Any]) -> Attrs:
    merged = dict(attrs)
    merged.update({k: tuple(v) if isinstance(v, list) else v for k, v in changes.items()})
    if len(merged) == len(attrs):  # the usual case: no new name, the order still holds
        return tuple(merged.items())
    return tuple(sorted(merged.items()))
