"""What an extractor's answers become: commands for ingest. Pure, so the same answer always
yields the same commands under the same idempotency keys and item ids (derived from the
extractor, its prompt version and the sources), and a redelivered message, a restart or a
second enricher records nothing twice.

- a fact or preference: ``derive_memory`` (kind, triple, confidence; layer "project", valid
  from when it was said), so belief revision, decay, retention and search treat it as any
  memory;
- a summary: ``derive_memory`` of kind ``episode`` in its session;
- entities: ``upsert_entity`` (an opaque id from the name: ids are kept in the clear), then
  relations: ``assert_relation`` between them.

Each is sealed under the data subject of its source and names the source's key, so erasing the
subject erases what was derived from it, and nothing is derived from it afterwards.
"""

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID, uuid5

from memledger_enricher.extractor import Entity, Extractor, Fact, Findings, Summary, Turn
from memledger_schemas import commands as c
from memledger_schemas.events import Derivation, SourceRef, Triple

ACTOR = "enricher"
DERIVED_TAG = "derived"
SUMMARY_TAG = "summary"
_NAMESPACE = UUID("3b1e7c52-8d0f-4a6e-9f21-5c7d2a9e4b18")

Waves = list[list[c.CommandBase]]
"""Commands in the order they must be recorded: each list after the one before (an entity
before a relation naming it, one triple after another on the same slot); the commands of one
list in any order."""


@dataclass(frozen=True)
class Origin:
    """Where a derivation comes from: the source's tenant, space and session, its data subject
    and the key that sealed it."""

    tenant: str
    space: str
    session_id: UUID
    correlation_id: str
    subject: str | None = None
    key_id: str | None = None

    def common(self) -> dict[str, Any]:
        return {"actor": ACTOR, "correlation_id": self.correlation_id[:512],
                "subject_id": self.subject}


def from_turn(origin: Origin, turn: Turn, findings: Findings, extractor: Extractor) -> Waves:
    """The commands recording what ``extractor`` found in ``turn``."""
    stem = _stem(extractor, f"message/{turn.message_id}")
    facts: Waves = [[_fact(origin, turn, fact, f"{stem}/fact/{i}", extractor)]
                    for i, fact in enumerate(findings.facts)]
    ids = {e.name.casefold(): entity_ref(origin.space, e.name) for e in findings.entities}
    entities: list[c.CommandBase] = [_entity(origin, e, ids[e.name.casefold()])
                                     for e in findings.entities]
    relations: list[c.CommandBase] = [_relation(origin, turn, r.relation, ids[r.source.casefold()],
                           ids[r.target.casefold()], r.confidence)
                 for r in findings.relations
                 if r.source.casefold() in ids and r.target.casefold() in ids]
    return [*([entities] if entities else []), *facts, *([relations] if relations else [])]


def from_summary(origin: Origin, summary: Summary, span: str, said_at: datetime | None,
                 extractor: Extractor) -> c.DeriveMemory:
    """The episode recording ``summary`` of the turns ``span`` names ("1-50", "session")."""
    key = f"{_stem(extractor, f'session/{origin.session_id}')}/summary/{span}"
    sources = tuple(SourceRef(type="message", ref=str(m)) for m in summary.sources[:32])
    return c.DeriveMemory(
        idempotency_key=key, item_id=item_id(origin.tenant, key), space_id=origin.space,
        session_id=origin.session_id, layer="project", kind="episode", content=summary.text,
        tags=(DERIVED_TAG, SUMMARY_TAG), sources=sources, derivation=_derivation(extractor),
        valid_from=said_at, source_key_id=origin.key_id, **origin.common())


def _fact(origin: Origin, turn: Turn, fact: Fact, key: str, extractor: Extractor
          ) -> c.DeriveMemory:
    return c.DeriveMemory(
        idempotency_key=key, item_id=item_id(origin.tenant, key), space_id=origin.space,
        session_id=origin.session_id, layer="project", kind=fact.kind,
        content=fact.statement, confidence=round(min(1.0, max(0.0, fact.confidence)), 6),
        triple=Triple(subject=fact.subject, predicate=fact.predicate, object=fact.object),
        tags=(DERIVED_TAG,), sources=(SourceRef(type="message", ref=str(turn.message_id)),),
        derivation=_derivation(extractor), valid_from=turn.said_at,
        source_key_id=origin.key_id, **origin.common())


def _entity(origin: Origin, entity: Entity, entity_id: str) -> c.UpsertEntity:
    return c.UpsertEntity(idempotency_key=f"forming/entity/{origin.space}/{entity_id}",
                          space_id=origin.space, entity_id=entity_id, name=entity.name,
                          type=entity.type[:512], **origin.common())


def _relation(origin: Origin, turn: Turn, relation: str, source: str, target: str,
              confidence: float) -> c.AssertRelation:
    key = f"forming/relation/{origin.space}/{source}/{relation}/{target}"
    return c.AssertRelation(
        idempotency_key=key[:512], relation_id=item_id(origin.tenant, key),
        space_id=origin.space, source_entity=source, relation_type=relation[:512],
        target_entity=target, confidence=round(min(1.0, max(0.0, confidence)), 6),
        valid_from=turn.said_at, **origin.common())


def entity_ref(space: str, name: str) -> str:
    """An entity's id from its name: a digest (ids stay in the clear; names are sealed)."""
    digest = hashlib.sha256(f"{space}\x00{' '.join(name.casefold().split())}".encode())
    return f"ent:{digest.hexdigest()[:24]}"


def item_id(tenant: str, key: str) -> UUID:
    """The id of what ``key`` derives: the same whenever it is derived again."""
    return uuid5(_NAMESPACE, f"{tenant}/{key}")


def _stem(extractor: Extractor, source: str) -> str:
    return f"forming/{extractor.extractor_id}/{extractor.prompt_version}/{source}"


def _derivation(extractor: Extractor) -> Derivation:
    return Derivation(extractor=extractor.extractor_id, prompt_version=extractor.prompt_version)
