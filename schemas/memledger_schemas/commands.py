"""Commands: what clients ask memledger to record. Validated at every input boundary (HTTP,
NATS intake, batch) by the same models, so errors name the same field paths everywhere.

The tenant is never in the body: it comes from the transport (header, credential or subject).
"""

from typing import Annotated, ClassVar, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, model_validator

from memledger_schemas.events import (
    EntityRef,
    Member,
    MemoryKind,
    Reason,
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


class CommandBase(BaseModel):
    """Fields every command may carry.

    ``idempotency_key``: a retry with the same key (per tenant) returns the first result and
    writes nothing. ``expected_version``: optimistic concurrency on the target stream.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    http_path: ClassVar[str]

    idempotency_key: ShortText | None = None
    expected_version: int | None = Field(default=None, ge=0)
    actor: ShortText | None = None
    agent_id: AgentId | None = None
    correlation_id: ShortText | None = None
    causation_id: ShortText | None = None


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
    name: ShortText | None = None
    description: Content | None = None


class SetSpacePolicy(CommandBase):
    http_path: ClassVar[str] = "/v1/spaces/{space_id}/policy"
    command: Literal["set_space_policy"] = "set_space_policy"
    space_id: SpaceId
    retention_days: dict[MemoryKind, int] = Field(default_factory=dict)
    decay_half_life_days: dict[MemoryKind, float] = Field(default_factory=dict)
    session_ttl_seconds: int | None = Field(default=None, ge=1)
    max_items: int | None = Field(default=None, ge=1)
    legal_hold: bool = False
    members: tuple[Member, ...] = ()


class ArchiveSpace(CommandBase):
    http_path: ClassVar[str] = "/v1/spaces/{space_id}/archive"
    command: Literal["archive_space"] = "archive_space"
    space_id: SpaceId
    reason: Reason | None = None


class RegisterAgent(CommandBase):
    http_path: ClassVar[str] = "/v1/agents"
    command: Literal["register_agent"] = "register_agent"
    agent_id: AgentId
    name: ShortText | None = None
    description: Content | None = None


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
    sources: tuple[SourceRef, ...] = Field(default=(), max_length=32)


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
    command: Literal["archive_memory"] = "archive_memory"
    space_id: SpaceId
    item_id: UUID
    reason: Reason


class UpsertEntity(CommandBase):
    http_path: ClassVar[str] = "/v1/spaces/{space_id}/entities"
    command: Literal["upsert_entity"] = "upsert_entity"
    space_id: SpaceId
    entity_id: EntityRef
    name: ShortText
    type: ShortText
    aliases: tuple[ShortText, ...] = Field(default=(), max_length=64)


class AssertRelation(CommandBase, ValidInterval):
    http_path: ClassVar[str] = "/v1/spaces/{space_id}/relations"
    command: Literal["assert_relation"] = "assert_relation"
    space_id: SpaceId
    relation_id: UUID | None = None
    source_entity: EntityRef
    relation_type: ShortText
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


COMMANDS: tuple[type[CommandBase], ...] = (
    CreateSpace, SetSpacePolicy, ArchiveSpace, RegisterAgent, StartSession, EndSession,
    AppendMessage, AssertMemory, ReviseMemory, SupersedeMemory, RetractMemory, ReaffirmMemory,
    ArchiveMemory, UpsertEntity, AssertRelation, RetractRelation, RecordFeedback,
)

Command = Annotated[
    CreateSpace | SetSpacePolicy | ArchiveSpace | RegisterAgent | StartSession | EndSession
    | AppendMessage | AssertMemory | ReviseMemory | SupersedeMemory | RetractMemory
    | ReaffirmMemory | ArchiveMemory | UpsertEntity | AssertRelation | RetractRelation
    | RecordFeedback,
    Field(discriminator="command"),
]

BY_NAME: dict[str, type[CommandBase]] = {
    c.model_fields["command"].default: c for c in COMMANDS
}


class CommandBatch(BaseModel):
    """Many commands in one round trip, committed atomically: all or none."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    commands: list[Command] = Field(min_length=1, max_length=MAX_BATCH)
