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
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt

from memledger_lifecycle.items import STATUSES, Item, ItemsView, ItemTable, micros
from memledger_lifecycle.spill import VectorSpill
from memledger_platform.events import Event
from memledger_platform.readmodel.projection import layer_of
from memledger_schemas.event_types import EventType

__all__ = ["Archive", "Consolidation", "Item", "LifecycleFold", "Policy", "fold"]

EVENT_TYPES = (
    EventType.SPACE_POLICY_SET, EventType.SESSION_STARTED, EventType.SESSION_ENDED,
    EventType.MESSAGE_APPENDED, EventType.MEMORY_ASSERTED, EventType.MEMORY_REVISED,
    EventType.MEMORY_REAFFIRMED, EventType.MEMORY_RETRACTED, EventType.MEMORY_SUPERSEDED,
    EventType.MEMORY_ARCHIVED, EventType.MEMORY_PROMOTED, EventType.MEMORY_MERGED,
    EventType.MEMORY_EMBEDDED, EventType.SUBJECT_ERASED)
"""What the fold reads; every other event is ignored."""

_DAY = 86_400.0
CHUNK = 1_000
"""Decisions per chunk of a tick (``archive_chunks``)."""
_MARGIN = 1e-4
"""How far below the threshold a block's similarity may fall and still be computed again
one by one: a matrix product may round its last bit differently from a single dot product."""


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
    """The fold's state. Items are rows of an ``ItemTable`` (``items`` reads them as
    snapshots) and their vectors live in a ``VectorSpill`` (``spill_dir``: where its scratch
    file goes; the system's temporary directory if None), so what stays in memory per item is
    its id and a few numbers."""

    spill_dir: str | None = None
    sessions: dict[tuple[str, str], Session] = field(default_factory=dict)
    policies: dict[tuple[str, str], list[Policy]] = field(default_factory=dict)
    found: list[Consolidation] = field(default_factory=list)
    """Near-duplicates seen so far and not yet taken (``take_consolidations``)."""
    position: int = 0
    table: ItemTable = field(init=False)

    def __post_init__(self) -> None:
        self.table = ItemTable(VectorSpill(self.spill_dir))

    @property
    def items(self) -> ItemsView:
        """Every item by (tenant, item id), as snapshots (each read on access)."""
        return ItemsView(self.table)

    def apply(self, e: Event, subject_id: str | None = None) -> None:
        """Fold one event; ``subject_id``: its data subject, when not the envelope's."""
        if e.position <= self.position:
            return
        if e.event_type == EventType.SUBJECT_ERASED:
            self._erased(e.tenant_id, str(e.payload["subject_id"]))
        elif e.event_type == EventType.MEMORY_ASSERTED:
            _asserted(self, e, e.subject_id if subject_id is None else subject_id)
        elif (handler := _HANDLERS.get(e.event_type)) is not None:
            handler(self, e)
        self.position = e.position

    def _erased(self, tenant: str, subject: str) -> None:
        t, names = self.table, self.table.names
        rows = np.flatnonzero((t.column("tenant") == names.find(tenant))
                              & (t.column("subject") == names.find(subject))
                              & (t.column("dims") > 0))
        for row in rows:
            t.vectors.erase(int(t.col["dims"][row]), int(t.col["record"][row]))
            t.set(int(row), dims=0, record=0)

    def take_consolidations(self) -> list[Consolidation]:
        """The near-duplicates found since the last call whose two items are still active
        (one merged meanwhile, or a restart that folded the log again, finds them done)."""
        taken, self.found = self.found, []
        return [c for c in taken if self._active(c.tenant, c.duplicate)
                and self._active(c.tenant, c.survivor)]

    def archives(self, now: datetime) -> list[Archive]:
        """What the policies archive at ``now``, in (tenant, item id) order (a pure function of
        the fold and ``now``)."""
        return [archive for chunk in self.archive_chunks(now) for archive in chunk]

    def archive_chunks(self, now: datetime, size: int = CHUNK) -> Iterator[list[Archive]]:
        """``archives(now)`` in lists of at most ``size``, made as they are taken: a tick
        holds one chunk of decisions and one item's snapshot at a time, not every item's.
        ``max_items`` ranks a whole space, so its spaces are read once before (only their
        survivors' strengths are held)."""
        over = self._over_limits(now)
        chunk: list[Archive] = []
        # Only the spaces a policy governs now: any other item is never archived, and reading
        # each one's snapshot at every tick grew with the whole load.
        for row in self._candidates(self._governed()):
            item = self.table.item(int(row), vector=False)
            policy = self._governing(item)
            if policy is None:
                continue
            found = self._expired(item, policy, now)
            archive = (Archive(item.tenant, item.space, item.item_id, policy.version, *found)
                       if found is not None else over.get((item.tenant, item.item_id)))
            if archive is not None:
                chunk.append(archive)
            if len(chunk) >= size:
                yield chunk
                chunk = []
        if chunk:
            yield chunk

    def _over_limits(self, now: datetime) -> dict[tuple[str, str], Archive]:
        """By (tenant, item id): what ``max_items`` archives (among the items no other rule
        archives)."""
        limited = {key for key in self.policies if self._limited(*key)}
        if not limited:
            return {}
        survivors: dict[tuple[str, str], list[tuple[float, int, str, Policy]]] = {}
        for row in self._candidates(limited):
            item = self.table.item(int(row), vector=False)
            policy = self._governing(item)
            if policy is not None and self._expired(item, policy, now) is None:
                survivors.setdefault((item.tenant, item.space), []).append(
                    (_strength(item, policy, now), item.created_position, item.item_id,
                     policy))
        return {(tenant, item_id): archive for (tenant, space), kept in survivors.items()
                for item_id, archive in self._over_limit(tenant, space, kept).items()}

    def _candidates(self, spaces: set[tuple[str, str]] | None = None
                    ) -> Iterator[np.int64]:
        """The active rows outside the ecosystem layer (of ``spaces`` only, if given), in
        (tenant, item id) order."""
        t = self.table
        keep = (t.column("status") == 0) & (t.column("layer") != t.names.find("ecosystem"))
        for tenant in sorted(t.rows):
            mine = np.fromiter(t.rows[tenant].values(), dtype=np.int64,
                               count=len(t.rows[tenant]))
            mine = mine[keep[mine]]
            if spaces is not None:
                codes = [t.names.find(s) for (n, s) in spaces if n == tenant]
                mine = mine[np.isin(t.column("space")[mine], codes)]
            ids = np.array([t.ids[r] for r in mine], dtype=object)
            yield from mine[np.argsort(ids, kind="stable")]

    def _governed(self) -> set[tuple[str, str]]:
        """The (tenant, space) pairs a policy governs (under none, or under a legal hold,
        ``_governing`` finds no policy for any item)."""
        return {key for key, versions in self.policies.items()
                if versions and not versions[-1].values.get("legal_hold")}

    def _limited(self, tenant: str, space: str) -> bool:
        versions = self.policies.get((tenant, space), [])
        return bool(versions and versions[-1].values.get("max_items"))

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
                    kept: list[tuple[float, int, str, Policy]]) -> dict[str, Archive]:
        versions = self.policies.get((tenant, space), [])
        limit = versions[-1].values.get("max_items") if versions else None
        if not limit or len(kept) <= limit:
            return {}
        # The weakest go first; the older of two equally strong ones.
        weakest = sorted(kept, key=lambda k: (k[0], k[1]))[:len(kept) - limit]
        return {item_id: Archive(
            tenant, space, item_id, policy.version, "max_items",
            f"over max_items {limit}: among the weakest of the space "
            f"(policy v{policy.version})") for _, _, item_id, policy in weakest}

    # --- consolidation ---------------------------------------------------------------------

    def _consolidate(self, row: int, vector: npt.NDArray[np.float32]) -> None:
        tenant, space = self.table.text(row, "tenant") or "", self.table.text(row, "space") or ""
        versions = self.policies.get((tenant, space), [])
        policy = versions[-1] if versions else None
        action = policy.values.get("consolidation", "off") if policy else "off"
        if policy is None or action == "off":
            return
        threshold = float(policy.values.get("merge_cosine", 0.92))
        best = self._nearest(row, vector, threshold)
        if best is not None:
            self.found.append(Consolidation(tenant, space, self.table.ids[row], best[1],
                                            round(best[0], 6), policy.version, action))

    def _nearest(self, row: int, vector: npt.NDArray[np.float32], threshold: float
                 ) -> tuple[float, str] | None:
        """The most similar active item of ``row``'s scope at or above ``threshold`` (the
        greater id of two as similar), read from the spill a block at a time."""
        t = self.table
        same = t.column("status") == 0
        for name in ("tenant", "space", "layer", "session"):
            same &= t.column(name) == t.col[name][row]
        same &= t.column("dims") == vector.shape[0]
        same[row] = False
        rows = np.flatnonzero(same)
        rows = rows[np.argsort(t.column("record")[rows], kind="stable")]
        best: tuple[float, str] | None = None
        for at, block in t.vectors.scan(vector.shape[0], t.column("record")[rows]):
            for j in np.flatnonzero(block @ vector >= threshold - _MARGIN):
                similarity = float(block[j] @ vector)  # as one dot product, exactly
                item_id = t.ids[int(rows[at[j]])]
                if similarity >= threshold and (best is None or (similarity, item_id) > best):
                    best = (similarity, item_id)
        return best

    # --- what the themes and learned importance read -----------------------------------

    def active_space(self, tenant: str, item_id: str) -> str | None:
        """The space of an active item; None if it is not active (or unknown)."""
        row = self.table.row(tenant, item_id)
        if row is None or self.table.col["status"][row] != 0:
            return None
        return self.table.text(row, "space")

    def space_vectors(self, tenant: str, space: str) -> list[tuple[str, npt.NDArray[np.float32]]]:
        """The active items of a space that have a vector, oldest first, with their vectors
        (read from the spill: held only while the caller holds them)."""
        t, names = self.table, self.table.names
        rows = np.flatnonzero((t.column("tenant") == names.find(tenant))
                              & (t.column("space") == names.find(space))
                              & (t.column("status") == 0) & (t.column("dims") > 0))
        found: list[tuple[int, str, npt.NDArray[np.float32]]] = []
        for dims in np.unique(t.column("dims")[rows]):
            mine = rows[t.column("dims")[rows] == dims]
            mine = mine[np.argsort(t.column("record")[mine], kind="stable")]
            for at, block in t.vectors.scan(int(dims), t.column("record")[mine]):
                found.extend((int(t.col["created"][mine[i]]), t.ids[mine[i]], block[j])
                             for j, i in enumerate(at))
        found.sort(key=lambda f: f[0])
        return [(item_id, vector) for _, item_id, vector in found]

    def _active(self, tenant: str, item_id: str) -> bool:
        row = self.table.row(tenant, item_id)
        return row is not None and self.table.col["status"][row] == 0


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
    _touch(f, e.tenant_id, str(e.payload["session_id"]), e.recorded_at)


def _touch(f: LifecycleFold, tenant: str, session_id: str, at: datetime) -> None:
    session = f.sessions.get((tenant, session_id))
    if session is not None:
        session.last_activity = at


def _asserted(f: LifecycleFold, e: Event, subject_id: str | None) -> None:
    p, t = e.payload, f.table
    t.add(e.tenant_id, str(p["item_id"]), space=t.code(e.space_id), kind=t.code(p["kind"]),
          layer=t.code(layer_of(e)), session=t.code(e.session_id), subject=t.code(subject_id),
          created=e.position, reinforced=micros(e.recorded_at),
          importance=float(p.get("importance", 0.5)),
          confidence=float(p.get("confidence", 1.0)), version=1, content_version=1)
    if e.session_id is not None:
        _touch(f, e.tenant_id, e.session_id, e.recorded_at)


def _item_event(change: Callable[[LifecycleFold, int, Event], None]
                ) -> Callable[[LifecycleFold, Event], None]:
    def handle(f: LifecycleFold, e: Event) -> None:
        row = f.table.row(e.tenant_id, str(e.payload["item_id"]))
        if row is not None:
            f.table.col["version"][row] += 1
            change(f, row, e)
    return handle


def _revised(f: LifecycleFold, row: int, e: Event) -> None:
    p, t = e.payload, f.table
    if p.get("content") is not None:
        t.set(row, content_version=t.col["version"][row], dims=0, record=0)
    if p.get("importance") is not None:
        t.set(row, importance=float(p["importance"]))
    if p.get("confidence") is not None:
        t.set(row, confidence=float(p["confidence"]))


def _reaffirmed(f: LifecycleFold, row: int, e: Event) -> None:
    f.table.set(row, reinforced=micros(e.recorded_at))
    if e.payload.get("confidence") is not None:
        f.table.set(row, confidence=float(e.payload["confidence"]))


def _ended(status: str) -> Callable[[LifecycleFold, int, Event], None]:
    def change(f: LifecycleFold, row: int, e: Event) -> None:
        f.table.set(row, status=STATUSES.index(status))
    return change


def _promoted(f: LifecycleFold, row: int, e: Event) -> None:
    f.table.set(row, layer=f.table.code(str(e.payload["layer"])))


def _embedded(f: LifecycleFold, e: Event) -> None:
    # Not on the item's stream (its version does not move); only the current content's
    # vector counts, and an erased one (opened to nothing) never does.
    row = f.table.row(e.tenant_id, str(e.payload["item_id"]))
    vector = e.payload.get("vector")
    if row is None or not vector or int(e.payload["item_version"]) != int(
            f.table.col["content_version"][row]):
        return
    with np.errstate(over="ignore", invalid="ignore"):  # logged before ingest refused these
        array = np.asarray(vector, dtype=np.float32)
        norm = float(np.linalg.norm(array))
    if math.isfinite(norm) and norm > 0:
        unit = array / norm
        dims, record = f.table.vectors.put(unit)
        f.table.set(row, dims=dims, record=record)
        if f.table.col["status"][row] == 0:
            f._consolidate(row, unit)


def _importance_learned(f: LifecycleFold, e: Event) -> None:
    # Not on the item's stream either; decay reads the learned importance from now on.
    row = f.table.row(e.tenant_id, str(e.payload["item_id"]))
    if row is not None:
        f.table.set(row, importance=float(e.payload["importance"]))


_HANDLERS: dict[str, Callable[[LifecycleFold, Event], None]] = {
    EventType.SPACE_POLICY_SET: _policy_set, EventType.SESSION_STARTED: _session_started,
    EventType.SESSION_ENDED: _session_ended, EventType.MESSAGE_APPENDED: _message,
    EventType.MEMORY_REVISED: _item_event(_revised),
    EventType.MEMORY_REAFFIRMED: _item_event(_reaffirmed),
    EventType.MEMORY_RETRACTED: _item_event(_ended("retracted")),
    EventType.MEMORY_SUPERSEDED: _item_event(_ended("superseded")),
    EventType.MEMORY_ARCHIVED: _item_event(_ended("archived")),
    EventType.MEMORY_PROMOTED: _item_event(_promoted), EventType.MEMORY_EMBEDDED: _embedded,
    EventType.MEMORY_MERGED: _item_event(lambda f, row, e: None),  # its stream version moves
    EventType.IMPORTANCE_LEARNED: _importance_learned,
}


def fold(events: Iterable[Event]) -> LifecycleFold:
    """A fold of ``events`` (in position order) from nothing."""
    state = LifecycleFold()
    for event in events:
        state.apply(event)
    return state
