"""What the lifecycle scheduler learns beside its policies: themes and importance, as a pure
fold of events (with the ``LifecycleFold``'s items and vectors) and the commands it decides.

Themes (``themes``): every space whose policy sets ``theme_cosine`` is grouped again whenever
its memories changed; a theme that is new, or whose members or label changed, is recorded
(``record_theme``), and one that no longer holds is recorded with no members (dissolved).

Importance: an item's importance is learned from its signals, with the importance it was
written with (or revised to) as the prior, worth ``PRIOR_WEIGHT`` signals::

    learned = (PRIOR_WEIGHT * prior + positive) / (PRIOR_WEIGHT + positive + negative)

``positive``: uses, reaffirmations, ratings above 3 (half a signal per point above) and,
``RECALL_WEIGHT`` each, up to ``RECALL_CAP`` recalls (audited retrievals that showed it);
``negative``: "unused" and ratings below 3. It is recorded (``learn_importance``, with the
counts and the reason) when it moves by a rounding step from what the item has now.

Every decision is keyed by what it was decided from (positions in the log), so deciding again
after a restart repeats the same key and ingest records nothing twice.
"""

import hashlib
import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import numpy as np
import numpy.typing as npt

from memledger_lifecycle.fold import LifecycleFold
from memledger_lifecycle.items import ItemTable
from memledger_lifecycle.spill import VectorSpill, WordSpill
from memledger_lifecycle.themes import Member, Theme, themes
from memledger_platform.crypto import ERASED
from memledger_platform.events import Event
from memledger_platform.vectorindex.sparse import plain_words
from memledger_schemas import commands as c
from memledger_schemas.event_types import EventType
from memledger_schemas.events import MAX_THEME_MEMBERS, ImportanceSignals

EVENT_TYPES = (
    EventType.SPACE_POLICY_SET, EventType.MEMORY_ASSERTED, EventType.MEMORY_REVISED,
    EventType.MEMORY_REAFFIRMED, EventType.FEEDBACK_RECORDED, EventType.RETRIEVAL_PERFORMED,
    EventType.IMPORTANCE_LEARNED, EventType.MEMORY_EMBEDDED, EventType.MEMORY_RETRACTED,
    EventType.MEMORY_SUPERSEDED, EventType.MEMORY_ARCHIVED, EventType.MEMORY_MERGED,
    EventType.THEME_FORMED, EventType.THEME_UPDATED, EventType.SUBJECT_ERASED)
"""What this fold reads (with the lifecycle fold's own)."""

PRIOR_WEIGHT = 4.0
RECALL_WEIGHT = 0.25
RECALL_CAP = 20
STEP = 0.01
"""Learned importance is rounded to this, and recorded only when it moves by it."""
ACTOR = "memledger:lifecycle"
_SLACK = 1e-6
"""More than the array rounding can differ from ``Signals.importance``'s, so that judging
which items could move as arrays never misses one."""
_COLUMNS: dict[str, Any] = {
    "tenant": np.int32, "prior": np.float64, "learned": np.float64, "last": np.int64,
    "asserted": np.int8, "subject": np.int32, "words_at": np.int64, "words_len": np.int32}
"""Per item: ``learned`` NaN when none was recorded; ``words_len`` -1 when no words."""


@dataclass
class Signals:
    prior: float = 0.5
    learned: float | None = None
    used: int = 0
    unused: int = 0
    ratings: list[int] = field(default_factory=list)
    reaffirmed: int = 0
    recalled: int = 0
    last: int = 0
    """The position of the last signal or prior change counted."""

    def importance(self) -> float:
        up = sum((r - 3) / 2 for r in self.ratings if r > 3)
        down = sum((3 - r) / 2 for r in self.ratings if r < 3)
        positive = self.used + self.reaffirmed + up + RECALL_WEIGHT * min(self.recalled,
                                                                          RECALL_CAP)
        negative = self.unused + down
        learned = (PRIOR_WEIGHT * self.prior + positive) / (PRIOR_WEIGHT + positive + negative)
        return round(round(learned / STEP) * STEP, 6)

    def reason(self, learned: float) -> str:
        rated = f", rated {'/'.join(map(str, self.ratings))}" if self.ratings else ""
        return (f"learned from its signals: used {self.used}, unused {self.unused}{rated}, "
                f"reaffirmed {self.reaffirmed}, recalled {self.recalled}; prior "
                f"{self.prior:g} -> {learned:g}")


@dataclass
class Recorded:
    """A theme as its last event recorded it."""

    members: tuple[str, ...]
    label: str
    size: int
    position: int


@dataclass
class FormingFold:
    """Per item, what importance and themes need: the prior, the last signal's position and
    the learned value as columns, the counted signals (``counts``) only for items that have
    any, and the content's words in a ``WordSpill`` (``spill_dir``)."""

    spill_dir: str | None = None
    counts: dict[int, Signals] = field(default_factory=dict)
    """By row: the signals counted (their prior, learned and last are the columns')."""
    recorded: dict[tuple[str, str], dict[str, Recorded]] = field(default_factory=dict)
    """Themes by (tenant, space), then theme id."""
    changed: set[tuple[str, str]] = field(default_factory=set)
    """Spaces whose memories changed since their themes were last decided."""
    table: ItemTable = field(init=False)
    spilled: WordSpill = field(init=False)

    def __post_init__(self) -> None:
        self.table = ItemTable(VectorSpill(self.spill_dir), _COLUMNS)
        self.spilled = WordSpill(self.spill_dir)

    def apply(self, e: Event, subject_id: str | None = None) -> None:
        """Fold one event (after the ``LifecycleFold`` has); ``subject_id``: its data subject,
        when not the envelope's."""
        p = e.payload
        if "item_id" in p and e.event_type.startswith("memory."):
            self.changed.add((e.tenant_id, e.space_id))
        match e.event_type:
            case EventType.MEMORY_ASSERTED | EventType.MEMORY_REVISED:
                self._content(e, e.subject_id if subject_id is None else subject_id)
            case EventType.FEEDBACK_RECORDED:
                self._signal(e, p["signal"], p.get("rating"))
            case EventType.MEMORY_REAFFIRMED:
                self._signal(e, "reaffirmed")
            case EventType.RETRIEVAL_PERFORMED:
                for shown in sorted({r["ref"] for r in p.get("results") or ()}):
                    if self._asserted(e.tenant_id, shown):  # a memory, not a message
                        self._signal(e, "recalled", item=shown)
            case EventType.IMPORTANCE_LEARNED:
                self.table.set(self._at(e.tenant_id, str(p["item_id"])),
                               learned=float(p["importance"]))
            case EventType.THEME_FORMED | EventType.THEME_UPDATED:
                self._theme(e)
            case EventType.SUBJECT_ERASED:
                self._erased(e.tenant_id, str(p["subject_id"]))
            case EventType.SPACE_POLICY_SET:
                self.changed.add((e.tenant_id, e.space_id))

    def _at(self, tenant: str, item: str) -> int:
        row = self.table.row(tenant, item)
        if row is None:
            row = self.table.add(tenant, item, prior=0.5, learned=math.nan, words_len=-1)
        return row

    def _asserted(self, tenant: str, item: str) -> bool:
        row = self.table.row(tenant, item)
        return row is not None and bool(self.table.col["asserted"][row])

    def _content(self, e: Event, subject_id: str | None) -> None:
        tenant, item = e.tenant_id, str(e.payload["item_id"])
        if e.event_type == EventType.MEMORY_ASSERTED:
            self.table.set(self._at(tenant, item), asserted=1,
                           subject=self.table.code(subject_id))
        if e.payload.get("importance") is not None and e.actor != ACTOR:
            self.table.set(self._at(tenant, item), prior=float(e.payload["importance"]),
                           last=e.position)
        content = e.payload.get("content")
        if content and content != ERASED:
            at, length = self.spilled.put(" ".join(sorted(set(plain_words(content)))))
            self.table.set(self._at(tenant, item), words_at=at, words_len=length)

    def _words(self, tenant: str, item: str) -> Counter[str]:
        row = self.table.row(tenant, item)
        if row is None or self.table.col["words_len"][row] < 0:
            return Counter()
        text = self.spilled.get(int(self.table.col["words_at"][row]),
                                int(self.table.col["words_len"][row]))
        return Counter(text.split()) if text else Counter()

    def _signal(self, e: Event, signal: str, rating: int | None = None,
                item: str | None = None) -> None:
        row = self._at(e.tenant_id, item or str(e.payload["item_id"]))
        signals = self.counts.setdefault(row, Signals())
        if signal == "rating" and rating is not None:
            signals.ratings.append(int(rating))
        elif signal in ("used", "unused", "reaffirmed", "recalled"):
            setattr(signals, signal, getattr(signals, signal) + 1)
        self.table.set(row, last=e.position)

    def _signals(self, row: int) -> Signals:
        """The signals of ``row`` as one ``Signals``: the counts with the columns'."""
        c = self.table.col
        counted = self.counts.get(row, Signals())
        learned = float(c["learned"][row])
        return Signals(float(c["prior"][row]), None if math.isnan(learned) else learned,
                       counted.used, counted.unused, counted.ratings, counted.reaffirmed,
                       counted.recalled, int(c["last"][row]))

    def _theme(self, e: Event) -> None:
        p = e.payload
        self.recorded.setdefault((e.tenant_id, e.space_id), {})[str(p["theme_id"])] = Recorded(
            tuple(str(m) for m in p.get("members") or ()), str(p["label"]), int(p["size"]),
            e.position)

    def _erased(self, tenant: str, subject: str) -> None:
        t, names = self.table, self.table.names
        rows = np.flatnonzero((t.column("tenant") == names.find(tenant))
                              & (t.column("subject") == names.find(subject))
                              & (t.column("asserted") == 1))
        if len(rows):
            self.changed.add((tenant, "*"))
        for row in rows[t.column("words_len")[rows] >= 0]:
            self.spilled.erase(int(t.col["words_at"][row]), int(t.col["words_len"][row]))
            t.set(int(row), words_len=-1)

    # --- decisions -----------------------------------------------------------------------

    def importance(self, lifecycle: LifecycleFold) -> Iterator[tuple[str, c.LearnImportance]]:
        """The learned importance of every active item whose signals moved it."""
        for tenant, item_id, row in self._signalled():
            space = lifecycle.active_space(tenant, item_id)
            if space is None:
                continue
            signals = self._signals(row)
            learned = signals.importance()
            now = signals.learned if signals.learned is not None else signals.prior
            if abs(learned - now) < STEP / 2:
                continue
            yield tenant, c.LearnImportance(
                space_id=space, item_id=UUID(item_id), importance=learned,
                prior=signals.prior, reason=signals.reason(learned), actor=ACTOR,
                signals=ImportanceSignals(used=signals.used, unused=signals.unused,
                                          ratings=tuple(signals.ratings[-10_000:]),
                                          reaffirmed=signals.reaffirmed,
                                          recalled=signals.recalled),
                idempotency_key=f"lifecycle:importance:{item_id}:{signals.last}:{learned:g}")

    def _signalled(self) -> Iterator[tuple[str, str, int]]:
        """(tenant, item id, row) of the items with a signal or a prior that could have moved
        their importance, in that order."""
        t = self.table
        # Sorted as arrays, a tenant at a time (every item written with an importance has a
        # prior): a tuple per item would hold about a hundred bytes each for the whole tick.
        signalled = self._movable(np.flatnonzero(t.column("last") != 0))
        codes = t.column("tenant")[signalled]
        for tenant, code in sorted((t.names.name(int(n)) or "", n) for n in np.unique(codes)):
            rows = signalled[codes == code]
            ids = np.array([t.ids[row] for row in rows], dtype=object)
            for row in rows[np.argsort(ids, kind="stable")]:
                yield tenant, t.ids[row], int(row)

    def _movable(self, rows: npt.NDArray[np.intp]) -> npt.NDArray[np.intp]:
        """Those of ``rows`` whose importance could move: any with counted signals, and those
        with none whose prior, rounded as ``Signals.importance`` rounds it, is a step from
        what they have now. Judged as arrays, since nearly every item has a prior and no
        signal (at a million items, deciding each in Python took 7.5 s of CPU a tick); each
        one found is decided exactly in ``importance``."""
        c = self.table.col
        prior, learned = c["prior"][rows], c["learned"][rows]
        now = np.where(np.isnan(learned), prior, learned)
        moved = np.abs(np.round(prior / STEP) * STEP - now) > STEP / 2 - _SLACK
        counted = np.isin(rows, np.fromiter(self.counts, dtype=np.intp, count=len(self.counts)))
        return rows[moved | counted]

    def themes(self, lifecycle: LifecycleFold) -> Iterator[tuple[str, c.RecordTheme]]:
        """What changed in the themes of the spaces whose memories changed."""
        changed, self.changed = self.changed, set()
        everywhere = {t for t, s in changed if s == "*"}
        for (tenant, space), versions in sorted(lifecycle.policies.items()):
            threshold = versions[-1].values.get("theme_cosine") if versions else None
            if (tenant, space) not in changed and tenant not in everywhere:
                continue
            found = [] if threshold is None else self._grouped(lifecycle, tenant, space,
                                                              float(threshold))
            for theme in self._differences(tenant, space, found):
                yield tenant, _record(space, theme, float(threshold or 1.0),
                                      versions[-1].version,
                                      self.recorded.get((tenant, space), {}).get(
                                          theme.theme_id))

    def _grouped(self, lifecycle: LifecycleFold, tenant: str, space: str, threshold: float
                 ) -> list[Theme]:
        members = [Member(item_id, vector)
                   for item_id, vector in lifecycle.space_vectors(tenant, space)]
        words = {m.item_id: self._words(tenant, m.item_id) for m in members}
        return themes(tenant, space, members, threshold, words, MAX_THEME_MEMBERS)

    def _differences(self, tenant: str, space: str, found: list[Theme]) -> list[Theme]:
        known = self.recorded.get((tenant, space), {})
        now = {t.theme_id: t for t in found}
        changed = [t for t in found if (r := known.get(t.theme_id)) is None
                   or (r.members, r.label, r.size) != (t.members, t.label, t.size)]
        gone = [Theme(theme_id, r.label, (), 0) for theme_id, r in sorted(known.items())
                if theme_id not in now and r.members]
        return changed + gone


def _record(space: str, theme: Theme, threshold: float, policy_version: int,
            before: Recorded | None) -> c.RecordTheme:
    digest = hashlib.sha256("\x00".join((theme.label, str(theme.size), *theme.members))
                            .encode()).hexdigest()[:16]
    since = before.position if before is not None else 0
    return c.RecordTheme(space_id=space, theme_id=UUID(theme.theme_id), label=theme.label,
                         members=tuple(UUID(m) for m in theme.members), size=theme.size,
                         threshold=threshold, policy_version=policy_version, actor=ACTOR,
                         idempotency_key=f"lifecycle:theme:{theme.theme_id}:{since}:{digest}")
