"""What the MCP tools answer: the client's answers cut down to what an agent reads (no
vectors, no explain components), each still carrying the basis that repeats it."""

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from memledger_client.results import (
    Basis,
    Change,
    ChangePage,
    ContextAnswer,
    History,
    Item,
    SearchAnswer,
    SearchHit,
    WriteResult,
)
from memledger_schemas.event_types import EventType


class Answer(BaseModel):
    model_config = ConfigDict(frozen=True)


POSITION = "global position of the write: reads wait for it"


class Remembered(Answer):
    item_id: str
    space_id: str
    position: int = Field(description=POSITION)
    duplicate: bool = Field(description="true if this exact write was already recorded")
    superseded: str | None = Field(default=None, description=(
        "the item this one replaced (same subject and single-valued predicate)"))


class Changed(Answer):
    item_id: str
    position: int = Field(description=POSITION)


class FeedbackRecorded(Answer):
    recorded: int = Field(description="how many items the feedback was recorded for")
    position: int = Field(description=POSITION)


class Hit(Answer):
    item_id: str = Field(description="the memory item's id (a message's: its message id)")
    space_id: str
    kind: str = Field(description="a memory kind, or 'message' for a conversation message")
    content: str
    tags: list[str]
    score: float
    session_id: str | None = None
    message_id: str | None = None
    role: str | None = None
    participant: str | None = None
    said_at: datetime | None = None
    context: list[str] | None = Field(default=None, description="with window: the turns "
                                      "around a message, as 'participant: text' lines, the "
                                      "message itself marked '>'")


class Degradable(Answer):
    degraded: list[str] = Field(default_factory=list, description=(
        "what this answer had to do without: 'embedder' means it was ranked by keywords "
        "alone (use the words the memory would use); 'stale' means memledger could not answer "
        "and this is its last answer to the same request"))
    stale_age_seconds: float | None = Field(default=None, description=(
        "with 'stale': how old that answer is"))


class Recalled(Degradable):
    basis: Basis
    hits: list[Hit]
    retrieval_id: str | None = Field(default=None, description=(
        "this recall as recorded: pass it to feedback with the ids you used or not"))


class Context(Degradable):
    basis: Basis
    rendered: str
    used_tokens: int
    budget_tokens: int
    query: str | None


class ChangeLine(Answer):
    position: int
    recorded_at: datetime
    event_type: str
    space_id: str
    subject: str
    content: str | None = None
    reason: str | None = None


class Changes(Answer):
    changes: list[ChangeLine]
    next_cursor: str = Field(description="pass it as cursor to get only what comes after")
    position: int


class ItemView(Answer):
    item_id: str
    space_id: str
    kind: str
    status: str
    content: str
    tags: list[str]
    confidence: float
    importance: float
    valid_from: datetime
    valid_to: datetime | None
    known_since_position: int


class Truth(Answer):
    basis: Basis
    items: list[ItemView]


class Version(Answer):
    valid_from: datetime
    valid_to: datetime | None
    known_from_position: int
    known_to_position: int | None
    content: str | None


class ItemHistory(Answer):
    item_id: str
    changes: list[ChangeLine]
    versions: list[Version]


def remembered(result: WriteResult, space_id: str) -> Remembered:
    return Remembered(item_id=result.item_id, space_id=space_id,
                      position=result.position, duplicate=result.duplicate,
                      superseded=result.ids.get("superseded"))


def recalled(answer: SearchAnswer) -> Recalled:
    return Recalled(basis=answer.basis, hits=[hit(h) for h in answer.results],
                    retrieval_id=answer.retrieval_id, **_degraded(answer))


def hit(found: SearchHit) -> Hit:
    said = found.kind == "message"
    return Hit(item_id=found.item_id, space_id=found.space_id, kind=found.kind,
               content=found.content, tags=found.tags, score=found.score,
               session_id=found.session_id if said else None, message_id=found.message_id,
               role=found.role, participant=found.participant, said_at=found.said_at,
               context=_around(found) if found.window is not None else None)


def _around(found: SearchHit) -> list[str]:
    window = found.window
    assert window is not None  # asked only of a hit with a window
    return ([_line(t.participant or t.role, t.content) for t in window.before]
            + [_line(found.participant or found.role, found.content, ">")]
            + [_line(t.participant or t.role, t.content) for t in window.after])


def _line(who: str | None, text: str, mark: str = " ") -> str:
    return f"{mark} {who}: {text}"


def context(answer: ContextAnswer) -> Context:
    return Context(basis=answer.basis, rendered=answer.rendered,
                   used_tokens=answer.used_tokens, budget_tokens=answer.budget_tokens,
                   query=answer.query, **_degraded(answer))


def _degraded(answer: SearchAnswer | ContextAnswer) -> dict[str, Any]:
    """What the server did without (its ``degraded``), and whether the client's stale cache
    answered instead."""
    stale = ["stale"] if answer.stale else []
    return {"degraded": [*answer.degraded, *stale],
            "stale_age_seconds": answer.stale_age_seconds}


ENRICHMENT = frozenset({EventType.MEMORY_EMBEDDED, EventType.ENTITIES_EXTRACTED,
                        EventType.MESSAGE_EMBEDDED})
"""Bookkeeping of the enricher (vectors, mentions): left out of what an agent is shown."""


def changes(page: ChangePage) -> Changes:
    return Changes(changes=[change_line(c) for c in page.changes
                            if c.event_type not in ENRICHMENT],
                   next_cursor=page.next_cursor, position=page.position)


def change_line(change: Change) -> ChangeLine:
    return ChangeLine(position=change.position, recorded_at=change.recorded_at,
                      event_type=change.event_type, space_id=change.space_id,
                      subject=change.subject, content=_text(change.payload, "content"),
                      reason=change.reason)


def truth(basis: Basis, items: list[Item]) -> Truth:
    return Truth(basis=basis, items=[item_view(i) for i in items])


def item_view(item: Item) -> ItemView:
    return ItemView(**{name: getattr(item, name) for name in ItemView.model_fields})


def history(found: History) -> ItemHistory:
    return ItemHistory(item_id=found.item_id, changes=[change_line(c) for c in found.changes
                                                       if c.event_type not in ENRICHMENT],
                       versions=[Version(valid_from=v.valid_from, valid_to=v.valid_to,
                                         known_from_position=v.sys_from,
                                         known_to_position=v.sys_to,
                                         content=_text(v.attrs, "content"))
                                 for v in found.versions])


def _text(fields: dict[str, Any], name: str) -> str | None:
    value = fields.get(name)
    return value if isinstance(value, str) else None
