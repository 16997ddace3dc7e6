"""Commands: what clients ask memledger to record. Validated at every input boundary (HTTP,
NATS intake, batch) by the same models, so errors name the same field paths everywhere.

The tenant is never in the body: it comes from the transport (header, credential or subject).
"""

import math
from typing import Annotated, Any, ClassVar, Literal
from uuid import UUID

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    FiniteFloat,
    ValidationInfo,
    field_validator,
    model_validator,
)

from memledger_schemas.events import (
    MAX_THEME_MEMBERS,
    Cardinality,
    Consolidation,
    Derivation,
    EntityRef,
    ExtractedEntity,
    ImportanceSignals,
    Layer,
    Member,
    MemoryKind,
    Reason,
    RetrievalBasis,
    Retrieved,
    Role,
    SourceRef,
    Triple,
)
from memledger_schemas.types import (
    AgentId,
    Content,
    ShortText,
    SpaceId,
    Tag,
    Unit,
    UtcDatetime,
)

MAX_BATCH = 1_000
MAX_PARAMETER_LEVELS = 32
"""How deep a retrieval's ``parameters`` may nest (a request has a few levels; the events
store it as JSON, which cannot be written beyond some 250)."""
VECTOR_LENGTHS = (1e-6, 1e6)
"""The L2 norms an embedding may have: compared by direction, it is scaled to length 1 in
32-bit floats, where a length outside these overflows or vanishes."""
CLEAR = "kept in the clear (never sealed): must not hold personal data"
"""What the API says of a free-text field that is not sealed under a data subject's key."""


class CommandBase(BaseModel):
    """Fields every command may carry.

    ``idempotency_key``: a retry with the same key (per tenant) returns the first result and
    writes nothing. ``expected_version``: optimistic concurrency on the target stream.
    """

    # Validators are built on first use: most processes send a few commands and validate none.
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    http_path: ClassVar[str]
    sent_by: ClassVar[frozenset[str]] = frozenset()
    """Its authority: which of memledger's own services send it, on their intake subjects."""
    internal: ClassVar[bool] = False
    """Its authority: only memledger's own services send it (no API key may, whatever its
    role)."""

    idempotency_key: ShortText | None = Field(
        default=None, description="a retry with the same key returns the first result; "
        "stored as a keyed digest (with a master key), never as sent")
    expected_version: int | None = Field(default=None, ge=0)
    actor: ShortText | None = Field(
        default=None, description="set by the server from the credential (the API key, or "
        "the service): refused from clients; memledger's own services may name whom they "
        "act for (the query service: the key whose search it records)")
    agent_id: AgentId | None = Field(default=None, description=CLEAR)
    correlation_id: ShortText | None = Field(default=None, description=CLEAR)
    causation_id: ShortText | None = Field(default=None, description=CLEAR)
    subject_id: ShortText | None = Field(
        default=None, description="the data subject whose personal data this carries (its "
        "key seals it; erasing the subject destroys the key); default: the subject of the "
        "stream written to, else 'space:<space_id>'. An opaque id, not a name or an address: "
        "it stays in the clear, erasure included")

    @field_validator("*", mode="after")
    @classmethod
    def _no_nul(cls, value: Any, info: ValidationInfo) -> Any:
        # PostgreSQL's text and jsonb refuse NUL: accepted here, such a write could never be
        # projected (found by fuzzing). Refused at the boundary instead, naming the field.
        if info.context is not None and info.context.get(NUL_FREE):
            return value
        if _has_nul(value):
            raise ValueError("must not contain the NUL character (\\u0000)")
        return value


_NUMBERS = frozenset((int, float, bool))

NUL_FREE = "nul_free"
"""A validation context key: set true when the document validated is known to hold no NUL
character (a JSON text without the ``\\u0000`` escape: ``nul_free``), so no field is walked
for one (an embedding's floats were most of a batch's validation)."""


def nul_free(json_text: bytes) -> bool:
    """Whether the values JSON text ``json_text`` parses to can hold no NUL character: JSON
    writes one only as the escape ``\\u0000`` (a raw control character is refused by the
    parser), so a text without that sequence has none; one with it is checked field by
    field."""
    return b"\\u0000" not in json_text


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    # Iterative, so no nesting depth the JSON parser accepts can exhaust the stack.
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, (tuple, list)):
            # Numbers skipped before the walk: an embedding's floats are most of its cost,
            # and a sequence of numbers alone is told by its types' set, made in C.
            if not _NUMBERS.issuperset(map(type, item)):
                pending.extend([v for v in item if not isinstance(v, (int, float))])
        elif isinstance(item, dict):
            pending.extend(item)
            pending.extend(item.values())
        elif isinstance(item, BaseModel):
            pending.extend(item.__dict__.values())
    return False


def _nests_deeper(value: Any, levels: int) -> bool:
    """Whether ``value`` holds objects or arrays more than ``levels`` deep."""
    pending = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(
            item, (list, tuple)) else None
        if children is not None:
            if depth == levels:
                return True
            pending.extend((child, depth + 1) for child in children)
    return False


class ValidInterval(BaseModel):
    """Mixin: an optional half-open valid-time interval ``[valid_from, valid_to)``."""

    valid_from: UtcDatetime | None = None
    valid_to: UtcDatetime | None = None

    @model_validator(mode="after")
    def _interval_is_not_empty(self) -> "ValidInterval":
        if self.valid_from and self.valid_to and self.valid_to <= self.valid_from:
            raise ValueError("valid_to must be after valid_from (intervals are half-open)")
        return self


class CreateSpace(CommandBase):
    http_path: ClassVar[str] = "/v1/spaces"
    command: Literal["create_space"] = "create_space"
    space_id: SpaceId
    name: ShortText | None = Field(default=None, description=CLEAR)
    description: Content | None = Field(default=None, description=CLEAR)


class SetSpacePolicy(CommandBase):
    """A new version of a space's policy: the fields named change, every other keeps its
    value from the previous version (a map such as ``retention_days`` is replaced whole; null
    clears an optional limit). ``retroactive`` describes this version only. Naming
    ``legal_hold`` needs an admin key."""

    http_path: ClassVar[str] = "/v1/spaces/{space_id}/policy"
    command: Literal["set_space_policy"] = "set_space_policy"
    space_id: SpaceId
    retention_days: dict[MemoryKind, Annotated[int, Field(ge=1)]] = Field(
        default_factory=dict, description="archive items of a kind this many days after "
        "they were recorded (or last reaffirmed)")
    layer_retention_days: dict[Layer, Annotated[int, Field(ge=1)]] = Field(
        default_factory=dict, description="the same per layer (ecosystem memory is "
        "permanent: never archived by policy)")
    decay_half_life_days: dict[MemoryKind, Annotated[float, Field(gt=0)]] = Field(
        default_factory=dict, description="how fast a kind's strength halves; importance "
        "stretches it (up to twice as long at importance 1)")
    forget_below: Unit | None = Field(default=None, description="archive an item once its "
                                      "decayed strength falls below this")
    session_ttl_seconds: int | None = Field(default=None, ge=1, description="archive a "
                                            "session's memory this long after the session "
                                            "ended or went quiet")
    max_items: int | None = Field(default=None, ge=1, description="keep at most this many "
                                  "active items; the weakest beyond it are archived")
    legal_hold: bool = False
    retroactive: bool = Field(default=False, description="also govern items recorded before "
                              "this version (otherwise only those recorded after it)")
    cardinality: dict[ShortText, Cardinality] = Field(default_factory=dict)
    default_cardinality: Cardinality = "single"
    consolidation: Consolidation = "off"
    merge_cosine: float = Field(default=0.92, gt=0.0, le=1.0)
    audit_retrievals: bool = False
    members: tuple[Member, ...] = ()
    theme_cosine: float | None = Field(default=None, gt=0.0, le=1.0, description="group the "
                                       "space's memories into themes whose members are at "
                                       "least this similar (cosine) to the theme's centre; "
                                       "null: no themes")


class ArchiveSpace(CommandBase):
    http_path: ClassVar[str] = "/v1/spaces/{space_id}/archive"
    command: Literal["archive_space"] = "archive_space"
    space_id: SpaceId
    reason: Reason | None = Field(default=None, description=CLEAR)


class RegisterAgent(CommandBase):
    http_path: ClassVar[str] = "/v1/agents"
    command: Literal["register_agent"] = "register_agent"
    agent_id: AgentId
    name: ShortText | None = Field(default=None, description=CLEAR)
    description: Content | None = Field(default=None, description=CLEAR)


class StartSession(CommandBase):
    http_path: ClassVar[str] = "/v1/spaces/{space_id}/sessions"
    command: Literal["start_session"] = "start_session"
    space_id: SpaceId
    session_id: UUID | None = None
    title: ShortText | None = None


class EndSession(CommandBase):
    http_path: ClassVar[str] = "/v1/spaces/{space_id}/sessions/{session_id}/end"
    command: Literal["end_session"] = "end_session"
    space_id: SpaceId
    session_id: UUID
    reason: Reason | None = None


class AppendMessage(CommandBase):
    http_path: ClassVar[str] = "/v1/spaces/{space_id}/sessions/{session_id}/messages"
    command: Literal["append_message"] = "append_message"
    space_id: SpaceId
    session_id: UUID
    message_id: UUID | None = None
    role: Role
    content: Content
    participant: ShortText | None = None
    said_at: UtcDatetime | None = Field(
        default=None, description="when it was said (default: when it is recorded): the "
        "message's valid time, so imported history is valid from when it was said; no later "
        "than the server's clock plus its skew allowance")


class AssertMemory(CommandBase, ValidInterval):
    http_path: ClassVar[str] = "/v1/spaces/{space_id}/memories"
    command: Literal["assert_memory"] = "assert_memory"
    space_id: SpaceId
    item_id: UUID | None = None
    session_id: UUID | None = None
    kind: MemoryKind
    content: Content
    triple: Triple | None = None
    confidence: Unit = 1.0
    importance: Unit = 0.5
    tags: tuple[Tag, ...] = Field(default=(), max_length=32)
    sources: tuple[SourceRef, ...] = Field(default=(), max_length=32, description=CLEAR)
    layer: Layer | None = Field(default=None, description="default: 'session' with a "
                                "session_id, else 'project'")

    @model_validator(mode="after")
    def _session_layer_needs_a_session(self) -> "AssertMemory":
        if self.layer == "session" and self.session_id is None:
            raise ValueError("layer 'session' needs a session_id")
        return self


class ReviseMemory(CommandBase, ValidInterval):
    http_path: ClassVar[str] = "/v1/spaces/{space_id}/memories/{item_id}/revise"
    command: Literal["revise_memory"] = "revise_memory"
    space_id: SpaceId
    item_id: UUID
    content: Content | None = None
    triple: Triple | None = None
    confidence: Unit | None = None
    importance: Unit | None = None
    tags: tuple[Tag, ...] | None = Field(default=None, max_length=32)
    reason: Reason | None = None

    @model_validator(mode="after")
    def _changes_something(self) -> "ReviseMemory":
        changes = (self.content, self.triple, self.confidence, self.importance, self.tags)
        if all(value is None for value in changes):
            raise ValueError("a revision must change at least one of content, triple, "
                             "confidence, importance, tags")
        return self


class SupersedeMemory(CommandBase):
    http_path: ClassVar[str] = "/v1/spaces/{space_id}/memories/{item_id}/supersede"
    command: Literal["supersede_memory"] = "supersede_memory"
    space_id: SpaceId
    item_id: UUID
    superseded_by: UUID
    reason: Reason


class RetractMemory(CommandBase):
    http_path: ClassVar[str] = "/v1/spaces/{space_id}/memories/{item_id}/retract"
    command: Literal["retract_memory"] = "retract_memory"
    space_id: SpaceId
    item_id: UUID
    valid_until: UtcDatetime | None = None
    reason: Reason | None = None


class ReaffirmMemory(CommandBase):
    http_path: ClassVar[str] = "/v1/spaces/{space_id}/memories/{item_id}/reaffirm"
    command: Literal["reaffirm_memory"] = "reaffirm_memory"
    space_id: SpaceId
    item_id: UUID
    confidence: Unit | None = None
    reason: Reason | None = None


class ArchiveMemory(CommandBase):
    http_path: ClassVar[str] = "/v1/spaces/{space_id}/memories/{item_id}/archive"
    sent_by: ClassVar[frozenset[str]] = frozenset({"lifecycle"})
    command: Literal["archive_memory"] = "archive_memory"
    space_id: SpaceId
    item_id: UUID
    reason: Reason
    policy_version: int | None = Field(default=None, ge=1, description="the space policy "
                                       "version that decided it (sent by the lifecycle "
                                       "scheduler only)")


class PromoteMemory(CommandBase):
    http_path: ClassVar[str] = "/v1/spaces/{space_id}/memories/{item_id}/promote"
    command: Literal["promote_memory"] = "promote_memory"
    space_id: SpaceId
    item_id: UUID
    layer: Literal["project", "ecosystem"] = "project"
    reason: Reason | None = None


class MergeMemories(CommandBase):
    """Fold near-duplicates into ``item_id``: each is superseded (reason "merged") and the
    survivor takes their sources."""

    http_path: ClassVar[str] = "/v1/spaces/{space_id}/memories/{item_id}/merge"
    sent_by: ClassVar[frozenset[str]] = frozenset({"lifecycle"})
    command: Literal["merge_memories"] = "merge_memories"
    space_id: SpaceId
    item_id: UUID
    merged_item_ids: tuple[UUID, ...] = Field(min_length=1, max_length=64)
    similarity: float = Field(default=1.0, ge=-1.0, le=1.0)
    reason: Reason = "merged near-duplicates"

    @model_validator(mode="after")
    def _not_into_itself(self) -> "MergeMemories":
        if self.item_id in self.merged_item_ids:
            raise ValueError("an item cannot be merged into itself")
        if len(set(self.merged_item_ids)) != len(self.merged_item_ids):
            raise ValueError("merged_item_ids must not repeat an id")
        return self


class SuggestMerge(CommandBase):
    http_path: ClassVar[str] = "/v1/spaces/{space_id}/memories/{item_id}/merge-suggestions"
    sent_by: ClassVar[frozenset[str]] = frozenset({"lifecycle"})
    internal: ClassVar[bool] = True
    command: Literal["suggest_merge"] = "suggest_merge"
    space_id: SpaceId
    item_id: UUID
    similar_to: UUID
    similarity: float = Field(ge=-1.0, le=1.0)
    policy_version: int = Field(ge=1)


class UpsertEntity(CommandBase):
    http_path: ClassVar[str] = "/v1/spaces/{space_id}/entities"
    sent_by: ClassVar[frozenset[str]] = frozenset({"enricher"})
    command: Literal["upsert_entity"] = "upsert_entity"
    space_id: SpaceId
    entity_id: EntityRef = Field(description=CLEAR)
    name: ShortText
    type: ShortText = Field(description=CLEAR)
    aliases: tuple[ShortText, ...] = Field(default=(), max_length=64)


class AssertRelation(CommandBase, ValidInterval):
    http_path: ClassVar[str] = "/v1/spaces/{space_id}/relations"
    sent_by: ClassVar[frozenset[str]] = frozenset({"enricher"})
    command: Literal["assert_relation"] = "assert_relation"
    space_id: SpaceId
    relation_id: UUID | None = None
    source_entity: EntityRef
    relation_type: ShortText = Field(description=CLEAR)
    target_entity: EntityRef
    confidence: Unit = 1.0


class RetractRelation(CommandBase):
    http_path: ClassVar[str] = "/v1/spaces/{space_id}/relations/{relation_id}/retract"
    command: Literal["retract_relation"] = "retract_relation"
    space_id: SpaceId
    relation_id: UUID
    reason: Reason | None = None


class RecordFeedback(CommandBase):
    http_path: ClassVar[str] = "/v1/spaces/{space_id}/feedback"
    command: Literal["record_feedback"] = "record_feedback"
    space_id: SpaceId
    item_id: UUID
    feedback_id: UUID | None = None
    signal: Literal["rating", "used", "unused"]
    rating: int | None = Field(default=None, ge=1, le=5)
    retrieval_id: UUID | None = None
    comment: Content | None = None

    @model_validator(mode="after")
    def _rating_goes_with_signal(self) -> "RecordFeedback":
        if (self.signal == "rating") != (self.rating is not None):
            raise ValueError("rating (1-5) is required with signal 'rating' and only with it")
        return self


class Learned(CommandBase):
    """What an enricher learned from sealed text, naming the key that sealed it: refused once
    that key is destroyed (its subject erased meanwhile), so nothing erased comes back."""

    source_key_id: ShortText | None = Field(
        default=None, description="the key that sealed the text this was learned from: "
        "refused once that key is destroyed (its subject erased meanwhile)")


class _Vector(BaseModel):
    """Mixin: an embedding, validated where any enricher's vector is recorded."""

    model: ShortText
    dims: int = Field(ge=1, le=8_192)
    # Finite only: a NaN would be stored as JSON null and poison every similarity score.
    vector: tuple[FiniteFloat, ...] = Field(max_length=8_192)

    @field_validator("vector")
    @classmethod
    def _vector_has_dims_entries(cls, vector: tuple[float, ...], info: ValidationInfo
                                 ) -> tuple[float, ...]:
        # A field validator (not a model one) so the error's path is ``vector``; skipped when
        # dims itself is invalid, which is reported on its own.
        dims = info.data.get("dims")
        if dims is not None and len(vector) != dims:
            raise ValueError(f"vector has {len(vector)} entries but dims is {dims}")
        return vector

    @field_validator("vector")
    @classmethod
    def _vector_has_a_usable_length(cls, vector: tuple[float, ...]) -> tuple[float, ...]:
        length = math.hypot(*vector)  # exact where a sum of squares would overflow
        low, high = VECTOR_LENGTHS
        if not low <= length <= high:
            raise ValueError(f"the vector's length (L2 norm) is {length:g}; it must be between "
                             f"{low:g} and {high:g}")
        return vector


class RecordEmbedding(Learned, _Vector):
    """The vector of one version of a memory item's content, as computed by an enricher."""

    http_path: ClassVar[str] = "/v1/spaces/{space_id}/memories/{item_id}/embedding"
    sent_by: ClassVar[frozenset[str]] = frozenset({"enricher"})
    internal: ClassVar[bool] = True
    command: Literal["record_embedding"] = "record_embedding"
    space_id: SpaceId
    item_id: UUID
    item_version: int = Field(ge=1)


class RecordMessageEmbedding(Learned, _Vector):
    """The vector of a conversation message's content, as computed by an enricher."""

    http_path: ClassVar[str] = (
        "/v1/spaces/{space_id}/sessions/{session_id}/messages/{message_id}/embedding")
    sent_by: ClassVar[frozenset[str]] = frozenset({"enricher"})
    internal: ClassVar[bool] = True
    command: Literal["record_message_embedding"] = "record_message_embedding"
    space_id: SpaceId
    session_id: UUID
    message_id: UUID


class ImportMemory(AssertMemory, _Vector):
    """A memory item with the embedding of its content computed elsewhere (bulk loads of
    history, migrations): recorded as ``memory.asserted`` then ``memory.embedded``, the events
    a write and the enricher would record, with the importer as the actor of both; the
    enricher does not embed it again. ``model`` and ``dims`` must be those of the server's
    vector index. Needs the admin role."""

    http_path: ClassVar[str] = "/v1/spaces/{space_id}/import"
    command: Literal["import_memory"] = "import_memory"  # type: ignore[assignment]


class ImportRevision(ReviseMemory, _Vector):
    """A revision of a memory item's content with the embedding of its new content computed
    elsewhere (bulk loads of history): recorded as ``memory.revised`` then
    ``memory.embedded`` of the version it makes, the events a revision and the enricher would
    record, with the importer as the actor of both; the enricher does not embed it again.
    ``model`` and ``dims`` must be those of the server's vector index. Needs the admin
    role."""

    http_path: ClassVar[str] = "/v1/spaces/{space_id}/memories/{item_id}/import"
    command: Literal["import_revision"] = "import_revision"  # type: ignore[assignment]
    content: Content = Field(description="the new content, which the vector embeds")

    @field_validator("expected_version")
    @classmethod
    def _no_expected_version(cls, value: int | None) -> int | None:
        # Its events go to two streams (the item's, then its enrichment's): a version of
        # either would be ambiguous.
        if value is not None:
            raise ValueError("not accepted on an import_revision (its events go to the item's "
                             "stream and its enrichment stream); send revise_memory with "
                             "expected_version, or leave it out")
        return value


class RecordEntities(Learned):
    """The entities an extractor found in one version of a memory item's content."""

    http_path: ClassVar[str] = "/v1/spaces/{space_id}/memories/{item_id}/entities"
    sent_by: ClassVar[frozenset[str]] = frozenset({"enricher"})
    internal: ClassVar[bool] = True
    command: Literal["record_entities"] = "record_entities"
    space_id: SpaceId
    item_id: UUID
    item_version: int = Field(ge=1)
    extractor: ShortText
    entities: tuple[ExtractedEntity, ...] = Field(max_length=256)


class RecordPreference(Learned):
    """A preference a rule extracted from a memory item or a conversation message.

    ``source_item_id`` is the id of either, so it is not checked against an item stream."""

    http_path: ClassVar[str] = "/v1/spaces/{space_id}/preferences"
    sent_by: ClassVar[frozenset[str]] = frozenset({"enricher"})
    internal: ClassVar[bool] = True
    command: Literal["record_preference"] = "record_preference"
    space_id: SpaceId
    source_item_id: UUID
    rule_id: ShortText = Field(description=CLEAR)
    category: ShortText = Field(description=CLEAR)
    value: Content
    confidence: Unit


class DeriveMemory(AssertMemory, Learned):
    """A memory item an enricher derived from messages or items (a fact, a preference, a
    session's summary): asserted like any other (belief revision, decay, search), with its
    ``sources`` and its ``derivation`` (extractor and prompt version). Its ``item_id`` is
    derived from the sources too, so deriving it again names the same item."""

    http_path: ClassVar[str] = "/v1/spaces/{space_id}/derived-memories"
    sent_by: ClassVar[frozenset[str]] = frozenset({"enricher"})
    internal: ClassVar[bool] = True
    command: Literal["derive_memory"] = "derive_memory"  # type: ignore[assignment]
    item_id: UUID
    sources: tuple[SourceRef, ...] = Field(min_length=1, max_length=32, description=CLEAR)
    derivation: Derivation


class RecordTheme(CommandBase):
    """A theme the lifecycle scheduler found in a space's memories (formed, or changed: with
    no members, dissolved). Its label is sealed under the data subjects of its members."""

    http_path: ClassVar[str] = "/v1/spaces/{space_id}/themes"
    sent_by: ClassVar[frozenset[str]] = frozenset({"lifecycle"})
    internal: ClassVar[bool] = True
    command: Literal["record_theme"] = "record_theme"
    space_id: SpaceId
    theme_id: UUID
    label: ShortText
    members: tuple[UUID, ...] = Field(default=(), max_length=MAX_THEME_MEMBERS)
    size: int = Field(ge=0)
    threshold: float = Field(gt=0.0, le=1.0)
    policy_version: int = Field(ge=1)


class LearnImportance(CommandBase):
    """An item's importance as the lifecycle scheduler learned it from its signals (the
    importance it was written with is the prior)."""

    http_path: ClassVar[str] = "/v1/spaces/{space_id}/memories/{item_id}/importance"
    sent_by: ClassVar[frozenset[str]] = frozenset({"lifecycle"})
    internal: ClassVar[bool] = True
    command: Literal["learn_importance"] = "learn_importance"
    space_id: SpaceId
    item_id: UUID
    importance: Unit
    prior: Unit
    signals: ImportanceSignals
    reason: Reason = Field(description=CLEAR)


class RecordRetrieval(CommandBase):
    """What a search or context call showed: sent by the query service when it audits a call
    (``audit=true``, or a space policy's ``audit_retrievals``), so an operator can later see
    and replay exactly that. The event's space is the one space read, else the tenant's.

    Its query, subject filter and parameters are sealed under every data subject it touched:
    ``subject_id``, the session's subject and the subjects of the memories it showed (erasing
    any one of them erases them); if none, under ``space:<space>``."""

    http_path: ClassVar[str] = "/v1/retrievals"
    sent_by: ClassVar[frozenset[str]] = frozenset({"query"})
    internal: ClassVar[bool] = True
    command: Literal["record_retrieval"] = "record_retrieval"
    retrieval_id: UUID
    operation: Literal["search", "context"]
    session_id: UUID | None = Field(default=None, description="the session the call was made "
                                    "in (its data subject's key seals the query)")
    query: Content | None = None
    subject: ShortText | None = None
    spaces: tuple[SpaceId, ...] = Field(default=(), max_length=1_024,
                                        description="the spaces it could read; empty: all")
    parameters: dict[str, Any] = Field(default_factory=dict, description="the rest of the "
                                       "request, as the query service validated it")
    basis: RetrievalBasis
    results: tuple[Retrieved, ...] = Field(default=(), max_length=10_000)
    policy_version: ShortText

    @field_validator("parameters")
    @classmethod
    def _parameters_are_shallow(cls, parameters: dict[str, Any]) -> dict[str, Any]:
        if _nests_deeper(parameters, MAX_PARAMETER_LEVELS):
            raise ValueError(f"nests deeper than {MAX_PARAMETER_LEVELS} levels")
        return parameters


class EraseSubject(CommandBase):
    """Records that a data subject was erased (its keys already destroyed). Not a client
    command: only the erasure service sends it, after checking legal holds and destroying the
    keys, so it has no generic route and no intake subject."""

    http_path: ClassVar[str] = "/v1/subjects/{subject_id}/erase"
    command: Literal["erase_subject"] = "erase_subject"
    subject_id: ShortText
    key_ids: tuple[ShortText, ...] = Field(default=(), max_length=1_000)
    reason: Reason | None = None


def internal_part(command: CommandBase) -> str | None:
    """The field that makes ``command`` one only memledger's own services may send
    (``"command"``: the whole command), or ``None``."""
    if type(command).internal:
        return "command"
    if isinstance(command, ArchiveMemory) and command.policy_version is not None:
        return "policy_version"  # archived by policy: the lifecycle scheduler's decision
    return None


COMMANDS: tuple[type[CommandBase], ...] = (
    CreateSpace, SetSpacePolicy, ArchiveSpace, RegisterAgent, StartSession, EndSession,
    AppendMessage, AssertMemory, ReviseMemory, SupersedeMemory, RetractMemory, ReaffirmMemory,
    ArchiveMemory, PromoteMemory, MergeMemories, SuggestMerge, UpsertEntity, AssertRelation,
    RetractRelation, RecordFeedback, RecordEmbedding, RecordMessageEmbedding, RecordEntities,
    RecordPreference, RecordRetrieval, DeriveMemory, RecordTheme, LearnImportance,
    ImportMemory, ImportRevision,
)

Command = Annotated[
    CreateSpace | SetSpacePolicy | ArchiveSpace | RegisterAgent | StartSession | EndSession
    | AppendMessage | AssertMemory | ReviseMemory | SupersedeMemory | RetractMemory
    | ReaffirmMemory | ArchiveMemory | PromoteMemory | MergeMemories | SuggestMerge
    | UpsertEntity | AssertRelation | RetractRelation
    | RecordFeedback | RecordEmbedding | RecordMessageEmbedding | RecordEntities
    | RecordPreference | RecordRetrieval | DeriveMemory | RecordTheme | LearnImportance
    | ImportMemory | ImportRevision,
    Field(discriminator="command"),
]

BY_NAME: dict[str, type[CommandBase]] = {
    c.model_fields["command"].default: c for c in COMMANDS
}

SERVICE_COMMANDS: dict[str, frozenset[str]] = {
    service: frozenset(name for name, c in BY_NAME.items() if service in c.sent_by)
    for service in sorted({s for c in COMMANDS for s in c.sent_by})}
"""What each of memledger's own services sends, on its own intake subject (``sent_by``)."""

INTERNAL_COMMANDS = frozenset(name for name, c in BY_NAME.items() if c.internal)
"""Commands only memledger's own services send (what they learned, audited, or suggest by
policy): no API key may send them, whatever its role (``internal``)."""


class CommandBatch(BaseModel):
    """Many commands in one round trip, committed atomically: all or none."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    commands: list[Command] = Field(min_length=1, max_length=MAX_BATCH)
