"""The MCP tools that read memory: recall, get_context, what_changed_since, what_was_true and
history. ``space`` ``"*"`` means every space of the tenant where a tool can read across
spaces."""

import logging
from datetime import datetime
from typing import Annotated, Literal
from uuid import UUID

from pydantic import Field

from memledger_cli import mcp_answers as answers
from memledger_cli.mcp_answers import Changes, Context, ItemHistory, Recalled, Truth
from memledger_cli.mcp_tools import ItemId, Space, Tags, ToolGroup
from memledger_client import SearchOptions, Unavailable
from memledger_client.results import SearchAnswer
from memledger_schemas.api.semantic import MAX_WINDOW, SearchKind
from memledger_schemas.events import MemoryKind, Role

log = logging.getLogger("memledger.mcp")

ReadSpace = Annotated[str | None, Field(
    description="space id (default: the server's space; '*': every space of the tenant)")]
ValidAt = Annotated[datetime | None, Field(
    description="valid time, ISO 8601 with offset: what was true then (default: now)")]
AsOfPosition = Annotated[int | None, Field(
    ge=0, description="what memledger knew as of this global position (default: latest)")]
RecordedAt = Annotated[datetime | None, Field(
    description="or: what memledger knew at this time (ISO 8601 with offset)")]
SessionId = Annotated[UUID | None, Field(
    description="only this conversation's messages and memory")]
AgentId = Annotated[str | None, Field(max_length=64, description="only what this agent wrote")]
Limit = Annotated[int, Field(ge=1, le=1_000)]


class ReadTools(ToolGroup):
    async def recall(
        self, query: Annotated[str, Field(description="what to look for, in plain words")],
        space: ReadSpace = None, kinds: Annotated[list[SearchKind] | None, Field(
            description="memory kinds and/or 'message' (what was said in conversations); "
                        "default: all")] = None, tags: Tags = None,
        mode: Annotated[Literal["execution", "planning", "brainstorming"], Field(
            description="execution: few close matches; planning: more; brainstorming: "
                        "many, loose")] = "planning",
        k: Annotated[int | None, Field(ge=1, le=100)] = None, valid_at: ValidAt = None,
        as_of_position: AsOfPosition = None, recorded_at: RecordedAt = None,
        session_id: SessionId = None, agent_id: AgentId = None,
        participant: Annotated[str | None, Field(
            description="only messages said by this participant")] = None,
        role: Annotated[Role | None, Field(description="only messages of this role")] = None,
        window: Annotated[int, Field(ge=0, le=MAX_WINDOW, description=(
            "with each message found, this many turns before and after it"))] = 0,
        audit: Annotated[bool, Field(description=(
            "record what this recall showed and answer with its retrieval_id, for "
            "feedback (false: an unrecorded lookup)"))] = True,
        theme: Annotated[UUID | None, Field(description=(
            "only the memories of this theme (the themes tool gives their ids)"))] = None,
        ) -> Recalled:
        """Search memories and conversation messages by meaning and by words; best first,
        with their ids (a message also with its session, who said it and when) and the
        retrieval_id to give feedback on."""
        with self._guard("recall"):
            options: SearchOptions = {
                "spaces": self._spaces(space), "kinds": kinds or [], "tags": tags or [],
                "mode": mode, "k": k, "valid_at": valid_at, "as_of_position": as_of_position,
                "recorded_at": recorded_at, "session_id": session_id, "agent_id": agent_id,
                "participant": participant, "role": role, "window": window, "audit": audit,
                "theme": theme}
            answer = await self._search(query, options)
            return answers.recalled(answer)

    async def get_context(
        self, session_id: Annotated[UUID | None, Field(
            description="the conversation's session id: its recent turns come first")] = None,
        query: Annotated[str | None, Field(
            description="what the context is for (default: the session's last user "
                        "message)")] = None,
        budget_tokens: Annotated[int, Field(ge=16, le=100_000)] = 2_000,
        space: Space = None) -> Context:
        """A token-budgeted briefing: recent turns, relevant memories, standing preferences
        and steering rules, recent history; ``rendered`` is ready to read."""
        with self._guard("get_context"):
            answer = await self.client.context(self._space(space), session_id=session_id,
                                               query=query, budget_tokens=budget_tokens)
            return answers.context(answer)

    async def what_changed_since(
        self, cursor: Annotated[str | None, Field(
            description="next_cursor from the previous call: only what came after")] = None,
        since: Annotated[datetime | None, Field(
            description="or: changes recorded strictly after this time")] = None,
        space: ReadSpace = None, limit: Limit = 50) -> Changes:
        """What was written, in order (oldest first). Keep next_cursor and pass it as cursor
        next time to get only the newer changes."""
        with self._guard("what_changed_since"):
            page = await self.client.changes(None if space == "*" else self._space(space),
                                             after=cursor, since=since, limit=limit)
            return answers.changes(page)

    async def what_was_true(
        self, item_id: Annotated[UUID | None, Field(
            description="one item; without it, the items of the space")] = None,
        valid_at: ValidAt = None, as_of_position: AsOfPosition = None,
        recorded_at: RecordedAt = None, space: Space = None,
        kinds: list[MemoryKind] | None = None, tags: Tags = None, session_id: SessionId = None,
        agent_id: AgentId = None, include_archived: bool = False, limit: Limit = 50) -> Truth:
        """The memory as it was: true at valid_at, as known at as_of_position or recorded_at
        (defaults: now, latest). The basis returned repeats the answer exactly."""
        target = self._space(space)
        with self._guard("what_was_true"):
            if item_id is not None:
                one = await self.client.item(target, item_id, valid_at=valid_at,
                                             as_of_position=as_of_position,
                                             recorded_at=recorded_at)
                return answers.truth(one.basis, [one.item])
            many = await self.client.items(
                target, valid_at=valid_at, as_of_position=as_of_position,
                recorded_at=recorded_at, kinds=kinds or [], tags=tags or [],
                session_id=session_id, agent_id=agent_id, include_archived=include_archived,
                limit=limit)
            return answers.truth(many.basis, many.items)

    async def history(self, item_id: ItemId, space: Space = None) -> ItemHistory:
        """Every change to an item (who, why, when) and every version (when true, when
        known)."""
        with self._guard("history"):
            return answers.history(await self.client.history(self._space(space), item_id))

    async def _search(self, query: str, options: SearchOptions) -> SearchAnswer:
        """Audited if asked; where memledger cannot record the retrieval, the same search
        unaudited (its answer then has no retrieval_id), rather than no answer."""
        try:
            return await self.client.search(query, **options)
        except Unavailable as failed:
            if not options.get("audit") or failed.code != "audit_failed":
                raise
            log.warning("recall could not be audited (%s): answered without a retrieval_id",
                        failed.message)
        unaudited: SearchOptions = {**options, "audit": False}
        return await self.client.search(query, **unaudited)

    def _spaces(self, space: str | None) -> list[str]:
        return [] if space == "*" else [self._space(space)]
