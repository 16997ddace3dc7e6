"""What the query service answers with: frozen models, shared by the projection and replay
paths (so the two can be compared value for value)."""

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class Basis(Frozen):
    """What an answer is based on. Passing ``position`` and ``valid_at`` back (as
    ``as_of_position`` and ``valid_at``) repeats the answer exactly."""

    position: int
    recorded_at: datetime | None
    valid_at: datetime


class Item(Frozen):
    item_id: str
    space_id: str
    kind: str
    status: str
    content: str
    triple: dict[str, Any] | None
    confidence: float
    importance: float
    tags: list[str]
    sources: list[dict[str, Any]]
    valid_from: datetime
    valid_to: datetime | None
    known_since_position: int
    session_id: str | None
    agent_id: str | None
    layer: str = "project"
    """"session" (found only by naming its session), "project" or "ecosystem"."""


class ItemAnswer(Frozen):
    basis: Basis
    item: Item


class ItemList(Frozen):
    basis: Basis
    items: list[Item]


class Rectangle(Frozen):
    """One version: true over [valid_from, valid_to), known over [sys_from, sys_to)."""

    valid_from: datetime
    valid_to: datetime | None
    sys_from: int
    sys_to: int | None
    attrs: dict[str, Any]
    event_id: str
    actor: str


class Change(Frozen):
    position: int
    recorded_at: datetime
    event_type: str
    event_id: str
    subject: str
    space_id: str
    actor: str | None
    reason: str | None
    valid_from: datetime | None
    valid_to: datetime | None
    payload: dict[str, Any]


class History(Frozen):
    basis: Basis
    item_id: str
    changes: list[Change]
    versions: list[Rectangle]


class ChangePage(Frozen):
    changes: list[Change]
    next_cursor: str
    position: int
    """The projection position the page was read at."""


class Message(Frozen):
    message_id: str
    session_id: str
    position: int
    role: str
    content: str
    participant: str | None
    agent_id: str | None
    recorded_at: datetime
    said_at: datetime
    """When it was said (the message's valid time; by default when it was recorded)."""


class Conversation(Frozen):
    basis: Basis
    session_id: str
    status: str
    messages: list[Message]


class SessionSummary(Frozen):
    session_id: str
    space_id: str
    title: str | None
    agent_id: str | None
    """The agent that started it."""
    status: str
    started_at: datetime
    ended_at: datetime | None
    messages: int
    participants: list[str]
    first_said_at: datetime | None
    last_said_at: datetime | None


class SessionList(Frozen):
    """A page of a space's sessions, most recently started first; pass ``next_cursor`` as
    ``after`` for the next (None: this was the last page)."""

    basis: Basis
    sessions: list[SessionSummary]
    next_cursor: str | None


class Entity(Frozen):
    entity_id: str
    name: str
    type: str
    aliases: list[str]


class Relation(Frozen):
    relation_id: str
    source_entity: str
    relation_type: str
    target_entity: str
    confidence: float
    status: str
    # Defaults only so a client can read an older server's answer, which had no interval.
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    """When the relation holds: [valid_from, valid_to), open-ended without ``valid_to``."""


class Graph(Frozen):
    basis: Basis
    entities: list[Entity]
    relations: list[Relation]


class Neighbour(Entity):
    depth: int
    """How many relations away from the entity asked about (1 to the depth asked for)."""


class Neighbours(Frozen):
    """The entities reached from ``entity`` over the relations live at the basis (either
    direction), and every relation walked to reach them."""

    basis: Basis
    entity: Entity
    neighbours: list[Neighbour]
    relations: list[Relation]


class Preference(Frozen):
    """A preference (or profile fact, habit, restriction...) the extraction rules found."""

    category: str
    value: str
    confidence: float
    rule_id: str
    source_item_id: str
    position: int
    recorded_at: datetime


class ChainItem(Frozen):
    """One item of a supersession chain, with its last version known at the basis."""

    item_id: str
    kind: str
    status: str
    created_position: int
    content: str | None
    triple: dict[str, Any] | None
    valid_from: datetime | None
    valid_to: datetime | None


class ChainLink(Frozen):
    item_id: str
    superseded_by: str
    reason: str | None
    """"contradiction", "restated", "merged: ...", or the reason a client gave."""
    position: int
    recorded_at: datetime
    valid_until: str | None
    actor: str | None


class ChainAnswer(Frozen):
    basis: Basis
    item_id: str
    items: list[ChainItem]
    links: list[ChainLink]


class PolicyVersion(Frozen):
    policy_version: int
    position: int
    recorded_at: datetime
    actor: str | None
    policy: dict[str, Any]


class PolicyHistory(Frozen):
    basis: Basis
    space_id: str
    versions: list[PolicyVersion]


class MergeSuggestion(Frozen):
    item_id: str
    similar_to: str
    similarity: float
    policy_version: int
    position: int
    recorded_at: datetime


class MergeSuggestions(Frozen):
    basis: Basis
    space_id: str
    suggestions: list[MergeSuggestion]


class SpaceSummary(Frozen):
    space_id: str
    name: str | None
    description: str | None
    status: str
    policy_version: int
    created_position: int
    created_at: datetime | None


class SpaceList(Frozen):
    """A page of spaces in ``space_id`` order; pass ``next_cursor`` as ``after`` for the next
    (None: this was the last page)."""

    basis: Basis
    spaces: list[SpaceSummary]
    next_cursor: str | None


class AgentSummary(Frozen):
    agent_id: str
    name: str | None
    description: str | None
    registered_at: datetime | None
    position: int


class AgentList(Frozen):
    """A page of agents in ``agent_id`` order; pass ``next_cursor`` as ``after``."""

    basis: Basis
    agents: list[AgentSummary]
    next_cursor: str | None


class ErasureReceipt(Frozen):
    position: int
    subject_id: str
    recorded_at: datetime | None
    purged: dict[str, dict[str, Any]]
    """Read model → what it purged for this erasure."""
    complete: bool
    """Whether every read model has reported."""


class ErasureList(Frozen):
    receipts: list[ErasureReceipt]


class SpaceStats(Frozen):
    """What a space holds at ``basis``: its items by kind and status, the most used tags of its
    active items, its sessions by status (as projected now), its messages, entities and
    relations (by status)."""

    basis: Basis
    space_id: str
    items: dict[str, dict[str, int]]
    """Kind → status (active, archived, superseded, retracted) → count."""
    tags: dict[str, int]
    """The most used tags of the active items valid now, most used first (at most 50)."""
    sessions: dict[str, int]
    messages: int
    entities: int
    relations: dict[str, int]
