"""The MCP tools, each one call to the client (``AsyncClient``) and one cut-down answer.

Their signatures are their input schemas and their docstrings what the agent reads, so both
say what to pass and what comes back. ``space`` defaults to the server's space; ``"*"`` means
every space of the tenant where a tool can read across spaces.
"""

from collections.abc import Callable
from contextlib import AbstractContextManager, suppress
from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field

from memledger_cli import mcp_answers as answers
from memledger_cli.mcp_answers import (
    Changes,
    Context,
    Forgotten,
    ItemHistory,
    Recalled,
    Remembered,
    Truth,
)
from memledger_client import AsyncClient, Conflict, NotFound, WriteResult
from memledger_client.writes import command
from memledger_query.semantic_dto import MAX_WINDOW, SearchKind
from memledger_schemas.commands import AssertMemory
from memledger_schemas.events import MemoryKind, Role

Failures = Callable[[str, str, str], AbstractContextManager[None]]
"""``failures(tool, base_url, space)``: turns client errors into tool errors."""

Space = Annotated[str | None, Field(description="space id (default: the server's space)")]
ReadSpace = Annotated[str | None, Field(
    description="space id (default: the server's space; '*': every space of the tenant)")]
ValidAt = Annotated[datetime | None, Field(
    description="valid time, ISO 8601 with offset: what was true then (default: now)")]
AsOfPosition = Annotated[int | None, Field(
    ge=0, description="what memledger knew as of this global position (default: latest)")]
Tags = Annotated[list[str] | None, Field(description="tags, e.g. ['billing']")]


class Tools:
    def __init__(self, client: AsyncClient, space: str, failures: Failures) -> None:
        self.client, self.space, self._failures = client, space, failures

    def _guard(self, tool: str) -> AbstractContextManager[None]:
        return self._failures(tool, self.client.base_url, self.space)

    async def remember(
        self, content: Annotated[str, Field(description="one self-contained statement")],
        kind: MemoryKind = "fact", tags: Tags = None,
        importance: Annotated[float | None, Field(ge=0, le=1)] = None,
        confidence: Annotated[float | None, Field(ge=0, le=1)] = None,
        valid_from: Annotated[datetime | None, Field(
            description="since when it is true, if not now (ISO 8601 with offset)")] = None,
        space: Space = None) -> Remembered:
        """Remember something worth keeping (a fact, decision, preference, observation,
        procedure, steering_rule...). Returns the new item's id and the write's position."""
        target = space or self.space
        with self._guard("remember"):
            memory = command(AssertMemory, space_id=target, content=content, kind=kind,
                             tags=tuple(tags or ()), importance=importance,
                             confidence=confidence, valid_from=valid_from)
            return answers.remembered(await self._assert(memory), target)

    async def _assert(self, memory: AssertMemory) -> WriteResult:
        try:
            return await self.client.send(memory)
        except NotFound as missing:
            # The server's own space is created on first use; any other must exist already.
            if memory.space_id != self.space or not missing.message.startswith("space"):
                raise
        with suppress(Conflict):
            await self.client.create_space(self.space)
        return await self.client.send(memory)

    async def recall(
        self, query: Annotated[str, Field(description="what to look for, in plain words")],
        space: ReadSpace = None, kinds: Annotated[list[SearchKind] | None, Field(
            description="memory kinds and/or 'message' (what was said in conversations); "
                        "default: all")] = None, tags: Tags = None,
        mode: Annotated[Literal["execution", "planning", "brainstorming"], Field(
            description="execution: few close matches; planning: more; brainstorming: "
                        "many, loose")] = "planning",
        k: Annotated[int | None, Field(ge=1, le=100)] = None, valid_at: ValidAt = None,
        as_of_position: AsOfPosition = None,
        session_id: Annotated[str | None, Field(
            description="only this conversation's messages and memory")] = None,
        participant: Annotated[str | None, Field(
            description="only messages said by this participant")] = None,
        role: Annotated[Role | None, Field(description="only messages of this role")] = None,
        window: Annotated[int, Field(ge=0, le=MAX_WINDOW, description=(
            "with each message found, this many turns before and after it"))] = 0) -> Recalled:
        """Search memories and conversation messages by meaning and by words; best first,
        with their ids (a message also with its session, who said it and when)."""
        with self._guard("recall"):
            answer = await self.client.search(
                query, spaces=self._spaces(space), kinds=kinds or [], tags=tags or [],
                mode=mode, k=k, valid_at=valid_at, as_of_position=as_of_position,
                session_id=session_id, participant=participant, role=role, window=window)
            return answers.recalled(answer)

    async def get_context(
        self, session_id: Annotated[str | None, Field(
            description="the conversation's session id: its recent turns come first")] = None,
        query: Annotated[str | None, Field(
            description="what the context is for (default: the session's last user "
                        "message)")] = None,
        budget_tokens: Annotated[int, Field(ge=16, le=100_000)] = 2_000,
        space: Space = None) -> Context:
        """A token-budgeted briefing: recent turns, relevant memories, standing preferences
        and steering rules, recent history; ``rendered`` is ready to read."""
        with self._guard("get_context"):
            answer = await self.client.context(space or self.space, session_id=session_id,
                                               query=query, budget_tokens=budget_tokens)
            return answers.context(answer)

    async def what_changed_since(
        self, cursor: Annotated[str | None, Field(
            description="next_cursor from the previous call: only what came after")] = None,
        since: Annotated[datetime | None, Field(
            description="or: changes recorded strictly after this time")] = None,
        space: ReadSpace = None, limit: Annotated[int, Field(ge=1, le=1_000)] = 50) -> Changes:
        """What was written, in order (oldest first). Keep next_cursor and pass it as cursor
        next time to get only the newer changes."""
        with self._guard("what_changed_since"):
            page = await self.client.changes(self._space_or_tenant(space), after=cursor,
                                             since=since, limit=limit)
            return answers.changes(page)

    async def what_was_true(
        self, item_id: Annotated[str | None, Field(
            description="one item; without it, the items of the space")] = None,
        valid_at: ValidAt = None, as_of_position: AsOfPosition = None,
        recorded_at: Annotated[datetime | None, Field(
            description="or: what memledger knew at this time")] = None,
        space: Space = None, kinds: list[MemoryKind] | None = None, tags: Tags = None,
        include_archived: bool = False,
        limit: Annotated[int, Field(ge=1, le=1_000)] = 50) -> Truth:
        """The memory as it was: true at valid_at, as known at as_of_position or recorded_at
        (defaults: now, latest). The basis returned repeats the answer exactly."""
        target = space or self.space
        with self._guard("what_was_true"):
            if item_id is not None:
                one = await self.client.item(target, item_id, valid_at=valid_at,
                                             as_of_position=as_of_position,
                                             recorded_at=recorded_at)
                return answers.truth(one.basis, [one.item])
            many = await self.client.items(
                target, valid_at=valid_at, as_of_position=as_of_position,
                recorded_at=recorded_at, kinds=kinds or [], tags=tags or [],
                include_archived=include_archived, limit=limit)
            return answers.truth(many.basis, many.items)

    async def history(self, item_id: str, space: Space = None) -> ItemHistory:
        """Every change to an item (who, why, when) and every version (when true, when
        known)."""
        with self._guard("history"):
            return answers.history(await self.client.history(space or self.space, item_id))

    async def forget(
        self, item_id: str,
        reason: Annotated[str, Field(min_length=1, max_length=2_048)] = "asked to forget",
        space: Space = None) -> Forgotten:
        """Archive an item: it leaves recall and plain reads; history and past views keep
        it."""
        with self._guard("forget"):
            result = await self.client.archive_memory(space or self.space, item_id, reason)
            return Forgotten(item_id=item_id, position=result.position)

    def _spaces(self, space: str | None) -> list[str]:
        return [] if space == "*" else [space or self.space]

    def _space_or_tenant(self, space: str | None) -> str | None:
        return None if space == "*" else space or self.space
