"""The v1 event catalogue: one frozen payload model per (event_type, schema_version).

``event_type`` strings are stable names of what happened, never import paths. The envelope
(``envelope.py``) carries the payload as a plain mapping; ``CATALOGUE`` maps each event type to
its current payload model, and ``upcasting.py`` lifts older stored versions to it on read.
"""

from typing import Annotated, ClassVar, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from memledger_schemas.types import AgentId, Content, ShortText, Tag, Unit, UtcDatetime

MemoryKind = Literal[
    "fact", "decision", "preference", "observation", "procedure", "episode", "correction",
    "steering_rule",
]
Role = Literal["user", "assistant", "system", "tool"]
Right = Literal["read", "write", "admin"]
Reason = Annotated[str, StringConstraints(min_length=1, max_length=2_048)]
EntityRef = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_:.@/-]{1,128}$")]


class Payload(BaseModel):
    """Base of every event payload: immutable, unknown fields rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    event_type: ClassVar[str]
    schema_version: ClassVar[int] = 1


class Triple(BaseModel):
    """An optional subject-predicate-object reading of a memory item."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    subject: ShortText
    predicate: ShortText
    object: ShortText


class SourceRef(BaseModel):
    """Where a memory came from (provenance)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    type: Literal["message", "item", "document", "url", "event", "tool", "other"]
    ref: ShortText


class Member(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    principal: ShortText
    rights: tuple[Right, ...] = Field(min_length=1)


# --- spaces, agents, sessions -------------------------------------------------------------


class SpaceCreated(Payload):
    event_type: ClassVar[str] = "space.created"
    name: ShortText | None = None
    description: Content | None = None


class SpacePolicySet(Payload):
    """A new version of a space's policy; ``policy_version`` increases by one each time."""

    event_type: ClassVar[str] = "space.policy_set"
    policy_version: int = Field(ge=1)
    retention_days: dict[MemoryKind, int] = Field(default_factory=dict)
    decay_half_life_days: dict[MemoryKind, float] = Field(default_factory=dict)
    session_ttl_seconds: int | None = Field(default=None, ge=1)
    max_items: int | None = Field(default=None, ge=1)
    legal_hold: bool = False
    members: tuple[Member, ...] = ()


class SpaceArchived(Payload):
    event_type: ClassVar[str] = "space.archived"
    reason: Reason | None = None


class AgentRegistered(Payload):
    event_type: ClassVar[str] = "agent.registered"
    agent_id: AgentId
    name: ShortText | None = None
    description: Content | None = None


class SessionStarted(Payload):
    event_type: ClassVar[str] = "session.started"
    session_id: UUID
    title: ShortText | None = None


class SessionEnded(Payload):
    event_type: ClassVar[str] = "session.ended"
    session_id: UUID
    reason: Reason | None = None


# --- conversation ---------------------------------------------------------------------------


class ConversationMessageAppendedV1(Payload):
    """Superseded by v2 (``text`` renamed ``content``; ``participant`` added). Read-only."""

    event_type: ClassVar[str] = "conversation.message_appended"
    schema_version: ClassVar[int] = 1
    session_id: UUID
    message_id: UUID
    role: Role
    text: Content


class ConversationMessageAppended(Payload):
    event_type: ClassVar[str] = "conversation.message_appended"
    schema_version: ClassVar[int] = 2
    session_id: UUID
    message_id: UUID
    role: Role
    content: Content
    participant: ShortText | None = None


# --- memory items ---------------------------------------------------------------------------


class MemoryAsserted(Payload):
    event_type: ClassVar[str] = "memory.asserted"
    item_id: UUID
    kind: MemoryKind
    content: Content
    triple: Triple | None = None
    confidence: Unit = 1.0
    importance: Unit = 0.5
    tags: tuple[Tag, ...] = Field(default=(), max_length=32)
    sources: tuple[SourceRef, ...] = Field(default=(), max_length=32)


class MemoryRevised(Payload):
    """New content or attributes. With a valid interval on the envelope it corrects the record
    for that interval only."""

    event_type: ClassVar[str] = "memory.revised"
    item_id: UUID
    content: Content | None = None
    triple: Triple | None = None
    confidence: Unit | None = None
    importance: Unit | None = None
    tags: tuple[Tag, ...] | None = Field(default=None, max_length=32)
    reason: Reason | None = None


class MemorySuperseded(Payload):
    event_type: ClassVar[str] = "memory.superseded"
    item_id: UUID
    superseded_by: UUID
    reason: Reason


class MemoryRetracted(Payload):
    """The item stopped being true at ``valid_until`` (default: when recorded)."""

    event_type: ClassVar[str] = "memory.retracted"
    item_id: UUID
    valid_until: UtcDatetime | None = None
    reason: Reason | None = None


class MemoryReaffirmed(Payload):
    event_type: ClassVar[str] = "memory.reaffirmed"
    item_id: UUID
    confidence: Unit | None = None
    reason: Reason | None = None


class MemoryArchived(Payload):
    """Forgotten by policy or by request; stays in history and as-of views."""

    event_type: ClassVar[str] = "memory.archived"
    item_id: UUID
    reason: Reason
    policy_version: int | None = Field(default=None, ge=1)


# --- enrichment -----------------------------------------------------------------------------


class MemoryEmbedded(Payload):
    event_type: ClassVar[str] = "memory.embedded"
    item_id: UUID
    item_version: int = Field(ge=1)
    model: ShortText
    dims: int = Field(ge=1, le=8_192)
    vector: tuple[float, ...]


class ExtractedEntity(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    name: ShortText
    type: ShortText


class MemoryEntitiesExtracted(Payload):
    event_type: ClassVar[str] = "memory.entities_extracted"
    item_id: UUID
    item_version: int = Field(ge=1)
    extractor: ShortText
    entities: tuple[ExtractedEntity, ...] = Field(max_length=256)


class PreferenceExtracted(Payload):
    event_type: ClassVar[str] = "preference.extracted"
    source_item_id: UUID
    rule_id: ShortText
    category: ShortText
    value: Content
    confidence: Unit


# --- graph ----------------------------------------------------------------------------------


class EntityUpserted(Payload):
    event_type: ClassVar[str] = "entity.upserted"
    entity_id: EntityRef
    name: ShortText
    type: ShortText
    aliases: tuple[ShortText, ...] = Field(default=(), max_length=64)


class RelationAsserted(Payload):
    event_type: ClassVar[str] = "relation.asserted"
    relation_id: UUID
    source_entity: EntityRef
    relation_type: ShortText
    target_entity: EntityRef
    confidence: Unit = 1.0


class RelationRetracted(Payload):
    event_type: ClassVar[str] = "relation.retracted"
    relation_id: UUID
    reason: Reason | None = None


# --- feedback, audit, privacy ---------------------------------------------------------------


class FeedbackRecorded(Payload):
    event_type: ClassVar[str] = "feedback.recorded"
    feedback_id: UUID
    item_id: UUID
    signal: Literal["rating", "used", "unused"]
    rating: int | None = Field(default=None, ge=1, le=5)
    retrieval_id: UUID | None = None
    comment: Content | None = None


class RetrievalBasis(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    position: int = Field(ge=0)
    recorded_at: UtcDatetime | None
    valid_at: UtcDatetime


class RetrievalPerformed(Payload):
    event_type: ClassVar[str] = "retrieval.performed"
    retrieval_id: UUID
    query: Content
    basis: RetrievalBasis
    item_ids: tuple[UUID, ...]
    scores: tuple[float, ...]
    policy_version: ShortText


class SubjectErased(Payload):
    """No personal data: only ids, so the erasure itself can be replayed forever."""

    event_type: ClassVar[str] = "subject.erased"
    subject_id: ShortText
    key_id: ShortText
    reason: Reason | None = None


CURRENT: tuple[type[Payload], ...] = (
    SpaceCreated, SpacePolicySet, SpaceArchived, AgentRegistered, SessionStarted, SessionEnded,
    ConversationMessageAppended, MemoryAsserted, MemoryRevised, MemorySuperseded,
    MemoryRetracted, MemoryReaffirmed, MemoryArchived, MemoryEmbedded, MemoryEntitiesExtracted,
    PreferenceExtracted, EntityUpserted, RelationAsserted, RelationRetracted, FeedbackRecorded,
    RetrievalPerformed, SubjectErased,
)
"""The current version of every event type."""

HISTORIC: tuple[type[Payload], ...] = (ConversationMessageAppendedV1,)
"""Published older versions, kept for their JSON Schema snapshot and upcasting tests."""

CATALOGUE: dict[str, type[Payload]] = {p.event_type: p for p in CURRENT}
