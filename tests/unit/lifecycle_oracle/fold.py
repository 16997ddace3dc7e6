"""The memory lifecycle as a pure fold of events and a clock: which items a space's policy
archives (session TTL, retention per layer and kind, decay, a maximum count) and which new
embeddings are near-duplicates to merge or suggest (consolidation).

Deterministic: the same events folded in order and the same ``now`` give the same decisions,
and a decision's reason never mentions ``now``, so deciding again later (or after a restart
that folds the log again) repeats the same command under the same idempotency key, which
ingest answers without writing twice. Nothing here deletes: an archive is an event, and
erasure is a separate path.

Which policy governs an item: the newest version set before the item was recorded, or a newer
one set ``retroactive``; ``legal_hold`` (newest version) holds everything in the space.
Ecosystem memory is permanent: never archived by policy.

Strength, which decay and ``max_items`` act on (importance stretches the half-life up to
twice, so important memories resist decay)::

    strength = confidence * 0.5 ** (age_days / (half_life_days[kind] * (1 + importance)))

with ``age_days`` counted from the item's last reinforcement (assertion or reaffirmation).
"""

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt

from memledger_platform.events import Event
from memledger_platform.readmodel.projection import layer_of

EVENT_TYPES = (
    "space.policy_set", "session.started", "session.ended", "conversation.message_appended",
    "memory.asserted", "memory.revised", "memory.reaffirmed", "memory.retracted",
    "memory.superseded", "memory.archived", "memory.promoted", "memory.merged",
    "memory.embedded", "subject.erased")
"""What the fold reads; every other event is ignored."""

_DAY = 86_400.0


@dataclass
class Item:
    tenant: str
    space: str
    item_id: str
    kind: str
    layer: str
    session: str | None
    created_position: int
    reinforced_at: datetime
    importance: float
    confidence: float
    version: int = 1
    content_version: int = 1
    status: str = "active"
    vector: "npt.NDArray[np.float32] | None" = None
    subject: str | None = None
    """The data subject of its content: erasing it drops the vector held here."""


@dataclass
class Session:
    ended_at: datetime | None
    last_activity: datetime


@dataclass(frozen=True)
class Policy:
    version: int
    position: int
    values: dict[str, Any]


@dataclass(frozen=True)
class Archive:
    """Archive ``item_id``: the command the scheduler sends."""

    tenant: str
    space: str
    item_id: str
    policy_version: int
    rule: str
    reason: str

    @property
    def idempotency_key(self) -> str:
        return f"lifecycle:archive:{self.item_id}:v{self.policy_version}"


@dataclass(frozen=True)
class Consolidation:
    """``duplicate`` (just embedded) is a near-duplicate of ``survivor`` (older)."""

    tenant: str
    space: str
    duplicate: str
    survivor: str
    similarity: float
    policy_version: int
    action: str
    """"merge" or "suggest", by policy."""

    @property
    def idempotency_key(self) -> str:
        return f"lifecycle:{self.action}:{self.duplicate}:{self.survivor}"


@dataclass
class LifecycleFold:
    items: dict[tuple[str, str], Item] = field(default_factory=dict)
    sessions: dict[tuple[str, str], Session] = field(default_factory=dict)
    policies: dict[tuple[str, str], list[Policy]] = field(default_factory=dict)
    found: list[Consolidation] = field(default_factory=list)
    """Near-duplicates seen so far and not yet taken (``take_consolidations``)."""
    position: int = 0

    def apply(self, e: Event, subject_id: str | None = None) -> None:
        """Fold one event; ``subject_id`` is its envelope's (the data subject)."""
        if e.position <= self.position:
            return
        if e.event_type == "subject.erased":
            self._erased(e.tenant_id, str(e.payload["subject_id"]))
        elif e.event_type == "memory.asserted":
            _asserted(self, e)
            self.items[(e.tenant_id, str(e.payload["item_id"]))].subject = subject_id
        elif (handler := _HANDLERS.get(e.event_type)) is not None:
            handler(self, e)
        self.position = e.position

    def _erased(self, tenant: str, subject: str) -> None:
        for item in self.items.values():
            if item.tenant == tenant and item.subject == subject:
                item.vector = None

    def take_consolidations(self) -> list[Consolidation]:
        """The near-duplicates found since the last call whose two items are still active
        (one merged meanwhile, or a restart that folded the log again, finds them done)."""
        taken, self.found = self.found, []
        return [c for c in taken if self._active(c.tenant, c.duplicate)
                and self._active(c.tenant, c.survivor)]

    def archives(self, now: datetime) -> list[Archive]:
        """What the policies archive at ``now``, in item order (a pure function of the fold
        and ``now``)."""
        decided: dict[str, Archive] = {}
        survivors: dict[tuple[str, str], list[tuple[float, int, Item, Policy]]] = {}
        for item in sorted(self.items.values(), key=lambda i: (i.tenant, i.item_id)):
            policy = self._governing(item)
            if item.status != "active" or item.layer == "ecosystem" or policy is None:
                continue
            found = self._expired(item, policy, now)
            if found is not None:
                decided[item.item_id] = Archive(item.tenant, item.space, item.item_id,
                                                policy.version, *found)
                continue
            strength = _strength(item, policy, now)
            survivors.setdefault((item.tenant, item.space), []).append(
                (strength, item.created_position, item, policy))
        for (tenant, space), kept in survivors.items():
            decided.update(self._over_limit(tenant, space, kept))
        return sorted(decided.values(), key=lambda a: (a.tenant, a.item_id))

    # --- policy --------------------------------------------------------------------------

    def _governing(self, item: Item) -> Policy | None:
        versions = self.policies.get((item.tenant, item.space), [])
        if not versions or versions[-1].values.get("legal_hold"):
            return None
        eligible = [p for p in versions
                    if p.position < item.created_position or p.values.get("retroactive")]
        return eligible[-1] if eligible else None

    def _expired(self, item: Item, policy: Policy, now: datetime) -> tuple[str, str] | None:
        v, tag = policy.values, f"(policy v{policy.version})"
        ttl = v.get("session_ttl_seconds")
        session = self.sessions.get((item.tenant, item.session or ""))
        if ttl and item.layer == "session" and session is not None:
            quiet = session.ended_at or session.last_activity
            if now >= quiet + timedelta(seconds=ttl):
                how = "ended" if session.ended_at else "went quiet"
                return "ttl", (f"session memory expired: the session {how} at "
                               f"{quiet.isoformat()} and its ttl is {ttl} s {tag}")
        for rule, days in (("layer_retention", (v.get("layer_retention_days") or {}).get(
                item.layer)), ("retention", (v.get("retention_days") or {}).get(item.kind))):
            if days and now >= item.reinforced_at + timedelta(days=days):
                return rule, (f"retention: {item.layer} {item.kind} kept {days} days after "
                              f"{item.reinforced_at.isoformat()} {tag}")
        floor = v.get("forget_below")
        if floor is not None and _half_life(item, policy) is not None and _strength(
                item, policy, now) < floor:
            return "decay", (f"forgotten: decayed below strength {floor} (half-life "
                             f"{_half_life(item, policy)} days, importance {item.importance}, "
                             f"reinforced {item.reinforced_at.isoformat()}) {tag}")
        return None

    def _over_limit(self, tenant: str, space: str,
                    kept: list[tuple[float, int, Item, Policy]]) -> dict[str, Archive]:
        versions = self.policies.get((tenant, space), [])
        limit = versions[-1].values.get("max_items") if versions else None
        if not limit or len(kept) <= limit:
            return {}
        # The weakest go first; the older of two equally strong ones.
        weakest = sorted(kept, key=lambda k: (k[0], k[1]))[:len(kept) - limit]
        return {item.item_id: Archive(
            tenant, space, item.item_id, policy.version, "max_items",
            f"over max_items {limit}: among the weakest of the space "
            f"(policy v{policy.version})") for _, _, item, policy in weakest}

    # --- consolidation ---------------------------------------------------------------------

    def _consolidate(self, item: Item) -> None:
        versions = self.policies.get((item.tenant, item.space), [])
        policy = versions[-1] if versions else None
        action = policy.values.get("consolidation", "off") if policy else "off"
        if policy is None or action == "off" or item.vector is None:
            return
        threshold = float(policy.values.get("merge_cosine", 0.92))
        best: tuple[float, str] | None = None
        for other in self.items.values():
            if (other is item or other.vector is None or other.status != "active"
                    or (other.tenant, other.space, other.layer, other.session)
                    != (item.tenant, item.space, item.layer, item.session)):
                continue
            similarity = float(other.vector @ item.vector)
            if similarity >= threshold and (best is None or (similarity, other.item_id) > best):
                best = (similarity, other.item_id)
        if best is not None:
            self.found.append(Consolidation(item.tenant, item.space, item.item_id, best[1],
                                            round(best[0], 6), policy.version, action))

    def _active(self, tenant: str, item_id: str) -> bool:
        item = self.items.get((tenant, item_id))
        return item is not None and item.status == "active"


def _half_life(item: Item, policy: Policy) -> float | None:
    found = (policy.values.get("decay_half_life_days") or {}).get(item.kind)
    return None if found is None else float(found)


def _strength(item: Item, policy: Policy, now: datetime) -> float:
    half_life = _half_life(item, policy)
    if half_life is None:
        return item.confidence
    age_days = max(0.0, (now - item.reinforced_at).total_seconds()) / _DAY
    return item.confidence * math.pow(0.5, age_days / (half_life * (1 + item.importance)))


# --- handlers ----------------------------------------------------------------------------------

def _policy_set(f: LifecycleFold, e: Event) -> None:
    f.policies.setdefault((e.tenant_id, e.space_id), []).append(
        Policy(int(e.payload["policy_version"]), e.position, dict(e.payload)))


def _session_started(f: LifecycleFold, e: Event) -> None:
    f.sessions[(e.tenant_id, str(e.payload["session_id"]))] = Session(None, e.recorded_at)


def _session_ended(f: LifecycleFold, e: Event) -> None:
    session = f.sessions.get((e.tenant_id, str(e.payload["session_id"])))
    if session is not None:
        session.ended_at = e.recorded_at


def _message(f: LifecycleFold, e: Event) -> None:
    session = f.sessions.get((e.tenant_id, str(e.payload["session_id"])))
    if session is not None:
        session.last_activity = e.recorded_at


def _asserted(f: LifecycleFold, e: Event) -> None:
    p = e.payload
    f.items[(e.tenant_id, str(p["item_id"]))] = Item(
        e.tenant_id, e.space_id, str(p["item_id"]), p["kind"], layer_of(e), e.session_id,
        e.position, e.recorded_at, float(p.get("importance", 0.5)),
        float(p.get("confidence", 1.0)))
    _active_in_session(f, e)


def _active_in_session(f: LifecycleFold, e: Event) -> None:
    if e.session_id is not None:
        _message(f, Event(e.position, e.recorded_at, e.event_type, e.event_id, e.tenant_id,
                          e.space_id, e.actor, e.session_id, e.agent_id, None, None,
                          {"session_id": e.session_id}))


def _item_event(change: Callable[[Item, Event], None]) -> Callable[[LifecycleFold, Event], None]:
    def handle(f: LifecycleFold, e: Event) -> None:
        item = f.items.get((e.tenant_id, str(e.payload["item_id"])))
        if item is not None:
            item.version += 1
            change(item, e)
    return handle


def _revised(item: Item, e: Event) -> None:
    p = e.payload
    if p.get("content") is not None:
        item.content_version, item.vector = item.version, None
    item.importance = float(p["importance"]) if p.get("importance") is not None else (
        item.importance)
    item.confidence = float(p["confidence"]) if p.get("confidence") is not None else (
        item.confidence)


def _reaffirmed(item: Item, e: Event) -> None:
    item.reinforced_at = e.recorded_at
    if e.payload.get("confidence") is not None:
        item.confidence = float(e.payload["confidence"])


def _ended(status: str) -> Callable[[Item, Event], None]:
    def change(item: Item, e: Event) -> None:
        item.status = status
    return change


def _promoted(item: Item, e: Event) -> None:
    item.layer = str(e.payload["layer"])


def _embedded(f: LifecycleFold, e: Event) -> None:
    # Not on the item's stream (its version does not move); only the current content's
    # vector counts, and an erased one (opened to nothing) never does.
    item = f.items.get((e.tenant_id, str(e.payload["item_id"])))
    vector = e.payload.get("vector")
    if item is None or not vector or int(e.payload["item_version"]) != item.content_version:
        return
    with np.errstate(over="ignore", invalid="ignore"):  # logged before ingest refused these
        array = np.asarray(vector, dtype=np.float32)
        norm = float(np.linalg.norm(array))
    if math.isfinite(norm) and norm > 0:
        item.vector = array / norm
        if item.status == "active":
            f._consolidate(item)


def _importance_learned(f: LifecycleFold, e: Event) -> None:
    # Not on the item's stream either; decay reads the learned importance from now on.
    item = f.items.get((e.tenant_id, str(e.payload["item_id"])))
    if item is not None:
        item.importance = float(e.payload["importance"])


_HANDLERS: dict[str, Callable[[LifecycleFold, Event], None]] = {
    "space.policy_set": _policy_set, "session.started": _session_started,
    "session.ended": _session_ended, "conversation.message_appended": _message,
    "memory.asserted": _asserted, "memory.revised": _item_event(_revised),
    "memory.reaffirmed": _item_event(_reaffirmed),
    "memory.retracted": _item_event(_ended("retracted")),
    "memory.superseded": _item_event(_ended("superseded")),
    "memory.archived": _item_event(_ended("archived")),
    "memory.promoted": _item_event(_promoted), "memory.embedded": _embedded,
    "memory.merged": _item_event(lambda item, e: None),  # its stream version moves
    "memory.importance_learned": _importance_learned,
}


def fold(events: Iterable[Event]) -> LifecycleFold:
    """A fold of ``events`` (in position order) from nothing."""
    state = LifecycleFold()
    for event in events:
        state.apply(event)
    return state
