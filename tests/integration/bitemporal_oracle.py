"""An independent, point-wise model of the bi-temporal memory items, written from the
documented contract alone (docs/adr/0005-read-models.md, docs/events.md): no rectangles, no
import of the projector or the query service.

The model keeps, for each item, the list of what each committed event did to it, and answers
"what does an as-of read at (valid instant v, position p) show?" by folding the events up to p
at the single instant v:

- ``memory.asserted`` puts its attributes at v if v lies in ``[valid_from or recorded_at,
  valid_to)``;
- ``memory.revised`` patches the named attributes at v if v lies in its interval (default
  from ``recorded_at``) and the item was true at v;
- ``memory.promoted`` sets the layer at every v where the item was true;
- ``memory.retracted`` and ``memory.superseded`` end the item at every v at or after
  ``valid_until`` (default ``recorded_at``);
- an item's status as of p is the last of retracted / superseded / archived by then;
  archived items leave plain listings from the archive's position on.

It also decides which commands the write side must accept (the documented refusals) and
which events each accepted command records, so the test can compare both with the system.
"""

from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import pairwise
from typing import Any

from memledger_schemas import commands as c

ATTRIBUTES = ("kind", "content", "triple", "confidence", "importance", "tags", "layer")
"""The item attributes the model follows (what an item read shows besides its status)."""


@dataclass(frozen=True)
class Planned:
    """An event the model expects a command to record (``subject``: the item it is about)."""

    event_type: str
    subject: str
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    reason: str | None = None
    effect: dict[str, Any] = field(default_factory=dict)
    """What it does to its item: ``put``/``patch`` (attributes, over its valid interval or
    ``everywhere``), ``until`` (an end instant or ``None`` for the recording time), ``status``."""


@dataclass(frozen=True)
class Recorded:
    """A planned event once committed: its global position and recording time."""

    planned: Planned
    position: int
    recorded_at: datetime

    @property
    def start(self) -> datetime:
        return self.planned.valid_from or self.recorded_at


@dataclass
class Oracle:
    space: str
    now: datetime
    events: list[Recorded] = field(default_factory=list)
    status: dict[str, str] = field(default_factory=dict)
    """Each asserted item's status after every command so far (the write side's view)."""
    holders: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    """(subject, predicate) slot → (holding item, its object), for belief revision."""

    # --- the write side ----------------------------------------------------------------------

    def plan(self, command: c.CommandBase) -> list[Planned] | None:
        """The events ``command`` must record, or ``None`` if it must be refused."""
        valid_to = getattr(command, "valid_to", None)
        if valid_to is not None and getattr(command, "valid_from", None) is None and (
                valid_to <= self.now):
            return None  # valid_from defaults to now: the interval would be empty
        match command:
            case c.AssertMemory():
                return self._assert(command)
            case c.ReviseMemory():
                return self._revise(command)
            case c.RetractMemory():
                return self._end(command, "retracted", command.valid_until, command.reason)
            case c.SupersedeMemory():
                if str(command.superseded_by) not in self.status:
                    return None
                return self._end(command, "superseded", None, command.reason)
            case c.PromoteMemory():
                return self._active(command.item_id, "memory.promoted", command.reason,
                                    {"patch": {"layer": command.layer}, "everywhere": True})
            case c.ReaffirmMemory():
                return self._active(command.item_id, "memory.reaffirmed", command.reason, {})
            case c.ArchiveMemory():
                if self.status.get(str(command.item_id)) in (None, "archived"):
                    return None
                return [Planned("memory.archived", str(command.item_id), reason=command.reason,
                                effect={"status": "archived"})]
        raise TypeError(f"the model does not know {type(command).__name__}")

    def _assert(self, command: c.AssertMemory) -> list[Planned] | None:
        item = str(command.item_id)
        if item in self.status:
            return None
        attrs = {"kind": command.kind, "content": command.content,
                 "triple": command.triple.model_dump() if command.triple else None,
                 "confidence": command.confidence, "importance": command.importance,
                 "tags": list(command.tags), "layer": command.layer or "project"}
        planned = [Planned("memory.asserted", item, command.valid_from, command.valid_to,
                           effect={"put": attrs})]
        if command.triple is not None:  # single-valued by default: the slot changes hands
            planned += self._claim(item, command.triple, command.valid_from)
        return planned

    def _claim(self, item: str, triple: Any, valid_from: datetime | None) -> list[Planned]:
        slot = (triple.subject.casefold(), triple.predicate.casefold())
        claim = [Planned("triple.claimed", item)]
        held = self.holders.get(slot)
        if held is None or self.status[held[0]] != "active":
            return claim
        same = held[1].casefold() == triple.object.casefold()
        return [*claim, Planned("memory.superseded", held[0],
                                reason="restated" if same else "contradiction",
                                effect={"status": "superseded", "until": valid_from})]

    def _revise(self, command: c.ReviseMemory) -> list[Planned] | None:
        if self.status.get(str(command.item_id)) not in ("active", "superseded", "retracted"):
            return None
        changes = {name: getattr(command, name) for name in ATTRIBUTES
                   if getattr(command, name, None) is not None}
        if "tags" in changes:
            changes["tags"] = list(changes["tags"])
        return [Planned("memory.revised", str(command.item_id), command.valid_from,
                        command.valid_to, command.reason, {"patch": changes})]

    def _active(self, item: Any, event_type: str, reason: str | None,
                effect: dict[str, Any]) -> list[Planned] | None:
        if self.status.get(str(item)) != "active":
            return None
        return [Planned(event_type, str(item), reason=reason, effect=effect)]

    def _end(self, command: c.RetractMemory | c.SupersedeMemory, status: str,
             until: datetime | None, reason: str | None) -> list[Planned] | None:
        item = str(command.item_id)
        itself = isinstance(command, c.SupersedeMemory) and command.superseded_by == command.item_id
        if self.status.get(item) != "active" or itself:
            return None
        return [Planned(f"memory.{status}", item, reason=reason,
                        effect={"status": status, "until": until})]

    def commit(self, planned: list[Planned], recorded: list[Recorded]) -> None:
        """Take the events of one accepted command as the event store recorded them."""
        self.events += sorted(recorded, key=lambda r: r.position)
        for event in planned:
            if "put" in event.effect:
                self.status[event.subject] = "active"
                triple = event.effect["put"]["triple"]
                if triple is not None:
                    self.holders[(triple["subject"].casefold(), triple["predicate"].casefold())
                                 ] = (event.subject, triple["object"])
            if "status" in event.effect:
                self.status[event.subject] = event.effect["status"]

    # --- the read side -----------------------------------------------------------------------

    def items(self) -> list[str]:
        return sorted(self.status)

    def of(self, item: str, position: int) -> list[Recorded]:
        return [e for e in self.events if e.planned.subject == item and e.position <= position]

    def attrs_at(self, item: str, valid_at: datetime, position: int) -> dict[str, Any] | None:
        """The item's attributes true at ``valid_at`` as known at ``position`` (``None``: not
        true there, or not asserted yet)."""
        attrs: dict[str, Any] | None = None
        for event in self.of(item, position):
            effect, planned = event.planned.effect, event.planned
            inside = effect.get("everywhere") or (event.start <= valid_at and (
                planned.valid_to is None or valid_at < planned.valid_to))
            if "put" in effect and inside:
                attrs = dict(effect["put"])
            elif "patch" in effect and inside and attrs is not None:
                attrs = {**attrs, **effect["patch"]}
            elif "until" in effect and valid_at >= (effect["until"] or event.recorded_at):
                attrs = None
        return attrs

    def status_at(self, item: str, position: int) -> str | None:
        """The item's status as of ``position`` (``None`` if not asserted by then)."""
        status = None
        for event in self.of(item, position):
            if "put" in event.planned.effect:
                status = "active"
            status = event.planned.effect.get("status", status)
        return status

    def listed(self, valid_at: datetime, position: int, include_archived: bool
               ) -> dict[str, tuple[str, dict[str, Any]]]:
        """What a listing as of (``valid_at``, ``position``) shows: item → (status, attrs)."""
        found = {}
        for item in self.items():
            attrs, status = self.attrs_at(item, valid_at, position), self.status_at(item, position)
            if attrs is not None and status is not None and (
                    include_archived or status != "archived"):
                found[item] = (status, attrs)
        return found

    def instants(self) -> list[datetime]:
        """Every instant at which some item's valid-time answer may change: between two of
        them (and beyond the ends) every answer is constant."""
        found = set()
        for event in self.events:
            effect = event.planned.effect
            if "put" in effect or ("patch" in effect and not effect.get("everywhere")):
                found.add(event.start)
                if event.planned.valid_to is not None:
                    found.add(event.planned.valid_to)
            if "until" in effect:
                found.add(effect["until"] or event.recorded_at)
        return sorted(found)

    def probes(self) -> list[datetime]:
        """A valid instant in every piece of valid time the model distinguishes: each
        breakpoint, a point between each two, one before the first and one after the last."""
        points = self.instants()
        if not points:
            return [self.now]
        between = [a + (b - a) / 2 for a, b in pairwise(points)]
        return sorted({points[0] - timedelta(days=1), *points, *between,
                       points[-1] + timedelta(days=1)})

    def changes(self, after: int = 0, since: datetime | None = None) -> list[Recorded]:
        """The change feed: every event strictly after ``after`` (and ``since``)."""
        return [e for e in self.events if e.position > after and (
            since is None or e.recorded_at > since)]


def position_at(recorded: list[tuple[int, datetime]], instant: datetime) -> int:
    """The last position recorded at or before ``instant`` (0 if none), over (position,
    recorded_at) pairs in position order (recording times never decrease with position)."""
    index = bisect_right([at for _, at in recorded], instant)
    return recorded[index - 1][0] if index else 0


def constant_over(oracle: Oracle, start: datetime, end: datetime | None) -> Iterable[datetime]:
    """The instants at which to look to know every answer over [start, end): ``start`` and
    every breakpoint inside (answers change only at breakpoints)."""
    return [start, *(t for t in oracle.instants() if start < t and (end is None or t < end))]
