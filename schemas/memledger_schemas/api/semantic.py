"""Requests and answers of search and context (validated at the HTTP boundary; a bad field
is a 422 naming it)."""

import math
from datetime import UTC, datetime
from typing import Annotated, Literal, Protocol
from uuid import UUID

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from memledger_schemas.api.reads import Basis, Frozen
from memledger_schemas.events import MemoryKind, Role
from memledger_schemas.types import AgentId, ShortText, SpaceId, Tag

Mode = Literal["execution", "planning", "brainstorming"]
"""How a search is ranked: few and strict, more, or many and loose (query's ranking modes)."""
SearchKind = Literal[MemoryKind, "message"]
"""What a search can find: memory items of a kind, or conversation messages."""
MAX_WINDOW = 10
"""The most turns a message hit brings on either side (``window``)."""


def _aware(value: datetime | None) -> datetime | None:
    if value is not None and value.tzinfo is None:
        raise ValueError("must carry a timezone offset, e.g. 2026-01-01T00:00:00Z")
    return value


Instant = Annotated[datetime | None, AfterValidator(_aware)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Weights(Strict):
    dense: float = Field(default=0.7, ge=0, le=1)
    keyword: float = Field(default=0.3, ge=0, le=1)

    @model_validator(mode="after")
    def _some_weight(self) -> "Weights":
        if self.dense + self.keyword <= 0:
            raise ValueError("at least one of dense and keyword must be above 0")
        return self


class LayerLimits(Strict):
    session: int = Field(default=10, ge=0, le=100)
    project: int = Field(default=20, ge=0, le=100)
    conversation: int = Field(default=10, ge=0, le=100, description="messages of the "
                              "spaces' other sessions")
    ecosystem: int = Field(default=10, ge=0, le=100)


class TimeTravel(Strict):
    valid_at: Instant = Field(default=None, description="valid time (default: now)")
    as_of_position: int | None = Field(default=None, ge=0,
                                       description="system time as a global position")
    recorded_at: Instant = Field(default=None, description="system time as a timestamp")
    min_position: int | None = Field(default=None, ge=0, description="wait until projected")
    wait_ms: int = Field(default=2_000, ge=0, le=30_000)


NO_NUL = r"^[^\x00]*$"
"""An audited call records its query, and PostgreSQL refuses NUL: refused at the boundary."""


class SearchRequest(TimeTravel):
    query: str = Field(min_length=1, max_length=4_096, pattern=NO_NUL)
    spaces: list[SpaceId] = Field(default_factory=list, max_length=64,
                                  description="empty: every space of the tenant")
    session_id: UUID | None = None
    agent_id: AgentId | None = None
    kinds: list[SearchKind] = Field(default_factory=list, description="memory kinds and/or "
                                    "'message' (conversation messages); empty: all of them")
    participant: ShortText | None = Field(default=None, description="messages said by this "
                                          "participant (finds messages only)")
    role: Role | list[Role] | None = Field(default=None, description="messages of this role "
                                           "(or any of these; finds messages only)")
    window: int = Field(default=0, ge=0, le=MAX_WINDOW, description="with each message hit, "
                        "this many turns before and after it in its session")
    theme: UUID | None = Field(default=None, description="only the members of this theme "
                               "(GET /v1/spaces/{space_id}/themes), as of the basis")
    tags: list[Tag] = Field(default_factory=list, max_length=32)
    subject: str | None = Field(default=None, max_length=512)
    mode: Mode = "planning"
    k: int | None = Field(default=None, ge=1, le=100, description="default: the mode's")
    threshold: float | None = Field(default=None, ge=0, le=1,
                                    description="minimum relevance (default: the mode's)")
    scope: Literal["filtered", "hierarchical"] = Field(
        default="filtered", description="hierarchical: the session's memories, then the "
        "project's (spaces; session memory only once promoted), then the messages of the "
        "spaces' other sessions, then the ecosystem's (the whole tenant's ecosystem layer), "
        "each with its limit. filtered without a session_id leaves session memory out")
    layers: LayerLimits = Field(default_factory=LayerLimits)
    weights: Weights | None = Field(default=None, description="set both what is kept "
                                    "(relevance) and the order; null: relevance dense 0.7, "
                                    "keyword 0.3 (the thresholds' calibration), order dense "
                                    "0.3, keyword 0.7 (as measured)")
    explain: bool = False
    audit: bool = Field(default=False, description="record what this call shows "
                        "(retrieval.performed), answered with its retrieval_id; also on when a "
                        "space's policy sets audit_retrievals")

    @model_validator(mode="after")
    def _hierarchy_needs_session(self) -> "SearchRequest":
        if self.scope == "hierarchical" and self.session_id is None:
            raise ValueError("scope 'hierarchical' needs session_id")
        return self

    @property
    def roles(self) -> tuple[str, ...]:
        if self.role is None:
            return ()
        return (self.role,) if isinstance(self.role, str) else tuple(self.role)


class Turn(Frozen):
    """A message of a hit's session, beside it."""

    message_id: str
    position: int
    role: str
    participant: str | None
    content: str
    said_at: datetime


class Window(Frozen):
    """The turns of a message hit's session just before it and just after it (as of the
    search's basis), in the order they were appended."""

    before: list[Turn]
    after: list[Turn]


class SearchHit(Frozen):
    """A memory item's version, or (``kind`` "message") a conversation message: then
    ``item_id`` is its message id too, and its message fields are set."""

    item_id: str
    space_id: str
    kind: str
    content: str
    tags: list[str]
    importance: float
    confidence: float
    session_id: str | None
    agent_id: str | None
    valid_from: float
    valid_to: float | None
    layer: str
    score: float
    relevance: float
    explain: dict[str, float] | None = None
    message_id: str | None = None
    role: str | None = None
    participant: str | None = None
    said_at: datetime | None = None
    window: Window | None = None
    """With the request's ``window``: the turns around a message hit."""


class NamedPeriod(Protocol):
    """A period resolved from the query's words (query's ``when.Period``), in epoch seconds
    (infinite: open on that side), with the anchor event of one resolved from an event."""

    @property
    def text(self) -> str: ...
    @property
    def start(self) -> float: ...
    @property
    def end(self) -> float: ...
    @property
    def anchor_id(self) -> str | None: ...
    @property
    def anchor_text(self) -> str | None: ...
    @property
    def relation(self) -> str | None: ...


class TimeWindow(Frozen):
    """A period the query names ("in May 2023"), resolved at the basis' valid time, or the
    window an event-relative expression ("before she moved") resolved to through its anchor
    event, found by searching the same scope as of the same basis: hits whose valid time meets
    it rank higher (``explain``: ``time_nearness``, ``anchor_nearness``)."""

    text: str
    valid_from: datetime | None
    """None: open towards the past ("before ...")."""
    valid_to: datetime | None
    """None: open towards the future ("after ...", "since ...")."""
    relation: Literal["before", "after", "around"] | None = None
    """Of an event-relative expression: which side of the anchor the window lies on."""
    anchor_id: str | None = None
    """Of an event-relative expression: the item or message id of its anchor event."""
    anchor_text: str | None = None
    """Of an event-relative expression: what the anchor event's hit says."""

    @classmethod
    def of(cls, window: NamedPeriod) -> "TimeWindow":
        return cls(text=window.text, valid_from=_instant(window.start),
                   valid_to=_instant(window.end),
                   relation=window.relation,
                   anchor_id=window.anchor_id, anchor_text=window.anchor_text)


def _instant(epoch: float) -> datetime | None:
    return datetime.fromtimestamp(epoch, UTC) if math.isfinite(epoch) else None


class SearchAnswer(Frozen):
    basis: Basis
    mode: str
    threshold: float
    model: str
    results: list[SearchHit]
    collapsed: dict[str, str]
    """Near-duplicates left out of ``results``: item id → the shown hit it duplicates."""
    time_windows: list[TimeWindow] = Field(default_factory=list)
    """The periods the query names, as resolved (empty: none)."""
    retrieval_id: str | None = None
    """When audited: the recorded retrieval (``GET /v1/retrievals/{retrieval_id}``)."""
    retrieval_position: int | None = None
    """When audited: the position of its record (read it back with ``min_position``)."""
    ranking: Literal["hybrid", "keyword", "dense"] = "hybrid"
    """What ranked the hits: dense and keyword scores, or one of them alone."""
    degraded: list[str] = Field(default_factory=list)
    """What the answer had to do without (``embedder``: the query's embedding failed or was
    late, so keywords alone ranked); empty when whole."""


class ContextShares(Strict):
    session: int = Field(default=1_000, ge=0)
    memories: int = Field(default=500, ge=0)
    conversations: int = Field(default=500, ge=0, description="relevant earlier turns of "
                               "the space's other sessions")
    preferences: int = Field(default=300, ge=0)
    history: int = Field(default=1_500, ge=0)
    themes: int = Field(default=0, ge=0, description="the space's themes; by default only "
                        "what the other sections leave unused")


class ContextRequest(TimeTravel):
    space_id: SpaceId
    session_id: UUID | None = None
    query: str | None = Field(default=None, min_length=1, max_length=4_096, pattern=NO_NUL,
                              description="default: the session's last user message")
    budget_tokens: int = Field(default=3_800, ge=16, le=1_000_000, description="default: "
                               "the sum of the default shares")
    shares: ContextShares = Field(default_factory=ContextShares)
    audit: bool = Field(default=False, description="record what this call shows "
                        "(retrieval.performed), answered with its retrieval_id; also on when a "
                        "space's policy sets audit_retrievals")


class ContextEntry(Frozen):
    text: str
    ref: str
    tokens: int
    score: float | None = None
    flag: str | None = None
    """"steering_rule_candidate": a low-rated correction offered as a rule to follow."""


class ContextSection(Frozen):
    name: str
    allowance: int
    used_tokens: int
    entries: list[ContextEntry]


class ContextAnswer(Frozen):
    basis: Basis
    budget_tokens: int
    used_tokens: int
    tokenizer: str
    query: str | None
    sections: list[ContextSection]
    rendered: str
    retrieval_id: str | None = None
    """When audited: the recorded retrieval (``GET /v1/retrievals/{retrieval_id}``)."""
    retrieval_position: int | None = None
    """When audited: the position of its record (read it back with ``min_position``)."""
    ranking: Literal["hybrid", "keyword", "dense"] = "hybrid"
    """What ranked the memories and earlier turns (as ``SearchAnswer.ranking``)."""
    degraded: list[str] = Field(default_factory=list)
    """What the bundle had to do without (``embedder``: memories ranked by keywords alone)."""
