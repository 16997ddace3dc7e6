"""The vector read model as a fold of events: one index point per bi-temporal row of a memory
item (the same XTDB rectangles as the PostgreSQL model), carrying its scope and both time
bounds, its keyword (sparse) vector from the start and its dense vector once the enricher's
``memory.embedded`` for that content arrives; and one per conversation message
(``messages``).

Idempotent without a checkpoint: applying the event at position P to an item first rolls the
item back to what it was before P (rows made at or after P are dropped, rows closed at or after
P reopen), so an event applied again after a crash, or a whole batch redelivered, ends in the
same points with the same ids.
"""

import hashlib
import logging
import uuid
from array import array
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from memledger_platform.events import Event
from memledger_platform.readmodel import temporal
from memledger_platform.readmodel.projection import layer_of
from memledger_platform.readmodel.temporal import Version
from memledger_platform.vectorindex import sparse
from memledger_platform.vectorindex.port import (
    EMBEDDED_FROM,
    OPEN,
    IndexedPoint,
    SparseVector,
    Vector,
)
from memledger_schemas.event_types import EventType
from memledger_vectors.kept import Item, Kept, fill_vectors
from memledger_vectors.message_context import Sessions
from memledger_vectors.messages import EMBEDDED as MESSAGE_EMBEDDED
from memledger_vectors.messages import EVENT_TYPES as MESSAGE_EVENTS
from memledger_vectors.messages import MessageFold

log = logging.getLogger(__name__)

_NAMESPACE = uuid.UUID("6c0b7c4e-61c7-4f0a-9a43-3f1f4b1f3a10")
_NAMESPACE_BYTES = _NAMESPACE.bytes
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
EVENT_TYPES = (EventType.MEMORY_ASSERTED, EventType.MEMORY_REVISED, EventType.MEMORY_RETRACTED,
               EventType.MEMORY_SUPERSEDED,
               EventType.MEMORY_ARCHIVED, EventType.MEMORY_PROMOTED, EventType.MEMORY_EMBEDDED,
               EventType.IMPORTANCE_LEARNED, *MESSAGE_EVENTS)
_FIELDS = ("kind", "content", "tags", "importance", "confidence", "triple")

Loader = Callable[[str, str], list[IndexedPoint]]
"""Every point of (tenant, item_id) as the index holds it."""
Reader = Callable[[Sequence[str]], dict[str, Vector]]
"""The dense vectors of the points named, as the index holds them (``VectorIndex.vectors``)."""
KEPT_BYTES = 256 << 20
"""What the items kept compactly may take (about 600 bytes an item of four versions)."""


_Dirty = tuple[tuple[str, str], Item, Version]
"""A changed row: its item's key, the item and the row."""


class VectorFold:
    """Folds events into points; ``take()`` hands over the points that changed since the last
    call, to be upserted whole (so the order of changes inside a batch never matters)."""

    def __init__(self, load: Loader, model: str, *, sessions: Sessions | None = None,
                 cache_items: int = 20_000, vectors: Reader | None = None,
                 kept_bytes: int = KEPT_BYTES) -> None:
        """``load``: an item's points from the index; ``sessions``: a session's message points
        from the index (the turns before a message, ``message_context``); ``vectors``: points'
        vectors from the index, without which no item is kept compactly (``kept``)."""
        self._load = load
        self._model = model
        self._items: OrderedDict[tuple[str, str], Item] = OrderedDict()
        self._cache_items = cache_items
        self._read_vectors = vectors
        self.kept = Kept(kept_bytes if vectors is not None else 0)
        self._dirty: dict[str, _Dirty] = {}
        """The rows changed since the last ``take``, by point id: their points are made only
        then, once each (an import's assertion and embedding mark the same row twice)."""
        self._gone: set[str] = set()
        self._messages = MessageFold(load, sessions=sessions, cache=cache_items)
        self.position = 0
        self.skipped_models: set[str] = set()

    def apply(self, e: Event) -> None:
        if e.event_type in MESSAGE_EVENTS:
            self._message(e)
        elif e.event_type in EVENT_TYPES:
            self._memory(e)
        self.position = max(self.position, e.position)

    def _memory(self, e: Event) -> None:
        key = (e.tenant_id, str(e.payload["item_id"]))
        new = e.event_type == EventType.MEMORY_ASSERTED and e.stream_version == 1
        item = self._item(key, new=new)
        if e.event_type == EventType.MEMORY_EMBEDDED:
            self._embedded(key, item, e)
        else:
            self._rollback(key, item, e.position)
            _CHANGES[e.event_type](self, key, item, e)

    def _message(self, e: Event) -> None:
        if e.event_type != MESSAGE_EMBEDDED:
            self._messages.appended(e, e.subject_id)
        elif self._comparable(e.payload["model"]):
            self._messages.embedded(e)

    def forget_subject(self, tenant: str, subject_id: str) -> None:
        """After the index dropped a subject's points: drop its items here too (and any of
        its points not yet written), so nothing of it is written back."""
        for key, item in list(self._items.items()):
            if key[0] == tenant and any(dict(r.attrs).get("subject_id") == subject_id
                                        for r, _ in item.rows):
                del self._items[key]
                for _, point_id in item.rows:
                    self._dirty.pop(point_id, None)
        self.kept.forget_subject(tenant, subject_id)
        self._messages.forget_subject(tenant, subject_id)

    def forget(self) -> None:
        """Drop every item folded so far (the index lost writes: the log is folded again
        from its last flush, and the items are read back from the index)."""
        self._items.clear()
        self.kept.clear()
        self._dirty, self._gone = {}, set()
        self._messages.forget()

    def take(self) -> tuple[list[IndexedPoint], list[str]]:
        """(points to upsert, point ids to delete) since the last call."""
        self._unread()
        upserts = [_point_of(key, item, row, point_id)
                   for point_id, (key, item, row) in self._dirty.items()]
        gone = sorted(self._gone - set(self._dirty))
        self._dirty, self._gone = {}, set()
        said, unsaid = self._messages.take()
        upserts, gone = upserts + said, gone + unsaid
        # Evicted only now: an item dropped mid-batch would be reloaded without the changes
        # not yet written, and the index holds them only once the caller writes these.
        while len(self._items) > self._cache_items:
            self.kept.keep(*self._items.popitem(last=False))
        return upserts, gone

    def _unread(self) -> None:
        """Read the vectors the points about to be made need and items taken back from
        ``kept`` do not hold: one read for the whole batch."""
        wanted: dict[tuple[int, int], tuple[Item, int]] = {}
        for _, item, row in self._dirty.values():
            if item.unread:
                version = dict(row.attrs)["content_version"]
                if version in item.unread and version not in item.vectors:
                    wanted[id(item), version] = (item, version)
        if not wanted or self._read_vectors is None:
            return
        found = self._read_vectors([p for item, version in wanted.values()
                                    for p in item.unread[version]])
        for item, version in wanted.values():
            fill_vectors(item, version, found)

    # --- changes ---------------------------------------------------------------------------

    def _asserted(self, key: tuple[str, str], item: Item, e: Event) -> None:
        attrs = {f: e.payload.get(f) for f in _FIELDS}
        attrs.update(space=e.space_id, session=e.session_id, agent=e.agent_id,
                     subject_id=e.subject_id, layer=layer_of(e),
                     content_version=e.stream_version, content_at=_epoch(e.recorded_at))
        self._change(key, item, e, temporal.put(
            self._current(item), e.valid_from or e.recorded_at, e.valid_to,
            temporal.attrs_of(attrs), e.position, ()))

    def _revised(self, key: tuple[str, str], item: Item, e: Event) -> None:
        changes = {f: e.payload[f] for f in _FIELDS if e.payload.get(f) is not None}
        if "content" in changes:
            changes.update(content_version=e.stream_version, content_at=_epoch(e.recorded_at))
        self._change(key, item, e, temporal.patch(
            self._current(item), e.valid_from or e.recorded_at, e.valid_to, changes,
            e.position, ()))

    def _retracted(self, key: tuple[str, str], item: Item, e: Event) -> None:
        until = e.payload.get("valid_until")
        instant = datetime.fromisoformat(until) if isinstance(until, str) else (
            until or e.recorded_at)
        self._change(key, item, e, temporal.end_at(self._current(item), instant, e.position))

    def _superseded(self, key: tuple[str, str], item: Item, e: Event) -> None:
        until = e.payload.get("valid_until")
        instant = datetime.fromisoformat(until) if isinstance(until, str) else (
            until or e.recorded_at)
        self._change(key, item, e, temporal.end_at(self._current(item), instant, e.position))

    def _promoted(self, key: tuple[str, str], item: Item, e: Event) -> None:
        # The layer over all of the item's valid time, from this position on (as the
        # PostgreSQL model has it): searches as of before the promotion see the old layer.
        current = self._current(item)
        if current:
            self._change(key, item, e, temporal.patch(
                current, min(r.valid_from for r in current), None,
                {"layer": e.payload["layer"]}, e.position, ()))

    def _archived(self, key: tuple[str, str], item: Item, e: Event) -> None:
        # Forgotten: hidden from search from this position on, kept for as-of before it.
        item.archived_from = float(e.position)
        for row, point_id in item.rows:
            self._mark(key, item, row, point_id)

    def _comparable(self, model: str) -> bool:
        """Whether vectors of ``model`` are this index's (another model's, after the embedder
        was changed, are not comparable to queries: skipped, and remembered as such)."""
        if model == self._model:
            return True
        if model not in self.skipped_models:
            log.warning("vector index skips embeddings of model %s (index model: %s)",
                        model, self._model)
            self.skipped_models.add(model)
        return False

    def _embedded(self, key: tuple[str, str], item: Item, e: Event) -> None:
        # a vector read as None: its subject was erased since (the erasure drops the points)
        if e.payload["vector"] is None or not self._comparable(e.payload["model"]):
            return
        version = int(e.payload["item_version"])
        item.vectors[version] = array("f", e.payload["vector"])
        item.unread.pop(version, None)
        item.embedded_from[version] = float(e.position)
        for row, point_id in item.rows:
            if dict(row.attrs).get("content_version") == version:
                self._mark(key, item, row, point_id)

    # --- rows and points ---------------------------------------------------------------------

    def _change(self, key: tuple[str, str], item: Item, e: Event, change: temporal.Change
                ) -> None:
        closed = {id(r) for r in change.closed}
        rows = []
        for old, point_id in item.rows:
            row = replace(old, sys_to=e.position) if id(old) in closed else old
            if row is not old:
                self._mark(key, item, row, point_id)
            rows.append((row, point_id))
        for row in change.inserted:
            point_id = _point_id(key, row)
            rows.append((row, point_id))
            self._mark(key, item, row, point_id)
        item.rows = rows

    def _rollback(self, key: tuple[str, str], item: Item, position: int) -> None:
        """Undo what ``position`` and later did to the item (only after a redelivery)."""
        if not any(r.sys_from >= position or (r.sys_to or 0) >= position for r, _ in item.rows):
            return
        kept = []
        for old, point_id in item.rows:
            if old.sys_from >= position:
                self._gone.add(point_id)
                self._dirty.pop(point_id, None)
                continue
            reopened = old.sys_to is not None and old.sys_to >= position
            row = replace(old, sys_to=None) if reopened else old
            if reopened:
                self._mark(key, item, row, point_id)
            kept.append((row, point_id))
        item.rows = kept
        if item.archived_from >= position and item.archived_from != OPEN:
            item.archived_from = OPEN
            for row, point_id in item.rows:
                self._mark(key, item, row, point_id)

    @staticmethod
    def _current(item: Item) -> list[Version]:
        return [row for row, _ in item.rows if row.sys_to is None]

    def _mark(self, key: tuple[str, str], item: Item, row: Version, point_id: str) -> None:
        self._gone.discard(point_id)
        # Made in ``take`` from the item as it is then: whatever changes the point later in
        # the batch (its vector, the item archived, the row closed) marks it again anyway.
        self._dirty[point_id] = (key, item, row)

    def _item(self, key: tuple[str, str], *, new: bool = False) -> Item:
        """The item as folded so far. ``new``: the event starts the item's stream, so the
        index is not asked (most events are new items' assertions, and asking cost a filtered
        scroll each). After a redelivery the index may hold points from the first delivery:
        every one of them has an id the fold makes again, from this position on."""
        item = self._items.get(key)
        if item is None:
            item = self.kept.take(key) or (Item(rows=[]) if new else _item_of(self._load(*key)))
            self._items[key] = item
        else:
            self._items.move_to_end(key)
        return item


_CHANGES: dict[str, Callable[[VectorFold, tuple[str, str], Item, Event], None]] = {
    EventType.MEMORY_ASSERTED: VectorFold._asserted, EventType.MEMORY_REVISED: VectorFold._revised,
    EventType.MEMORY_RETRACTED: VectorFold._retracted,
    EventType.MEMORY_SUPERSEDED: VectorFold._superseded,
    EventType.MEMORY_ARCHIVED: VectorFold._archived,
    EventType.MEMORY_PROMOTED: VectorFold._promoted,
    # Learned importance patches the importance from when it was learned, as a revision would.
    EventType.IMPORTANCE_LEARNED: VectorFold._revised,
}


def _point_of(key: tuple[str, str], item: Item, row: Version, point_id: str
              ) -> IndexedPoint:
    attrs = dict(row.attrs)
    version = attrs["content_version"]
    keywords = item.keywords.get(version)
    if keywords is None:
        keywords = item.keywords[version] = sparse.encode_document(attrs["content"])
    return point_of(key, item.archived_from, row, point_id, item.vectors.get(version),
                    embedded_from=item.embedded_from.get(version), keywords=keywords)


def point_of(key: tuple[str, str], archived_from: float, row: Version, point_id: str,
             vector: Sequence[float] | None, *, embedded_from: float | None = None,
             keywords: SparseVector | None = None) -> IndexedPoint:
    """The point of ``row``; ``embedded_from``: the position its ``vector`` came at, if
    known (``EMBEDDED_FROM``); ``keywords``: its content's keyword vector, if made already."""
    a = dict(row.attrs)
    triple = a.get("triple") or {}
    payload = {
        "tenant": key[0], "item_id": key[1], "space": a["space"], "session": a["session"],
        "agent": a["agent"], "kind": a["kind"], "content": a["content"],
        "tags": list(a.get("tags") or ()), "importance": a["importance"],
        "confidence": a["confidence"], "subject": triple.get("subject"),
        "predicate": triple.get("predicate"), "content_version": a["content_version"],
        "content_at": a["content_at"], "valid_from": _epoch(row.valid_from),
        "valid_to": OPEN if row.valid_to is None else _epoch(row.valid_to),
        "sys_from": float(row.sys_from),
        "sys_to": OPEN if row.sys_to is None else float(row.sys_to),
        "archived_from": archived_from, "subject_id": a.get("subject_id"),
        "layer": a.get("layer") or ("session" if a["session"] else "project")}
    if vector is not None and embedded_from is not None:
        payload[EMBEDDED_FROM] = embedded_from
    return IndexedPoint(point_id, vector, payload, sparse.encode_document(a["content"])
                        if keywords is None else keywords)


def _item_of(points: list[IndexedPoint]) -> Item:
    """An item back from its points (empty for an item the index has not seen)."""
    item = Item(rows=[])
    for point in sorted(points, key=lambda p: (p.payload["sys_from"], p.payload["valid_from"])):
        p = point.payload
        attrs = {f: p.get(f) for f in ("kind", "content", "importance", "confidence")}
        triple = ({"subject": p["subject"], "predicate": p["predicate"]}
                  if p.get("subject") is not None else None)
        attrs.update(tags=tuple(p.get("tags") or ()), triple=triple, space=p["space"],
                     session=p["session"], agent=p["agent"], subject_id=p.get("subject_id"),
                     layer=p.get("layer"),
                     content_version=int(p["content_version"]), content_at=p["content_at"])
        row = Version(_instant(p["valid_from"]), None if p["valid_to"] >= OPEN else _instant(
            p["valid_to"]), int(p["sys_from"]), None if p["sys_to"] >= OPEN else int(p["sys_to"]),
            temporal.attrs_of(attrs))
        item.rows.append((row, point.point_id))
        item.archived_from = float(p.get("archived_from", OPEN))
        if point.vector is not None:
            item.vectors[int(p["content_version"])] = array("f", point.vector)
            if EMBEDDED_FROM in p:
                item.embedded_from[int(p["content_version"])] = float(p[EMBEDDED_FROM])
    return item


def _point_id(key: tuple[str, str], row: Version) -> str:
    # At one system position an item's rows never overlap in valid time: (sys_from,
    # valid_from) names a row for good.
    micros = round(_epoch(row.valid_from) * 1_000_000)
    return uuid5_text(f"{key[0]}/{key[1]}/{row.sys_from}/{micros}")


def uuid5_text(name: str) -> str:
    """``str(uuid.uuid5(_NAMESPACE, name))``, made without a ``UUID`` object in between (a
    third of the time: every row a fold makes is named so)."""
    digest = bytearray(hashlib.sha1(  # what UUIDv5 is: a name, not a secret
        _NAMESPACE_BYTES + name.encode(), usedforsecurity=False).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # the RFC 4122 variant
    h = digest.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _epoch(instant: datetime) -> float:
    return (instant - _EPOCH).total_seconds()


def _instant(seconds: float) -> datetime:
    # Epoch seconds as a double keep microseconds exactly for any date this service sees.
    return _EPOCH + timedelta(microseconds=round(seconds * 1_000_000))
