"""The MCP prune tool: forget many items at once, by what they are (kinds, tags, session,
agent, triple) and how weak or old they are; a dry run (the default) only lists them.

It archives through the public API, each item with the reason given, as ``forget`` does one
at a time: the space's policy already archives what it decides on its own schedule (the
lifecycle scheduler), so what an agent lacks is a bulk forget by its own criteria.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated
from uuid import UUID

from pydantic import Field

from memledger_cli.mcp_answers import Answer
from memledger_cli.mcp_tools import Space, ToolGroup, Unit
from memledger_client import InvalidRequest
from memledger_client.results import Item
from memledger_schemas import commands as c
from memledger_schemas.events import MemoryKind

PAGE = 500
MAX_SCANNED = 10_000
"""Items looked at in one call at most: a larger space is pruned over several calls."""
CRITERIA = ("kinds", "tags", "session_id", "agent_id", "subject", "predicate",
            "valid_before", "importance_below", "confidence_below")
NO_CRITERIA = (f"name what to prune with at least one of {', '.join(CRITERIA)} (an "
               "unfiltered prune would archive the whole space)")


@dataclass(frozen=True)
class Criteria:
    """Which active items a prune takes (every criterion given must hold)."""

    kinds: list[MemoryKind] | None = None
    tags: list[str] | None = None
    session_id: UUID | None = None
    agent_id: str | None = None
    subject: str | None = None
    predicate: str | None = None
    valid_before: datetime | None = None
    importance_below: float | None = None
    confidence_below: float | None = None

    def named(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in CRITERIA
                if getattr(self, name) not in (None, [])}

    def takes(self, item: Item) -> bool:
        """The criteria the listing cannot filter by: validity, importance, confidence."""
        return item.status == "active" and all((
            self.valid_before is None or item.valid_from < self.valid_before,
            self.importance_below is None or item.importance < self.importance_below,
            self.confidence_below is None or item.confidence < self.confidence_below))


class Candidate(Answer):
    item_id: str
    kind: str
    content: str
    tags: list[str]
    importance: float
    confidence: float
    valid_from: datetime


class Pruned(Answer):
    dry_run: bool
    matched: list[Candidate] = Field(description="the items the criteria take (at most limit)")
    archived: list[str] = Field(description="the ids archived (none on a dry run)")
    more: bool = Field(description="more items may match: call again to take the next ones")
    reason: str = Field(description="the reason each archived item's history shows")
    position: int | None = Field(description="the archiving's global position (a dry run: "
                                             "none)")


class PruneTools(ToolGroup):
    async def prune(
        self, kinds: list[MemoryKind] | None = None,
        tags: Annotated[list[str] | None, Field(description="items with all these tags")] = None,
        session_id: Annotated[UUID | None, Field(description="a session's memory")] = None,
        agent_id: Annotated[str | None, Field(max_length=64, description=(
            "what this agent wrote"))] = None,
        subject: Annotated[str | None, Field(max_length=512, description=(
            "items whose triple has this subject"))] = None,
        predicate: Annotated[str | None, Field(max_length=512, description=(
            "items whose triple has this predicate"))] = None,
        valid_before: Annotated[datetime | None, Field(description=(
            "items true since before this time (ISO 8601 with offset)"))] = None,
        importance_below: Unit = None, confidence_below: Unit = None,
        dry_run: Annotated[bool, Field(description=(
            "true (default): only list what would be archived; false: archive it"))] = True,
        limit: Annotated[int, Field(ge=1, le=500, description=(
            "archive (or list) at most this many"))] = 50,
        reason: Annotated[str | None, Field(max_length=1_024, description=(
            "why, for each item's history"))] = None,
        space: Space = None) -> Pruned:
        """Forget many items at once: every active item matching all the criteria given (at
        least one). Run it first as a dry run (the default) and check the list; then call
        again with dry_run false to archive them (history keeps them, as forget does)."""
        criteria = Criteria(kinds, tags, session_id, agent_id, subject, predicate,
                            valid_before, importance_below, confidence_below)
        target = self._space(space)
        with self._guard("prune"):
            if not criteria.named():
                raise InvalidRequest(None, "invalid_request", NO_CRITERIA)
            found, more = await self._matching(target, criteria, limit)
            why = _reason(reason, criteria)
            position = None if dry_run or not found else await self._archive(target, found,
                                                                            why)
            return Pruned(dry_run=dry_run, matched=[_candidate(i) for i in found],
                          archived=[] if position is None else [i.item_id for i in found],
                          more=more, reason=why, position=position)

    async def _matching(self, space: str, criteria: Criteria, limit: int
                        ) -> tuple[list[Item], bool]:
        """Up to ``limit`` matching items, in id order, all read at one basis; and whether
        more may match."""
        found: list[Item] = []
        after, pinned, scanned = None, None, 0
        while scanned < MAX_SCANNED:
            page = await self.client.items(
                space, kinds=criteria.kinds or [], tags=criteria.tags or [],
                session_id=criteria.session_id, agent_id=criteria.agent_id,
                subject=criteria.subject, predicate=criteria.predicate, limit=PAGE,
                after=after, as_of_position=pinned)
            pinned, scanned = page.basis.position, scanned + len(page.items)
            found += [i for i in page.items if criteria.takes(i)]
            if len(found) > limit:
                return found[:limit], True
            if len(page.items) < PAGE:
                return found, False
            after = page.items[-1].item_id
        return found, True

    async def _archive(self, space: str, items: list[Item], reason: str) -> int:
        """All or none (one batch): an item changed meanwhile refuses the whole prune."""
        result = await self.client.batch([
            self._command(c.ArchiveMemory, space_id=space, item_id=i.item_id, reason=reason)
            for i in items])
        return result.position


def _reason(given: str | None, criteria: Criteria) -> str:
    named = "; ".join(f"{k}={_text(v)}" for k, v in criteria.named().items())
    return f"pruned by agent: {given}" if given else f"pruned by agent ({named})"[:2_048]


def _text(value: object) -> str:
    if isinstance(value, list):
        return ",".join(map(str, value))
    return value.isoformat() if isinstance(value, datetime) else str(value)


def _candidate(item: Item) -> Candidate:
    return Candidate(item_id=item.item_id, kind=item.kind, content=item.content,
                     tags=item.tags, importance=item.importance, confidence=item.confidence,
                     valid_from=item.valid_from)
