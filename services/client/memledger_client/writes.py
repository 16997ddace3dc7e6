"""Typed shortcuts for the common commands, written once for both clients: each builds the
command model (validated here, so a bad field fails before any request, naming its path) and
hands it to ``send``, which returns a ``WriteResult`` (sync) or an awaitable of one (async).

Every other command (policies, agents, entities, relations, ...) goes through ``send`` with its
model from ``memledger_schemas.commands``.
"""

from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Generic, Literal, TypedDict, TypeVar, Unpack
from uuid import UUID

from memledger_client.calls import validated
from memledger_schemas.commands import (
    AppendMessage,
    ArchiveMemory,
    AssertMemory,
    CommandBase,
    CreateSpace,
    EndSession,
    ReaffirmMemory,
    RecordFeedback,
    RetractMemory,
    ReviseMemory,
    StartSession,
    SupersedeMemory,
)
from memledger_schemas.events import MemoryKind, Role, SourceRef, Triple

W = TypeVar("W")
C = TypeVar("C", bound=CommandBase)


class CommandMeta(TypedDict, total=False):
    """Fields any command may carry. ``idempotency_key`` defaults to a fresh one per call (and
    the same one for each retry of that call)."""

    idempotency_key: str
    expected_version: int
    agent_id: str
    correlation_id: str
    causation_id: str
    subject_id: str
    """The data subject whose personal data the command carries (erasable by that id)."""


def command(model: type[C], **fields: Any) -> C:
    """``model`` from the fields that are not None (None means: the command's default)."""
    return validated(model, **{k: v for k, v in fields.items() if v is not None})


class WriteMethods(ABC, Generic[W]):
    """Shortcuts over ``send``; ``W`` is what ``send`` returns."""

    @abstractmethod
    def send(self, command: CommandBase) -> W:
        """Send one command (each client implements it: blocking or awaitable)."""

    def create_space(self, space_id: str, *, name: str | None = None,
                     description: str | None = None, **meta: Unpack[CommandMeta]) -> W:
        return self.send(command(CreateSpace, space_id=space_id, name=name,
                                 description=description, **meta))

    def start_session(self, space_id: str, *, session_id: UUID | None = None,
                      title: str | None = None, **meta: Unpack[CommandMeta]) -> W:
        """``ids["session_id"]`` of the result names the session (generated if not given)."""
        return self.send(command(StartSession, space_id=space_id, session_id=session_id,
                                 title=title, **meta))

    def end_session(self, space_id: str, session_id: UUID | str, *, reason: str | None = None,
                    **meta: Unpack[CommandMeta]) -> W:
        return self.send(command(EndSession, space_id=space_id, session_id=session_id,
                                 reason=reason, **meta))

    def append_message(self, space_id: str, session_id: UUID | str, role: Role, content: str,
                       *, participant: str | None = None, message_id: UUID | None = None,
                       said_at: datetime | None = None, **meta: Unpack[CommandMeta]) -> W:
        """``said_at``: when it was said, if not now (imported history): the message is
        valid from then, and found by searches as of then on."""
        return self.send(command(AppendMessage, space_id=space_id, session_id=session_id,
                                 role=role, content=content, participant=participant,
                                 message_id=message_id, said_at=said_at, **meta))

    def assert_memory(self, space_id: str, content: str, *, kind: MemoryKind = "fact",
                      tags: Sequence[str] = (), confidence: float | None = None,
                      importance: float | None = None, triple: Triple | None = None,
                      valid_from: datetime | None = None, valid_to: datetime | None = None,
                      session_id: UUID | str | None = None, item_id: UUID | None = None,
                      sources: Sequence[SourceRef] = (), **meta: Unpack[CommandMeta]) -> W:
        """A new memory item; ``ids["item_id"]`` (``result.item_id``) names it."""
        return self.send(command(
            AssertMemory, space_id=space_id, content=content, kind=kind, tags=tuple(tags),
            confidence=confidence, importance=importance, triple=triple, valid_from=valid_from,
            valid_to=valid_to, session_id=session_id, item_id=item_id, sources=tuple(sources),
            **meta))

    def revise_memory(self, space_id: str, item_id: UUID | str, *, content: str | None = None,
                      triple: Triple | None = None, confidence: float | None = None,
                      importance: float | None = None, tags: Sequence[str] | None = None,
                      reason: str | None = None, valid_from: datetime | None = None,
                      valid_to: datetime | None = None, **meta: Unpack[CommandMeta]) -> W:
        """New content or attributes; with ``valid_from``/``valid_to``, a correction of the
        record for that interval only."""
        return self.send(command(
            ReviseMemory, space_id=space_id, item_id=item_id, content=content, triple=triple,
            confidence=confidence, importance=importance,
            tags=None if tags is None else tuple(tags), reason=reason, valid_from=valid_from,
            valid_to=valid_to, **meta))

    def retract_memory(self, space_id: str, item_id: UUID | str, *,
                       valid_until: datetime | None = None, reason: str | None = None,
                       **meta: Unpack[CommandMeta]) -> W:
        """The item stopped being true at ``valid_until`` (default: now)."""
        return self.send(command(RetractMemory, space_id=space_id, item_id=item_id,
                                 valid_until=valid_until, reason=reason, **meta))

    def supersede_memory(self, space_id: str, item_id: UUID | str,
                         superseded_by: UUID | str, reason: str,
                         **meta: Unpack[CommandMeta]) -> W:
        return self.send(command(SupersedeMemory, space_id=space_id, item_id=item_id,
                                 superseded_by=superseded_by, reason=reason, **meta))

    def reaffirm_memory(self, space_id: str, item_id: UUID | str, *,
                        confidence: float | None = None, reason: str | None = None,
                        **meta: Unpack[CommandMeta]) -> W:
        return self.send(command(ReaffirmMemory, space_id=space_id, item_id=item_id,
                                 confidence=confidence, reason=reason, **meta))

    def archive_memory(self, space_id: str, item_id: UUID | str, reason: str,
                       **meta: Unpack[CommandMeta]) -> W:
        """Forget: the item leaves plain reads and search; history and as-of views keep it."""
        return self.send(command(ArchiveMemory, space_id=space_id, item_id=item_id,
                                 reason=reason, **meta))

    def record_feedback(self, space_id: str, item_id: UUID | str,
                        signal: Literal["rating", "used", "unused"], *,
                        rating: int | None = None, retrieval_id: UUID | None = None,
                        comment: str | None = None, **meta: Unpack[CommandMeta]) -> W:
        return self.send(command(RecordFeedback, space_id=space_id, item_id=item_id,
                                 signal=signal, rating=rating, retrieval_id=retrieval_id,
                                 comment=comment, **meta))
