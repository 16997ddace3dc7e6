"""The MCP tools of the entity graph: link_entity (name an entity), relate and unrelate two
of them, and related (what an entity is connected to)."""

from datetime import datetime
from typing import Annotated
from uuid import UUID

from pydantic import Field

from memledger_cli.mcp_answers import POSITION, Answer
from memledger_cli.mcp_tools import Reason, Space, ToolGroup, Unit, ValidFrom, ValidTo
from memledger_client.results import Neighbours
from memledger_schemas import commands as c

EntityId = Annotated[str, Field(pattern=r"^[A-Za-z0-9_:.@/-]{1,128}$", description=(
    "your id for the entity, e.g. 'person:alice' or 'wikidata/Q42' (letters, digits and "
    "_:.@/-)"))]


class EntityLinked(Answer):
    entity_id: str
    position: int = Field(description=POSITION)


class Related(Answer):
    relation_id: str = Field(description="pass it to unrelate to end the relation")
    position: int = Field(description=POSITION)


class GraphTools(ToolGroup):
    async def link_entity(
        self, entity_id: EntityId, name: Annotated[str, Field(min_length=1, max_length=512)],
        type: Annotated[str, Field(min_length=1, max_length=512, description=(
            "what it is, e.g. person, place, project"))],
        aliases: Annotated[list[str] | None, Field(max_length=64, description=(
            "other names it goes by"))] = None,
        space: Space = None) -> EntityLinked:
        """Create an entity, or update its name, type and aliases (the same entity_id)."""
        with self._guard("link_entity"):
            result = await self._send(c.UpsertEntity, space_id=self._space(space),
                                      entity_id=entity_id, name=name, type=type,
                                      aliases=tuple(aliases or ()))
            return EntityLinked(entity_id=entity_id, position=result.position)

    async def relate(
        self, source_entity: EntityId, relation_type: Annotated[str, Field(
            min_length=1, max_length=512, description="e.g. works_at, manages, part_of")],
        target_entity: EntityId, confidence: Unit = None, valid_from: ValidFrom = None,
        valid_to: ValidTo = None, space: Space = None) -> Related:
        """Relate two entities (both made with link_entity first): source relation_type
        target, true from valid_from (default now) until valid_to (default open)."""
        with self._guard("relate"):
            result = await self._send(
                c.AssertRelation, space_id=self._space(space), source_entity=source_entity,
                relation_type=relation_type, target_entity=target_entity,
                confidence=confidence, valid_from=valid_from, valid_to=valid_to)
            return Related(relation_id=result.ids["relation_id"], position=result.position)

    async def unrelate(
        self, relation_id: Annotated[UUID, Field(description=(
            "the relation's id (relate and related give them)"))],
        reason: Reason = None, space: Space = None) -> Related:
        """End a relation: related no longer walks it."""
        with self._guard("unrelate"):
            result = await self._send(c.RetractRelation, space_id=self._space(space),
                                      relation_id=relation_id, reason=reason)
            return Related(relation_id=str(relation_id), position=result.position)

    async def related(
        self, entity_id: EntityId,
        depth: Annotated[int, Field(ge=1, le=3, description="how many relations away")] = 1,
        valid_at: Annotated[datetime | None, Field(description=(
            "the relations that held then (default: now; ISO 8601 with offset)"))] = None,
        space: Space = None) -> Neighbours:
        """The entities connected to an entity (either direction, up to depth relations
        away) and the relations walked to reach them."""
        with self._guard("related"):
            return await self.client.neighbours(self._space(space), entity_id, depth=depth,
                                                valid_at=valid_at)
