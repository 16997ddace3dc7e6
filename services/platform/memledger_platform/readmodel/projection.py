"""The PostgreSQL read models as a pure fold of events (no I/O).

``Projection`` holds rows keyed like the tables they become: the projector fills one per batch
(seeded with the current rows of the items the batch touches, read from PostgreSQL) and writes
what changed; the replay path folds every event from position 1 into one, in memory, and
answers the same questions: the slow, authoritative oracle.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from memledger_platform.events import Event
from memledger_platform.readmodel import temporal
from memledger_platform.readmodel.temporal import Version
from memledger_schemas.event_types import EventType

Key = tuple[str, str]
"""(tenant_id, id) of a row."""

ITEM_FIELDS = ("kind", "content", "triple", "confidence", "importance", "tags", "sources")


@dataclass
class Projection:
    spaces: dict[Key, dict[str, Any]] = field(default_factory=dict)
    agents: dict[Key, dict[str, Any]] = field(default_factory=dict)
    sessions: dict[Key, dict[str, Any]] = field(default_factory=dict)
    messages: list[dict[str, Any]] = field(default_factory=list)
    preferences: list[dict[str, Any]] = field(default_factory=list)
    signals: list[dict[str, Any]] = field(default_factory=list)
    """Feedback on items and their reaffirmations, one row each (what learned utility counts)."""
    mentions: list[dict[str, Any]] = field(default_factory=list)
    items: dict[Key, dict[str, Any]] = field(default_factory=dict)
    rows: dict[Key, list[Version]] = field(default_factory=dict)
    """Every row of each item held here: current ones, and those closed while held."""
    entities: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    relations: dict[Key, dict[str, Any]] = field(default_factory=dict)
    changes: list[dict[str, Any]] = field(default_factory=list)
    dirty: set[tuple[str, Any]] = field(default_factory=set)
    position: int = 0
    recorded_at: datetime | None = None
    """When the event at ``position`` was recorded."""
    keep_changes: bool = True
    """Whether ``changes`` collects the change log (a rebuild writes it from the events)."""

    def apply(self, event: Event) -> None:
        """Fold one event (events must come in position order; older ones are ignored)."""
        if event.position <= self.position:
            return
        handler = _HANDLERS.get(event.event_type)
        if handler is not None:
            handler(self, event)
        if self.keep_changes:
            self.changes.append(_change_row(event))
        self.position, self.recorded_at = event.position, event.recorded_at

    def current(self, key: Key) -> list[Version]:
        return [r for r in self.rows.get(key, []) if r.sys_to is None]

    def change_rows(self, key: Key, change: temporal.Change, position: int) -> None:
        rows = self.rows.get(key, [])
        if change.closed:
            closed = {id(r) for r in change.closed}
            rows = [Version(r.valid_from, r.valid_to, r.sys_from, position, r.attrs, r.cause,
                            r.row_id) if id(r) in closed else r for r in rows]
        self.rows[key] = [*rows, *change.inserted]
        self.dirty.add(("rows", key))


# --- handlers: one per event type that changes a read model -------------------------------

def _space_created(p: Projection, e: Event) -> None:
    p.spaces[(e.tenant_id, e.space_id)] = {
        "tenant_id": e.tenant_id, "space_id": e.space_id, "name": e.payload.get("name"),
        "description": e.payload.get("description"), "status": "active", "policy": None,
        "policy_version": 0, "created_position": e.position, "updated_position": e.position,
        "created_at": e.recorded_at, "updated_at": e.recorded_at}
    p.dirty.add(("spaces", (e.tenant_id, e.space_id)))


def _space_updated(p: Projection, e: Event, **values: Any) -> None:
    space = p.spaces.get((e.tenant_id, e.space_id))
    if space is None:
        return
    space.update(values, updated_position=e.position, updated_at=e.recorded_at)
    p.dirty.add(("spaces", (e.tenant_id, e.space_id)))


def _policy_set(p: Projection, e: Event) -> None:
    _space_updated(p, e, policy=e.payload, policy_version=e.payload["policy_version"])


def _space_archived(p: Projection, e: Event) -> None:
    _space_updated(p, e, status="archived")


def _agent_registered(p: Projection, e: Event) -> None:
    agent_id = e.payload["agent_id"]
    p.agents[(e.tenant_id, agent_id)] = {
        "tenant_id": e.tenant_id, "agent_id": agent_id, "name": e.payload.get("name"),
        "description": e.payload.get("description"), "registered_at": e.recorded_at,
        "position": e.position}
    p.dirty.add(("agents", (e.tenant_id, agent_id)))


def _session_started(p: Projection, e: Event) -> None:
    session_id = e.payload["session_id"]
    p.sessions[(e.tenant_id, session_id)] = {
        "tenant_id": e.tenant_id, "space_id": e.space_id, "session_id": session_id,
        "agent_id": e.agent_id, "title": e.payload.get("title"), "status": "active",
        "started_at": e.recorded_at, "ended_at": None,
        "updated_position": e.position}
    p.dirty.add(("sessions", (e.tenant_id, session_id)))


def _session_ended(p: Projection, e: Event) -> None:
    session = p.sessions.get((e.tenant_id, e.payload["session_id"]))
    if session is not None:
        session.update(status="ended", ended_at=e.recorded_at, updated_position=e.position)
        p.dirty.add(("sessions", (e.tenant_id, e.payload["session_id"])))


def _message_appended(p: Projection, e: Event) -> None:
    p.messages.append({
        "tenant_id": e.tenant_id, "space_id": e.space_id,
        "session_id": e.payload["session_id"], "message_id": e.payload["message_id"],
        "position": e.position, "role": e.payload["role"],
        "content": e.payload["content"],
        "participant": e.payload.get("participant"), "agent_id": e.agent_id,
        "recorded_at": e.recorded_at, "said_at": e.valid_from or e.recorded_at})


def _preference_extracted(p: Projection, e: Event) -> None:
    p.preferences.append({
        "tenant_id": e.tenant_id, "space_id": e.space_id, "position": e.position,
        "source_item_id": e.payload["source_item_id"], "rule_id": e.payload["rule_id"],
        "category": e.payload["category"], "value": e.payload["value"],
        "confidence": e.payload["confidence"], "recorded_at": e.recorded_at})


def _entities_extracted(p: Projection, e: Event) -> None:
    # An extraction that found nothing (or whose entities were erased: they open to []) still
    # gets a row, nameless: it replaces the item's earlier extractions all the same.
    for ordinal, entity in enumerate(e.payload.get("entities") or [None]):
        name = entity["name"] if entity else None
        p.mentions.append({
            "tenant_id": e.tenant_id, "space_id": e.space_id,
            "item_id": e.payload["item_id"], "item_version": e.payload["item_version"],
            "position": e.position, "ordinal": ordinal, "name": name,
            "name_key": name_key(name) if name else None,
            "type": entity["type"] if entity else None})


def name_key(name: str) -> str:
    """How a name is matched: casefolded (so "Straße" finds "STRASSE")."""
    return name.casefold()


def _asserted(p: Projection, e: Event) -> None:
    key = (e.tenant_id, e.payload["item_id"])
    p.items[key] = {
        "tenant_id": e.tenant_id, "space_id": e.space_id, "item_id": e.payload["item_id"],
        "kind": e.payload["kind"], "status": "active", "superseded_by": None,
        "session_id": e.session_id, "agent_id": e.agent_id, "version": 1,
        "created_position": e.position, "updated_position": e.position,
        "created_at": e.recorded_at, "updated_at": e.recorded_at, "reaffirmed_at": None,
        "retracted_position": None, "superseded_position": None, "archived_position": None}
    p.dirty.add(("items", key))
    attrs = temporal.attrs_of({**{f: e.payload.get(f) for f in ITEM_FIELDS},
                               "layer": layer_of(e)})
    start = e.valid_from or e.recorded_at
    p.change_rows(key, temporal.put(p.current(key), start, e.valid_to, attrs, e.position,
                                    e.cause), e.position)


def _revised(p: Projection, e: Event) -> None:
    key = _touch(p, e)
    payload = e.payload
    changes = {f: v for f in ITEM_FIELDS if (v := payload.get(f)) is not None}
    start = e.valid_from or e.recorded_at
    p.change_rows(key, temporal.patch(p.current(key), start, e.valid_to, changes, e.position,
                                      e.cause), e.position)


def _ended(p: Projection, e: Event, status: str, instant: datetime) -> None:
    key = _touch(p, e, status=status, superseded_by=e.payload.get("superseded_by"),
                 **{f"{status}_position": e.position})
    p.change_rows(key, temporal.end_at(p.current(key), instant, e.position, e.cause),
                  e.position)


def _retracted(p: Projection, e: Event) -> None:
    _ended(p, e, "retracted", _instant(e.payload.get("valid_until")) or e.recorded_at)


def _superseded(p: Projection, e: Event) -> None:
    _ended(p, e, "superseded", _instant(e.payload.get("valid_until")) or e.recorded_at)


def _promoted(p: Projection, e: Event) -> None:
    _reclassify(p, e, {"layer": e.payload["layer"]})


def _merged(p: Projection, e: Event) -> None:
    # The survivor keeps the provenance of every duplicate folded into it.
    current = p.current((e.tenant_id, e.payload["item_id"]))
    known = list(dict(current[0].attrs).get("sources") or ()) if current else []
    sources = known + [s for s in e.payload.get("sources", ()) if s not in known]
    _reclassify(p, e, {"sources": sources})


def _reclassify(p: Projection, e: Event, changes: dict[str, Any]) -> None:
    """Change attributes over all of the item's valid time, from this position on: what it
    is (its layer, its provenance) rather than what was true when."""
    key = _touch(p, e)
    current = p.current(key)
    if current:
        start = min(r.valid_from for r in current)
        p.change_rows(key, temporal.patch(current, start, None, changes, e.position, e.cause),
                      e.position)


def layer_of(e: Event) -> str:
    """The layer an assertion put its item in (v1 events name none: from the envelope)."""
    layer = e.payload.get("layer")
    return str(layer) if layer else ("session" if e.session_id else "project")


def _reaffirmed(p: Projection, e: Event) -> None:
    _touch(p, e, reaffirmed_at=e.recorded_at)
    _signal(p, e, "reaffirmed")


def _feedback_recorded(p: Projection, e: Event) -> None:
    _signal(p, e, e.payload["signal"], e.payload.get("rating"))


def _signal(p: Projection, e: Event, signal: str, rating: int | None = None) -> None:
    # No comment kept: it is personal, and ranking needs only the signal.
    p.signals.append({
        "tenant_id": e.tenant_id, "space_id": e.space_id, "position": e.position,
        "item_id": e.payload["item_id"], "signal": signal, "rating": rating,
        "recorded_at": e.recorded_at})


def _archived(p: Projection, e: Event) -> None:
    # Forgotten by policy or request: gone from current state, kept in history and as-of.
    _touch(p, e, status="archived", archived_position=e.position)


def _touch(p: Projection, e: Event, **values: Any) -> Key:
    key = (e.tenant_id, e.payload["item_id"])
    item = p.items.get(key)
    if item is not None:
        if values:
            item.update({k: v for k, v in values.items() if v is not None})
        item["version"] += 1
        item["updated_position"], item["updated_at"] = e.position, e.recorded_at
        p.dirty.add(("items", key))
    return key


def _entity_upserted(p: Projection, e: Event) -> None:
    key = (e.tenant_id, e.space_id, e.payload["entity_id"])
    created = p.entities[key]["created_position"] if key in p.entities else e.position
    p.entities[key] = {
        "tenant_id": e.tenant_id, "space_id": e.space_id, "entity_id": e.payload["entity_id"],
        "name": e.payload["name"], "type": e.payload["type"],
        "aliases": list(e.payload.get("aliases", ())), "created_position": created,
        "updated_position": e.position}
    p.dirty.add(("entities", key))


def _relation_asserted(p: Projection, e: Event) -> None:
    key = (e.tenant_id, e.payload["relation_id"])
    p.relations[key] = {
        "tenant_id": e.tenant_id, "space_id": e.space_id,
        "relation_id": e.payload["relation_id"], "source_entity": e.payload["source_entity"],
        "relation_type": e.payload["relation_type"],
        "target_entity": e.payload["target_entity"], "confidence": e.payload["confidence"],
        "status": "active", "valid_from": e.valid_from or e.recorded_at,
        "valid_to": e.valid_to, "asserted_position": e.position, "retracted_position": None}
    p.dirty.add(("relations", key))


def _relation_retracted(p: Projection, e: Event) -> None:
    key = (e.tenant_id, e.payload["relation_id"])
    relation = p.relations.get(key)
    if relation is not None:
        relation.update(status="retracted", retracted_position=e.position)
        p.dirty.add(("relations", key))


_HANDLERS: dict[str, Callable[[Projection, Event], None]] = {
    EventType.SPACE_CREATED: _space_created, EventType.SPACE_POLICY_SET: _policy_set,
    EventType.SPACE_ARCHIVED: _space_archived, EventType.AGENT_REGISTERED: _agent_registered,
    EventType.SESSION_STARTED: _session_started, EventType.SESSION_ENDED: _session_ended,
    EventType.MESSAGE_APPENDED: _message_appended, EventType.MEMORY_ASSERTED: _asserted,
    EventType.MEMORY_REVISED: _revised, EventType.MEMORY_RETRACTED: _retracted,
    EventType.MEMORY_SUPERSEDED: _superseded, EventType.MEMORY_REAFFIRMED: _reaffirmed,
    EventType.MEMORY_ARCHIVED: _archived, EventType.MEMORY_PROMOTED: _promoted,
    EventType.MEMORY_MERGED: _merged,
    EventType.PREFERENCE_EXTRACTED: _preference_extracted,
    EventType.FEEDBACK_RECORDED: _feedback_recorded,
    EventType.ENTITIES_EXTRACTED: _entities_extracted, EventType.ENTITY_UPSERTED: _entity_upserted,
    EventType.RELATION_ASSERTED: _relation_asserted,
    EventType.RELATION_RETRACTED: _relation_retracted,
}


ITEM_CHANGES = frozenset({
    EventType.MEMORY_REVISED, EventType.MEMORY_RETRACTED, EventType.MEMORY_SUPERSEDED,
    EventType.MEMORY_REAFFIRMED, EventType.MEMORY_ARCHIVED, EventType.MEMORY_PROMOTED,
    EventType.MEMORY_MERGED})
"""The events whose handlers change an item that existed before them (its row and its
rows in time, which a batch must read first); an enrichment (an embedding, the entities
found) changes none."""


_SUBJECTS = ("item_id", "session_id", "entity_id", "relation_id", "feedback_id", "agent_id",
             "retrieval_id", "theme_id")


def subject_of(e: Event) -> str:
    """What an event is about, for the change log: its first id, else its space."""
    payload = e.payload
    for k in _SUBJECTS:
        if k in payload:
            return str(payload[k])
    return e.space_id


def _change_row(e: Event) -> dict[str, Any]:
    """One row of the change log: what changed, where, when on both axes, who, and why."""
    return {"position": e.position, "tenant_id": e.tenant_id, "space_id": e.space_id,
            "event_type": e.event_type, "event_id": e.event_id, "subject": subject_of(e),
            "actor": e.actor, "reason": e.payload.get("reason"), "recorded_at": e.recorded_at,
            "valid_from": e.valid_from, "valid_to": e.valid_to,
            "payload": {k: v for k, v in e.payload.items() if k != "vector"}}


def _instant(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value))

