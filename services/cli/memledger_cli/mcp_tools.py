"""The MCP tools that write memory items: remember, revise, retract, promote, forget and
feedback; and what every group of tools shares (``ToolGroup``).

Each tool is one call to the client (``AsyncClient``) and one cut-down answer. Their
signatures are their input schemas and their docstrings what the agent reads, so both say
what to pass and what comes back; a tool takes every argument an agent may pass as a
parameter of its own (a parameter object would be one nested argument to the agent).
``space`` defaults to the server's space.
"""

from collections.abc import Callable
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import Field

from memledger_cli import mcp_answers as answers
from memledger_cli.mcp_answers import Changed, FeedbackRecorded, Remembered
from memledger_client import AsyncClient, Conflict, NotFound, WriteResult
from memledger_client.writes import command
from memledger_schemas import commands as c
from memledger_schemas.events import MemoryKind, Triple

Failures = Callable[[str, str, str], AbstractContextManager[None]]
"""``failures(tool, base_url, space)``: turns client errors into tool errors."""

Space = Annotated[str | None, Field(description="space id (default: the server's space)")]
ItemId = Annotated[UUID, Field(description="the memory item's id (recall, what_was_true and "
                                           "remember give them)")]
Reason = Annotated[str | None, Field(max_length=2_048, description="why, for the history")]
Tags = Annotated[list[str] | None, Field(description="tags, e.g. ['billing']")]
Unit = Annotated[float | None, Field(ge=0, le=1)]
TripleArg = Annotated[Triple | None, Field(
    description="the statement as subject, predicate, object; a new object for a "
                "single-valued predicate supersedes the item that held the old one")]
ValidFrom = Annotated[datetime | None, Field(
    description="since when it is true, if not now (ISO 8601 with offset)")]
ValidTo = Annotated[datetime | None, Field(
    description="until when it is true, if known (ISO 8601 with offset; not included)")]


@dataclass(frozen=True)
class Defaults:
    """What the server fills in for the agent: its space, and the agent id its writes
    carry."""

    space: str
    agent: str | None = None


class ToolGroup:
    """A group of tools over one client: the defaults, and the guard that turns a client
    error into a tool error the agent can act on."""

    def __init__(self, client: AsyncClient, defaults: Defaults, failures: Failures) -> None:
        self.client, self.defaults, self._failures = client, defaults, failures

    def _guard(self, tool: str) -> AbstractContextManager[None]:
        return self._failures(tool, self.client.base_url, self.defaults.space)

    def _space(self, space: str | None) -> str:
        return space or self.defaults.space

    def _command(self, model: type[c.CommandBase], **fields: Any) -> Any:
        """``model`` with the agent's id (a bad field: ``InvalidRequest`` naming it)."""
        return command(model, agent_id=self.defaults.agent, **fields)

    async def _send(self, model: type[c.CommandBase], **fields: Any) -> WriteResult:
        return await self.client.send(self._command(model, **fields))


class MemoryTools(ToolGroup):
    async def remember(
        self, content: Annotated[str, Field(description="one self-contained statement")],
        kind: MemoryKind = "fact", tags: Tags = None, importance: Unit = None,
        confidence: Unit = None, triple: TripleArg = None, valid_from: ValidFrom = None,
        valid_to: ValidTo = None,
        session_id: Annotated[UUID | None, Field(description=(
            "the conversation it belongs to: session memory, found with that session only "
            "until promoted"))] = None,
        space: Space = None) -> Remembered:
        """Remember something worth keeping (a fact, decision, preference, observation,
        procedure, steering_rule...). Returns the new item's id, the write's position and,
        when it replaced an item (same subject and predicate), that item's id."""
        target = self._space(space)
        with self._guard("remember"):
            memory = self._command(
                c.AssertMemory, space_id=target, content=content, kind=kind,
                tags=tuple(tags or ()), importance=importance, confidence=confidence,
                triple=triple, valid_from=valid_from, valid_to=valid_to, session_id=session_id)
            return answers.remembered(await self._assert(memory), target)

    async def _assert(self, memory: c.AssertMemory) -> WriteResult:
        try:
            return await self.client.send(memory)
        except NotFound as missing:
            # The server's own space is created on first use; any other must exist already.
            if memory.space_id != self.defaults.space or not missing.message.startswith(
                    "space"):
                raise
        with suppress(Conflict):
            await self.client.create_space(self.defaults.space)
        return await self.client.send(memory)

    async def revise(
        self, item_id: ItemId, content: Annotated[str | None, Field(
            description="the new statement")] = None, triple: TripleArg = None,
        confidence: Unit = None, importance: Unit = None, tags: Annotated[list[str] | None, Field(
            description="the new tags (replace the old ones)")] = None, reason: Reason = None,
        valid_from: Annotated[datetime | None, Field(description=(
            "with valid_to: correct the record for this period only (what was true "
            "then); alone: from when the new version holds"))] = None,
        valid_to: ValidTo = None, space: Space = None) -> Changed:
        """Change what an item says or its attributes: a revision from now on, or, with
        valid_from/valid_to, a correction of what was true in that period. Name at least one
        of content, triple, confidence, importance, tags. History keeps every version."""
        with self._guard("revise"):
            result = await self._send(
                c.ReviseMemory, space_id=self._space(space), item_id=item_id, content=content,
                triple=triple, confidence=confidence, importance=importance,
                tags=None if tags is None else tuple(tags), reason=reason,
                valid_from=valid_from, valid_to=valid_to)
            return Changed(item_id=str(item_id), position=result.position)

    async def retract(
        self, item_id: ItemId, valid_until: Annotated[datetime | None, Field(description=(
            "when it stopped being true (default: now; ISO 8601 with offset)"))] = None,
        reason: Reason = None, space: Space = None) -> Changed:
        """Say that an item stopped being true (at valid_until): it leaves recall, and
        what_was_true for earlier times still shows it. For something that was never true,
        use revise with valid_from/valid_to, or forget."""
        with self._guard("retract"):
            result = await self._send(c.RetractMemory, space_id=self._space(space),
                                      item_id=item_id, valid_until=valid_until, reason=reason)
            return Changed(item_id=str(item_id), position=result.position)

    async def promote(
        self, item_id: ItemId, layer: Annotated[Literal["project", "ecosystem"], Field(
            description="project: the whole space; ecosystem: every space of the tenant, "
                        "never archived by policy")] = "project",
        reason: Reason = None, space: Space = None) -> Changed:
        """Widen where a memory counts: a session's memory to the project (found without
        naming the session), or to the ecosystem."""
        with self._guard("promote"):
            result = await self._send(c.PromoteMemory, space_id=self._space(space),
                                      item_id=item_id, layer=layer, reason=reason)
            return Changed(item_id=str(item_id), position=result.position)

    async def forget(
        self, item_id: ItemId,
        reason: Annotated[str, Field(min_length=1, max_length=2_048)] = "asked to forget",
        space: Space = None) -> Changed:
        """Archive an item: it leaves recall and plain reads; history and past views keep
        it."""
        with self._guard("forget"):
            result = await self._send(c.ArchiveMemory, space_id=self._space(space),
                                      item_id=item_id, reason=reason)
            return Changed(item_id=str(item_id), position=result.position)

    async def feedback(
        self, item_ids: Annotated[list[UUID], Field(min_length=1, max_length=100, description=(
            "the items the feedback is about (hits of one recall, of one space)"))],
        signal: Annotated[Literal["used", "unused", "rating"], Field(description=(
            "used: it helped; unused: it was shown but not used; rating: with rating"))],
        rating: Annotated[int | None, Field(ge=1, le=5, description=(
            "1 (useless or wrong) to 5 (exactly right); only with signal 'rating'"))] = None,
        retrieval_id: Annotated[UUID | None, Field(description=(
            "the retrieval_id recall returned: ties the feedback to what was shown"))] = None,
        comment: Annotated[str | None, Field(max_length=65_536)] = None,
        space: Space = None) -> FeedbackRecorded:
        """Tell memledger which memories a recall showed were used, unused, or how good they
        were: recall ranks by it later. All or nothing: one bad id records none."""
        with self._guard("feedback"):
            sent = [self._command(c.RecordFeedback, space_id=self._space(space), item_id=i,
                                  signal=signal, rating=rating, retrieval_id=retrieval_id,
                                  comment=comment) for i in item_ids]
            result = await self.client.batch(sent)
            return FeedbackRecorded(recorded=len(result.results), position=result.position)
