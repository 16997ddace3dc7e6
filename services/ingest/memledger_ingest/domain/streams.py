"""Stream identity and the state of a stream folded from its events."""

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, Literal
from uuid import UUID

from memledger_schemas.event_types import EventType
from memledger_schemas.streams import stream_id

StreamKind = Literal["space", "agent", "session", "item", "entity", "relation", "feedback",
                     "enrichment", "preference", "subject", "slot", "retrieval", "theme",
                     "importance"]
Status = Literal["active", "archived", "ended", "superseded", "retracted"]


@dataclass(frozen=True)
class StreamRef:
    """A stream named by what it holds; its id is derived per tenant, so two tenants that use
    the same item id or space name never share (or even see) a stream."""

    kind: StreamKind
    key: str

    def stream_id(self, tenant: str) -> UUID:
        return _stream_id(tenant, self.kind, self.key)


@lru_cache(maxsize=4_096)
def _stream_id(tenant: str, kind: str, key: str) -> UUID:
    # Cached for the hot streams (a space or session named by every command that touches it);
    # small, because every entry is an object the garbage collector walks.
    return stream_id(tenant, kind, key)


@dataclass(frozen=True)
class StreamState:
    """What the write side needs to know about a stream to decide on a command."""

    version: int
    space_id: str
    status: Status
    policy_version: int = 0
    subject: str | None = None
    """The data subject of the stream's personal data (set by its first event)."""
    holder: str | None = None
    """A slot's: ``<item_id>/<object digest>`` of the item that last claimed it."""
    cardinality: tuple[tuple[str, str], ...] = ()
    """A space's: (predicate, "single" | "multi") pairs of its policy, ("*", default) first."""
    policy: str | None = None
    """A space's: its latest policy (the payload of its last ``space.policy_set``) as JSON, what
    a policy update keeps of the fields it does not name. A string: the writer's cache holds
    states as values the garbage collector does not track."""

    def policy_fields(self) -> dict[str, Any]:
        """The latest policy's fields (none before the first)."""
        found: dict[str, Any] = json.loads(self.policy) if self.policy else {}
        return found

    def cardinality_of(self, predicate: str) -> str:
        table = dict(self.cardinality)
        return table.get(predicate.casefold(), table.get("*", "single"))


_STATUS_AFTER: dict[str, Status] = {
    EventType.SPACE_CREATED: "active",
    EventType.SPACE_ARCHIVED: "archived",
    EventType.AGENT_REGISTERED: "active",
    EventType.SESSION_STARTED: "active",
    EventType.SESSION_ENDED: "ended",
    EventType.MEMORY_ASSERTED: "active",
    EventType.MEMORY_SUPERSEDED: "superseded",
    EventType.MEMORY_RETRACTED: "retracted",
    EventType.MEMORY_ARCHIVED: "archived",
    EventType.ENTITY_UPSERTED: "active",
    EventType.RELATION_ASSERTED: "active",
    EventType.RELATION_RETRACTED: "retracted",
    EventType.FEEDBACK_RECORDED: "active",
}


STATEFUL = frozenset({EventType.SPACE_POLICY_SET, EventType.TRIPLE_CLAIMED})
"""Events whose payload the write side's stream state keeps something of."""


def evolve(state: StreamState | None, event_type: str, space_id: str,
           subject: str | None = None, payload: Mapping[str, Any] | None = None
           ) -> StreamState:
    """The state after one more event on the stream (events of other types keep the status;
    the subject is the first event's). ``payload`` is read for the two events whose content
    the write side needs: a policy (kept whole, and its cardinality) and a slot claim
    (holder)."""
    if state is None and event_type not in STATEFUL:
        # A stream's first event, the usual one in a write (every new item): one object.
        return StreamState(1, space_id, _STATUS_AFTER.get(event_type, "active"), 0, subject)
    if state is None:
        state = StreamState(version=0, space_id=space_id, status=_STATUS_AFTER.get(
            event_type, "active"), subject=subject)
    status = _STATUS_AFTER.get(event_type, state.status)
    changes: dict[str, Any] = {}
    if event_type == EventType.SPACE_POLICY_SET:
        changes["policy_version"] = state.policy_version + 1
        if payload is not None:
            changes["cardinality"] = cardinality_pairs(payload)
            changes["policy"] = json.dumps(dict(payload), sort_keys=True)
    elif event_type == EventType.TRIPLE_CLAIMED and payload is not None:
        changes["holder"] = f"{payload['item_id']}/{payload['object_digest']}"
    return replace(state, version=state.version + 1, status=status, **changes)


def cardinality_pairs(policy: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    default = str(policy.get("default_cardinality") or "single")
    named = sorted((str(k).casefold(), str(v)) for k, v in
                   (policy.get("cardinality") or {}).items())
    return (("*", default), *named)
