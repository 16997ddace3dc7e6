"""The v1 event catalogue: one frozen payload model per (event_type, schema_version).

``event_type`` strings are stable names of what happened, never import paths. The envelope
(``envelope.py``) carries the payload as a plain mapping; ``CATALOGUE`` maps each event type to
its current payload model, and ``upcasting.py`` lifts older stored versions to it on read.
"""

from typing import Annotated, Any, ClassVar, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from memledger_schemas.types import (
    AgentId,
    Content,
    ShortText,
    SpaceId,
    Tag,
    Unit,
    UtcDatetime,
)

MemoryKind = Literal[
    "fact", "decision", "preference", "observation", "procedure", "episode", "correction",
    "steering_rule",
]
Role = Literal["user", "assistant", "system", "tool"]
Layer = Literal["session", "project", "ecosystem"]
"""Where a memory lives: its session (expires with it), its project space, or the tenant's
ecosystem (patterns and standards, permanent)."""
Cardinality = Literal["single", "multi"]
"""Whether a triple predicate holds one object at a time (a new one contradicts the old)."""
Consolidation = Literal["off", "suggest", "merge"]
Right = Literal["read", "write", "admin"]
Reason = Annotated[str, StringConstraints(min_length=1, max_length=2_048)]
EntityRef = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_:.@/-]{1,128}$")]
MAX_THEME_MEMBERS = 500
"""The most members a theme event names (its closest to the centre)."""


class Payload(BaseModel):
    """Base of every event payload: immutable, unknown fields rejected."""

    # Validators are built on first use: a consumer decodes a few of the event types.
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    event_type: ClassVar[str]
    schema_version: ClassVar[int] = 1
    about: ClassVar[str] = ""
    """What happened, in a line, for the generated catalogue (kept out of the JSON Schema, so
    a published snapshot never changes for a reworded sentence); the docstring if empty."""


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
    about: ClassVar[str] = "A space: the unit of scope, policy and grants within a tenant."
    event_type: ClassVar[str] = "space.created"
    name: ShortText | None = None
    description: Content | None = None


class SpacePolicySetV1(Payload):
    """Superseded by v2 (lifecycle fields added, all optional). Read-only."""

    event_type: ClassVar[str] = "space.policy_set"
    policy_version: int = Field(ge=1)
    retention_days: dict[MemoryKind, int] = Field(default_factory=dict)
    decay_half_life_days: dict[MemoryKind, float] = Field(default_factory=dict)
    session_ttl_seconds: int | None = Field(default=None, ge=1)
    max_items: int | None = Field(default=None, ge=1)
    legal_hold: bool = False
    members: tuple[Member, ...] = ()


class SpacePolicySetV2(Payload):
    """A new version of a space's policy; ``policy_version`` increases by one each time.

    A version governs the items recorded after it; with ``retroactive`` it governs the items
    recorded before it too. ``legal_hold`` always applies to everything in the space."""

    # Superseded by v3 (``theme_cosine`` added). Read-only. Its first title and docstring, so
    # its published snapshot stays exactly as it was.
    model_config = ConfigDict(frozen=True, extra="forbid", title="SpacePolicySet")
    event_type: ClassVar[str] = "space.policy_set"
    schema_version: ClassVar[int] = 2
    policy_version: int = Field(ge=1)
    retention_days: dict[MemoryKind, int] = Field(default_factory=dict)
    layer_retention_days: dict[Layer, int] = Field(default_factory=dict)
    decay_half_life_days: dict[MemoryKind, float] = Field(default_factory=dict)
    forget_below: Unit | None = None
    session_ttl_seconds: int | None = Field(default=None, ge=1)
    max_items: int | None = Field(default=None, ge=1)
    legal_hold: bool = False
    retroactive: bool = False
    cardinality: dict[ShortText, Cardinality] = Field(default_factory=dict)
    default_cardinality: Cardinality = "single"
    consolidation: Consolidation = "off"
    merge_cosine: float = Field(default=0.92, gt=0.0, le=1.0)
    audit_retrievals: bool = False
    members: tuple[Member, ...] = ()


class SpacePolicySet(Payload):
    """A new version of a space's policy; ``policy_version`` increases by one each time.

    A version governs the items recorded after it; with ``retroactive`` it governs the items
    recorded before it too. ``legal_hold`` always applies to everything in the space."""

    event_type: ClassVar[str] = "space.policy_set"
    schema_version: ClassVar[int] = 3
    policy_version: int = Field(ge=1)
    retention_days: dict[MemoryKind, int] = Field(default_factory=dict)
    layer_retention_days: dict[Layer, int] = Field(default_factory=dict)
    decay_half_life_days: dict[MemoryKind, float] = Field(default_factory=dict)
    forget_below: Unit | None = None
    session_ttl_seconds: int | None = Field(default=None, ge=1)
    max_items: int | None = Field(default=None, ge=1)
    legal_hold: bool = False
    retroactive: bool = False
    cardinality: dict[ShortText, Cardinality] = Field(default_factory=dict)
    default_cardinality: Cardinality = "single"
    consolidation: Consolidation = "off"
    merge_cosine: float = Field(default=0.92, gt=0.0, le=1.0)
    audit_retrievals: bool = False
    members: tuple[Member, ...] = ()
    theme_cosine: float | None = Field(default=None, gt=0.0, le=1.0)
    """Group the space's memories into themes of at least this cosine similarity to their
    centre (``None``: no themes)."""


class SpaceArchived(Payload):
    about: ClassVar[str] = "The space takes no more writes; what it holds stays readable."
    event_type: ClassVar[str] = "space.archived"
    reason: Reason | None = None


class AgentRegistered(Payload):
    about: ClassVar[str] = "An agent known to the tenant (events name it in agent_id)."
    event_type: ClassVar[str] = "agent.registered"
    agent_id: AgentId
    name: ShortText | None = None
    description: Content | None = None


class SessionStarted(Payload):
    about: ClassVar[str] = "A conversation (or task) began in the space."
    event_type: ClassVar[str] = "session.started"
    session_id: UUID
    title: ShortText | None = None


class SessionEnded(Payload):
    about: ClassVar[str] = "The session ended; session memory may expire after it."
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
    about: ClassVar[str] = ("One turn of a session: who said what, in which role; valid from "
                            "when it was said (the command's said_at, default: recorded).")
    event_type: ClassVar[str] = "conversation.message_appended"
    schema_version: ClassVar[int] = 2
    session_id: UUID
    message_id: UUID
    role: Role
    content: Content
    participant: ShortText | None = None


# --- memory items ---------------------------------------------------------------------------


class MemoryAssertedV1(Payload):
    """Superseded by v2 (``layer`` added). Read-only."""

    event_type: ClassVar[str] = "memory.asserted"
    item_id: UUID
    kind: MemoryKind
    content: Content
    triple: Triple | None = None
    confidence: Unit = 1.0
    importance: Unit = 0.5
    tags: tuple[Tag, ...] = Field(default=(), max_length=32)
    sources: tuple[SourceRef, ...] = Field(default=(), max_length=32)


class MemoryAssertedV2(Payload):
    about: ClassVar[str] = "Superseded by v3 (``derivation`` added). Read-only."
    # No docstring and its first title, so its published snapshot stays exactly as it was.
    model_config = ConfigDict(frozen=True, extra="forbid", title="MemoryAsserted")
    event_type: ClassVar[str] = "memory.asserted"
    schema_version: ClassVar[int] = 2
    item_id: UUID
    kind: MemoryKind
    content: Content
    triple: Triple | None = None
    confidence: Unit = 1.0
    importance: Unit = 0.5
    tags: tuple[Tag, ...] = Field(default=(), max_length=32)
    sources: tuple[SourceRef, ...] = Field(default=(), max_length=32)
    layer: Layer | None = None
    """``None`` (every v1 event): "session" when the envelope names a session, else
    "project"."""


class Derivation(BaseModel):
    """What derived a memory from its sources: the extractor (with its model, if any) and the
    version of its prompt or rules, so an audit can tell which produced it."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    extractor: ShortText
    prompt_version: ShortText


class MemoryAsserted(Payload):
    about: ClassVar[str] = ("A new memory item: kind, content, triple, confidence, tags, layer; "
                            "a derived one names its extractor and prompt version.")
    event_type: ClassVar[str] = "memory.asserted"
    schema_version: ClassVar[int] = 3
    item_id: UUID
    kind: MemoryKind
    content: Content
    triple: Triple | None = None
    confidence: Unit = 1.0
    importance: Unit = 0.5
    tags: tuple[Tag, ...] = Field(default=(), max_length=32)
    sources: tuple[SourceRef, ...] = Field(default=(), max_length=32)
    layer: Layer | None = None
    """``None`` (every v1 event): "session" when the envelope names a session, else
    "project"."""
    derivation: Derivation | None = None
    """Set when an enricher derived the item from its ``sources`` (``None``: written by a
    client)."""


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


class MemorySupersededV1(Payload):
    """Superseded by v2 (``valid_until`` added). Read-only."""

    event_type: ClassVar[str] = "memory.superseded"
    item_id: UUID
    superseded_by: UUID
    reason: Reason


class MemorySuperseded(Payload):
    """Replaced by another item: by request, by a contradicting triple (reason
    "contradiction") or by a merge of near-duplicates (reason "merged"). The item stops being
    true at ``valid_until`` (default: when recorded)."""

    event_type: ClassVar[str] = "memory.superseded"
    schema_version: ClassVar[int] = 2
    item_id: UUID
    superseded_by: UUID
    reason: Reason
    valid_until: UtcDatetime | None = None


class MemoryRetracted(Payload):
    """The item stopped being true at ``valid_until`` (default: when recorded)."""

    event_type: ClassVar[str] = "memory.retracted"
    item_id: UUID
    valid_until: UtcDatetime | None = None
    reason: Reason | None = None


class MemoryReaffirmed(Payload):
    about: ClassVar[str] = "The item was confirmed again: a signal that resets its decay."
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


class MemoryPromoted(Payload):
    """Moved up a layer: a session's memory made part of its project, or a project's made
    part of the tenant's ecosystem."""

    event_type: ClassVar[str] = "memory.promoted"
    item_id: UUID
    layer: Literal["project", "ecosystem"]
    reason: Reason | None = None


class MemoryMerged(Payload):
    """Near-duplicates folded into this item (each of them is superseded, reason "merged");
    it keeps the provenance of all of them."""

    event_type: ClassVar[str] = "memory.merged"
    item_id: UUID
    merged_item_ids: tuple[UUID, ...] = Field(min_length=1, max_length=64)
    sources: tuple[SourceRef, ...] = Field(default=(), max_length=256)
    similarity: float = Field(ge=-1.0, le=1.0)
    reason: Reason


class MergeSuggested(Payload):
    """A near-duplicate found by consolidation, offered rather than merged (by policy)."""

    event_type: ClassVar[str] = "memory.merge_suggested"
    item_id: UUID
    similar_to: UUID
    similarity: float = Field(ge=-1.0, le=1.0)
    policy_version: int = Field(ge=1)


class TripleClaimed(Payload):
    """An item now holds a single-valued (subject, predicate) slot of its space: the write
    side's memory of who holds it, so that the next assertion for the slot supersedes it.
    ``object_digest`` (a hash, not the object: the object is personal data) tells a
    restatement from a contradiction."""

    event_type: ClassVar[str] = "triple.claimed"
    item_id: UUID
    object_digest: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{16,64}$")]


# --- enrichment -----------------------------------------------------------------------------


class MemoryEmbedded(Payload):
    about: ClassVar[str] = "The enricher's embedding of one version of an item (its model)."
    event_type: ClassVar[str] = "memory.embedded"
    item_id: UUID
    item_version: int = Field(ge=1)
    model: ShortText
    dims: int = Field(ge=1, le=8_192)
    vector: tuple[float, ...]


class ConversationMessageEmbedded(Payload):
    """The vector of a conversation message's content (the message's valid time is when it
    was said: its ``conversation.message_appended``'s ``valid_from``)."""

    about: ClassVar[str] = "The enricher's embedding of a conversation message (its model)."
    event_type: ClassVar[str] = "conversation.message_embedded"
    session_id: UUID
    message_id: UUID
    model: ShortText
    dims: int = Field(ge=1, le=8_192)
    vector: tuple[float, ...]


class ExtractedEntity(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    name: ShortText
    type: ShortText


class MemoryEntitiesExtracted(Payload):
    about: ClassVar[str] = "The entities the enricher found in one version of an item."
    event_type: ClassVar[str] = "memory.entities_extracted"
    item_id: UUID
    item_version: int = Field(ge=1)
    extractor: ShortText
    entities: tuple[ExtractedEntity, ...] = Field(max_length=256)


class PreferenceExtracted(Payload):
    about: ClassVar[str] = "A preference, restriction or profile fact learned from an item."
    event_type: ClassVar[str] = "preference.extracted"
    source_item_id: UUID
    rule_id: ShortText
    category: ShortText
    value: Content
    confidence: Unit


class ThemeFormed(Payload):
    about: ClassVar[str] = ("A group of a space's memories close in meaning, found by the "
                            "lifecycle scheduler, with a label of their most telling words.")
    event_type: ClassVar[str] = "theme.formed"
    theme_id: UUID
    label: ShortText
    members: tuple[UUID, ...] = Field(max_length=MAX_THEME_MEMBERS)
    """The members closest to the theme's centre first (at most ``MAX_THEME_MEMBERS``)."""
    size: int = Field(ge=0)
    """How many memories the theme holds (``members`` may name fewer)."""
    threshold: float = Field(gt=0.0, le=1.0)
    """The policy's ``theme_cosine`` it was formed with."""
    policy_version: int = Field(ge=1)


class ThemeUpdated(Payload):
    about: ClassVar[str] = ("A theme's members or label changed; with no members left it is "
                            "dissolved.")
    event_type: ClassVar[str] = "theme.updated"
    theme_id: UUID
    label: ShortText
    members: tuple[UUID, ...] = Field(max_length=MAX_THEME_MEMBERS)
    size: int = Field(ge=0)
    threshold: float = Field(gt=0.0, le=1.0)
    policy_version: int = Field(ge=1)


class ImportanceSignals(BaseModel):
    """What an item's learned importance was computed from, counted over the log."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    used: int = Field(default=0, ge=0)
    unused: int = Field(default=0, ge=0)
    ratings: tuple[Annotated[int, Field(ge=1, le=5)], ...] = Field(default=(),
                                                                     max_length=10_000)
    reaffirmed: int = Field(default=0, ge=0)
    recalled: int = Field(default=0, ge=0)
    """How many audited retrievals showed it."""


class MemoryImportanceLearned(Payload):
    about: ClassVar[str] = ("The lifecycle scheduler's importance of an item, learned from its "
                            "signals; the importance it was written with stays the prior.")
    event_type: ClassVar[str] = "memory.importance_learned"
    item_id: UUID
    importance: Unit
    prior: Unit
    signals: ImportanceSignals
    reason: Reason


# --- graph ----------------------------------------------------------------------------------


class EntityUpserted(Payload):
    about: ClassVar[str] = "An entity of the space's graph, with its type and aliases."
    event_type: ClassVar[str] = "entity.upserted"
    entity_id: EntityRef
    name: ShortText
    type: ShortText
    aliases: tuple[ShortText, ...] = Field(default=(), max_length=64)


class RelationAsserted(Payload):
    about: ClassVar[str] = "A typed, directed relation between two entities."
    event_type: ClassVar[str] = "relation.asserted"
    relation_id: UUID
    source_entity: EntityRef
    relation_type: ShortText
    target_entity: EntityRef
    confidence: Unit = 1.0


class RelationRetracted(Payload):
    about: ClassVar[str] = "The relation no longer holds."
    event_type: ClassVar[str] = "relation.retracted"
    relation_id: UUID
    reason: Reason | None = None


# --- feedback, audit, privacy ---------------------------------------------------------------


class FeedbackRecorded(Payload):
    about: ClassVar[str] = "A rating (1-5), or used / unused after a recall, of an item."
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


class RetrievalPerformedV1(Payload):
    about: ClassVar[str] = "Superseded by v2 (the request; each result's section). Read-only."
    # Superseded by v2 (the request, to replay it; each result's section). Read-only. No
    # docstring and its first title, so its published snapshot stays exactly as it was.
    model_config = ConfigDict(frozen=True, extra="forbid", title="RetrievalPerformed")
    event_type: ClassVar[str] = "retrieval.performed"
    retrieval_id: UUID
    query: Content
    basis: RetrievalBasis
    item_ids: tuple[UUID, ...]
    scores: tuple[float, ...]
    policy_version: ShortText


class Retrieved(BaseModel):
    """One entry of what a retrieval returned, in the order shown."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    ref: ShortText
    """An item id (a message id for a context bundle's session turns)."""
    score: float | None = None
    section: ShortText
    """The search layer, or the context bundle's section."""


class RetrievalPerformed(Payload):
    """What a search or context call showed, recorded by the query service when auditing, with
    what it takes to replay it: the request (``parameters``, its free text apart), its basis,
    and the ranking policy's version."""

    event_type: ClassVar[str] = "retrieval.performed"
    schema_version: ClassVar[int] = 2
    retrieval_id: UUID
    operation: Literal["search", "context"]
    query: Content | None = None
    """The query text searched (a context call's: the session's last user message if it
    named none)."""
    subject: ShortText | None = None
    """A search's triple-subject filter (personal, like the query)."""
    spaces: tuple[SpaceId, ...] = Field(default=(), max_length=1_024)
    """The spaces it could read; empty: every space of the tenant."""
    parameters: dict[str, Any] = Field(default_factory=dict)
    """The rest of the request, as the query service validated it (without query, subject)."""
    basis: RetrievalBasis
    results: tuple[Retrieved, ...] = Field(default=(), max_length=10_000)
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
    MemoryRetracted, MemoryReaffirmed, MemoryArchived, MemoryPromoted, MemoryMerged,
    MergeSuggested, TripleClaimed, MemoryEmbedded, ConversationMessageEmbedded,
    MemoryEntitiesExtracted,
    PreferenceExtracted, EntityUpserted, RelationAsserted, RelationRetracted, FeedbackRecorded,
    RetrievalPerformed, SubjectErased, ThemeFormed, ThemeUpdated, MemoryImportanceLearned,
)
"""The current version of every event type."""

HISTORIC: tuple[type[Payload], ...] = (
    ConversationMessageAppendedV1, SpacePolicySetV1, MemoryAssertedV1, MemorySupersededV1,
    RetrievalPerformedV1, MemoryAssertedV2, SpacePolicySetV2)
"""Published older versions, kept for their JSON Schema snapshot and upcasting tests."""

CATALOGUE: dict[str, type[Payload]] = {p.event_type: p for p in CURRENT}
