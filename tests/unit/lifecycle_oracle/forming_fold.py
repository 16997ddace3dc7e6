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
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from uuid import UUID

from memledger_lifecycle.themes import Member, Theme, themes
from memledger_platform.crypto import ERASED
from memledger_platform.events import Event
from memledger_platform.vectorindex.sparse import plain_words
from memledger_schemas import commands as c
from memledger_schemas.events import MAX_THEME_MEMBERS, ImportanceSignals
from tests.unit.lifecycle_oracle.fold import LifecycleFold

EVENT_TYPES = (
    "space.policy_set", "memory.asserted", "memory.revised", "memory.reaffirmed",
    "feedback.recorded", "retrieval.performed", "memory.importance_learned",
    "memory.embedded", "memory.retracted", "memory.superseded", "memory.archived",
    "memory.merged", "theme.formed", "theme.updated", "subject.erased")
"""What this fold reads (with the lifecycle fold's own)."""

PRIOR_WEIGHT = 4.0
RECALL_WEIGHT = 0.25
RECALL_CAP = 20
STEP = 0.01
"""Learned importance is rounded to this, and recorded only when it moves by it."""
ACTOR = "memledger:lifecycle"


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
    signals: dict[tuple[str, str], Signals] = field(default_factory=dict)
    words: dict[tuple[str, str], Counter[str]] = field(default_factory=dict)
    subjects: dict[tuple[str, str], str | None] = field(default_factory=dict)
    recorded: dict[tuple[str, str], dict[str, Recorded]] = field(default_factory=dict)
    """Themes by (tenant, space), then theme id."""
    changed: set[tuple[str, str]] = field(default_factory=set)
    """Spaces whose memories changed since their themes were last decided."""

    def apply(self, e: Event, subject_id: str | None = None) -> None:
        """Fold one event (after the ``LifecycleFold`` has)."""
        p = e.payload
        if "item_id" in p and e.event_type.startswith("memory."):
            self.changed.add((e.tenant_id, e.space_id))
        match e.event_type:
            case "memory.asserted" | "memory.revised":
                self._content(e, subject_id)
            case "feedback.recorded":
                self._signal(e, p["signal"], p.get("rating"))
            case "memory.reaffirmed":
                self._signal(e, "reaffirmed")
            case "retrieval.performed":
                for shown in sorted({r["ref"] for r in p.get("results") or ()}):
                    if (e.tenant_id, shown) in self.subjects:  # a memory, not a message
                        self._signal(e, "recalled", item=shown)
            case "memory.importance_learned":
                self._at(e.tenant_id, str(p["item_id"])).learned = float(p["importance"])
            case "theme.formed" | "theme.updated":
                self._theme(e)
            case "subject.erased":
                self._erased(e.tenant_id, str(p["subject_id"]))
            case "space.policy_set":
                self.changed.add((e.tenant_id, e.space_id))

    def _at(self, tenant: str, item: str) -> Signals:
        return self.signals.setdefault((tenant, item), Signals())

    def _content(self, e: Event, subject_id: str | None) -> None:
        key = (e.tenant_id, str(e.payload["item_id"]))
        if e.event_type == "memory.asserted":
            self.subjects[key] = subject_id
        if e.payload.get("importance") is not None and e.actor != ACTOR:
            signals = self._at(*key)
            signals.prior, signals.last = float(e.payload["importance"]), e.position
        content = e.payload.get("content")
        if content and content != ERASED:
            self.words[key] = Counter(set(plain_words(content)))

    def _signal(self, e: Event, signal: str, rating: int | None = None,
                item: str | None = None) -> None:
        signals = self._at(e.tenant_id, item or str(e.payload["item_id"]))
        if signal == "rating" and rating is not None:
            signals.ratings.append(int(rating))
        elif signal in ("used", "unused", "reaffirmed", "recalled"):
            setattr(signals, signal, getattr(signals, signal) + 1)
        signals.last = e.position

    def _theme(self, e: Event) -> None:
        p = e.payload
        self.recorded.setdefault((e.tenant_id, e.space_id), {})[str(p["theme_id"])] = Recorded(
            tuple(str(m) for m in p.get("members") or ()), str(p["label"]), int(p["size"]),
            e.position)

    def _erased(self, tenant: str, subject: str) -> None:
        for key, owner in self.subjects.items():
            if key[0] == tenant and owner == subject:
                self.words.pop(key, None)
                self.changed.add((tenant, "*"))

    # --- decisions -----------------------------------------------------------------------

    def importance(self, lifecycle: LifecycleFold) -> Iterator[tuple[str, c.LearnImportance]]:
        """The learned importance of every active item whose signals moved it."""
        for (tenant, item_id), signals in sorted(self.signals.items()):
            item = lifecycle.items.get((tenant, item_id))
            if item is None or item.status != "active" or signals.last == 0:
                continue
            learned = signals.importance()
            now = signals.learned if signals.learned is not None else signals.prior
            if abs(learned - now) < STEP / 2:
                continue
            yield tenant, c.LearnImportance(
                space_id=item.space, item_id=UUID(item_id), importance=learned,
                prior=signals.prior, reason=signals.reason(learned), actor=ACTOR,
                signals=ImportanceSignals(used=signals.used, unused=signals.unused,
                                          ratings=tuple(signals.ratings[-10_000:]),
                                          reaffirmed=signals.reaffirmed,
                                          recalled=signals.recalled),
                idempotency_key=f"lifecycle:importance:{item_id}:{signals.last}:{learned:g}")

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
        items = sorted((i for i in lifecycle.items.values()
                        if i.tenant == tenant and i.space == space and i.status == "active"
                        and i.vector is not None), key=lambda i: i.created_position)
        members = [Member(i.item_id, i.vector) for i in items if i.vector is not None]
        words = {i.item_id: self.words.get((tenant, i.item_id), Counter()) for i in items}
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
