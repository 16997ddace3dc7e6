"""The replay path: answer by folding the events themselves, in memory, up to a position.

Slow (it reads the log from the start) and authoritative: it shares no code with the SQL of
``views`` beyond the pure fold (``memledger_platform.readmodel.projection``), so comparing the
two is the test oracle for the read models. ``source=replay`` on a read uses it.
"""

from datetime import datetime
from typing import Any

from memledger_platform.crypto import Opener
from memledger_platform.events import VECTOR, decode
from memledger_platform.eventstore import EventStore
from memledger_platform.readmodel import temporal
from memledger_platform.readmodel.projection import Projection
from memledger_platform.readmodel.temporal import Version
from memledger_schemas.api.reads import Basis, Item

_BATCH = 5_000
_CLOSED = Opener(None)
"""Without a keyring, sealed fields read as their placeholders."""


def fold(store: EventStore, tenant: str, *, up_to: int | None = None,
         recorded_until: datetime | None = None, opener: Opener | None = None) -> Projection:
    """The tenant's read models after every event at or before ``up_to`` (and recorded at or
    before ``recorded_until``), folded from the event store."""
    projection, after = Projection(), 0
    while True:
        events = store.read_all(after, _BATCH)
        for recorded in events:
            if (up_to is not None and recorded.position > up_to) or (
                    recorded_until is not None and recorded.recorded_at > recorded_until):
                return projection
            event = decode(recorded.data, position=recorded.position,
                           recorded_at=recorded.recorded_at, opener=opener or _CLOSED,
                           skip=VECTOR)
            if event.tenant_id == tenant:
                projection.apply(event)
            else:  # another tenant's: it still moves the basis
                projection.position, projection.recorded_at = (recorded.position,
                                                               recorded.recorded_at)
        if len(events) < _BATCH:
            return projection
        after = events[-1].position


def basis(store: EventStore, tenant: str, valid_at: datetime, position: int | None,
          recorded_at: datetime | None, opener: Opener | None = None
          ) -> tuple[Basis, Projection]:
    """The basis of a replayed read, and the fold it is answered from."""
    if position is None and recorded_at is None:
        position = store.max_position()
    projection = fold(store, tenant, up_to=position, recorded_until=recorded_at,
                      opener=opener)
    at_position = position if position is not None else projection.position
    return Basis(position=at_position, recorded_at=recorded_at or projection.recorded_at,
                 valid_at=valid_at), projection


def item(projection: Projection, tenant: str, space: str, item_id: str, at: Basis
         ) -> Item | None:
    meta = projection.items.get((tenant, item_id))
    if meta is None or meta["space_id"] != space:
        return None
    row = temporal.as_of(projection.rows.get((tenant, item_id), []), at.valid_at, at.position)
    return _item(meta, row, at.position) if row is not None else None


def items(projection: Projection, tenant: str, space: str, at: Basis, *,
          include_archived: bool = False, limit: int = 100) -> list[Item]:
    found = []
    for (item_tenant, item_id), meta in sorted(projection.items.items(),
                                               key=lambda kv: kv[0][1]):
        if item_tenant != tenant or meta["space_id"] != space:
            continue
        if not include_archived and _at_or_before(meta["archived_position"], at.position):
            continue
        answer = item(projection, tenant, space, item_id, at)
        if answer is not None:
            found.append(answer)
    return found[:limit]


def _status(meta: dict[str, Any], position: int) -> str:
    for status in ("archived", "superseded", "retracted"):
        if _at_or_before(meta[f"{status}_position"], position):
            return status
    return "active"


def _at_or_before(value: int | None, position: int) -> bool:
    return value is not None and value <= position


def _item(meta: dict[str, Any], row: Version, position: int) -> Item:
    attrs = dict(row.attrs)
    return Item(item_id=meta["item_id"], space_id=meta["space_id"], kind=meta["kind"],
                status=_status(meta, position), content=attrs["content"],
                triple=attrs.get("triple"), confidence=attrs["confidence"],
                importance=attrs["importance"], tags=list(attrs.get("tags") or ()),
                sources=list(attrs.get("sources") or ()), valid_from=row.valid_from,
                valid_to=row.valid_to, known_since_position=row.sys_from,
                session_id=meta["session_id"], agent_id=meta["agent_id"],
                layer=attrs.get("layer") or ("session" if meta["session_id"] else "project"))
