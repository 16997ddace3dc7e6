"""Typed shortcuts for the commands of operators and of the graph, written once for both
clients (as ``writes``): space policy and archive, agents, promotion and merges, entities and
relations. A bad field fails before any request, naming its path."""

from collections.abc import Sequence
from typing import Any, Generic, Literal, Unpack
from uuid import UUID

from memledger_client.writes import CommandMeta, W, WriteMethods, command
from memledger_schemas.commands import (
    ArchiveSpace,
    AssertRelation,
    MergeMemories,
    PromoteMemory,
    RegisterAgent,
    RetractRelation,
    SetSpacePolicy,
    UpsertEntity,
)


class AdminWriteMethods(WriteMethods[W], Generic[W]):
    def set_space_policy(self, space_id: str, policy: dict[str, Any],
                         **meta: Unpack[CommandMeta]) -> W:
        """A new policy version: the fields of ``policy`` (``SetSpacePolicy``) change, the
        others keep their previous value."""
        return self.send(command(SetSpacePolicy, space_id=space_id, **policy, **meta))

    def archive_space(self, space_id: str, *, reason: str | None = None,
                      **meta: Unpack[CommandMeta]) -> W:
        return self.send(command(ArchiveSpace, space_id=space_id, reason=reason, **meta))

    def register_agent(self, agent_id: str, *, name: str | None = None,
                       description: str | None = None, idempotency_key: str | None = None
                       ) -> W:
        return self.send(command(RegisterAgent, agent_id=agent_id, name=name,
                                 description=description, idempotency_key=idempotency_key))

    def promote_memory(self, space_id: str, item_id: UUID | str, *,
                       layer: Literal["project", "ecosystem"] = "project",
                       reason: str | None = None, **meta: Unpack[CommandMeta]) -> W:
        """Move a memory up a layer: a session's memory to the project, or to the ecosystem."""
        return self.send(command(PromoteMemory, space_id=space_id, item_id=item_id,
                                 layer=layer, reason=reason, **meta))

    def merge_memories(self, space_id: str, item_id: UUID | str,
                       merged_item_ids: Sequence[UUID | str], *, similarity: float = 1.0,
                       reason: str | None = None, **meta: Unpack[CommandMeta]) -> W:
        """Fold near-duplicates into ``item_id`` (each is superseded, reason "merged")."""
        return self.send(command(MergeMemories, space_id=space_id, item_id=item_id,
                                 merged_item_ids=tuple(merged_item_ids),
                                 similarity=similarity, reason=reason, **meta))

    def upsert_entity(self, space_id: str, entity_id: str, name: str, type: str, *,
                      aliases: Sequence[str] = (), **meta: Unpack[CommandMeta]) -> W:
        return self.send(command(UpsertEntity, space_id=space_id, entity_id=entity_id,
                                 name=name, type=type, aliases=tuple(aliases), **meta))

    def assert_relation(self, space_id: str, source_entity: str, relation_type: str,
                        target_entity: str, *, confidence: float = 1.0,
                        **meta: Unpack[CommandMeta]) -> W:
        """``source_entity`` —``relation_type``→ ``target_entity``, valid from now."""
        return self.send(command(AssertRelation, space_id=space_id,
                                 source_entity=source_entity, relation_type=relation_type,
                                 target_entity=target_entity, confidence=confidence, **meta))

    def retract_relation(self, space_id: str, relation_id: UUID | str, *,
                         reason: str | None = None, **meta: Unpack[CommandMeta]) -> W:
        return self.send(command(RetractRelation, space_id=space_id, relation_id=relation_id,
                                 reason=reason, **meta))
