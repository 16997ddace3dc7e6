"""One handler per command: check it against the current state, say what happened. Pure."""

import hashlib
from dataclasses import replace
from datetime import datetime
from uuid import UUID

from memledger_ingest.domain import targets as t
from memledger_ingest.domain.errors import Conflict, Invalid, NotFound
from memledger_ingest.domain.streams import Status, StreamRef, StreamState
from memledger_ingest.domain.targets import (
    Context,
    Decision,
    Lookup,
    entity_ref,
    new_or,
    register,
    route_of,
    slot_ref,
    target_of,
)
from memledger_schemas import commands as c
from memledger_schemas import events as e
from memledger_schemas.envelope import TENANT_SCOPE


def _active_space(lookup: Lookup, space_id: str) -> StreamState:
    state = lookup(StreamRef("space", space_id))
    if state is None:
        raise NotFound("space", space_id)
    if state.status != "active":
        raise Conflict(f"space {space_id!r} is archived", state.version)
    return state


def _existing(state: StreamState | None, space_id: str, what: str, ident: object) -> StreamState:
    # Something in another space is reported as missing, not as forbidden: no leaks.
    if state is None or state.space_id != space_id:
        raise NotFound(what, str(ident))
    return state


def _absent(state: StreamState | None, what: str, ident: object) -> None:
    if state is not None:
        raise Conflict(f"{what} {str(ident)!r} already exists", state.version)


def _in_status(state: StreamState, allowed: tuple[Status, ...], what: str, ident: object) -> None:
    if state.status not in allowed:
        raise Conflict(f"{what} {str(ident)!r} is {state.status}", state.version)


def _live_item(lookup: Lookup, cur: StreamState | None, space_id: str, item: UUID,
               allowed: tuple[Status, ...] = ("active",)) -> StreamState:
    _active_space(lookup, space_id)
    state = _existing(cur, space_id, "memory item", item)
    _in_status(state, allowed, "memory item", item)
    return state


def _enrichable_item(lookup: Lookup, space_id: str, item: UUID, item_version: int) -> None:
    # Any status: an enrichment describes one version's content, which stays what it was even
    # if the item was retracted or superseded while the enricher worked.
    _active_space(lookup, space_id)
    state = _existing(lookup(StreamRef("item", str(item))), space_id, "memory item", item)
    if item_version > state.version:
        raise Invalid("item_version", f"{item_version} is beyond the item's current version "
                      f"{state.version}")


# --- handlers -------------------------------------------------------------------------------
# Each handler: (command, context, lookup, current state of the target) -> Decision.


@register(c.CreateSpace, t.space_stream)
def _create_space(cmd: c.CreateSpace, ctx: Context, lookup: Lookup, cur: StreamState | None
                  ) -> Decision:
    _absent(cur, "space", cmd.space_id)
    payload = e.SpaceCreated(name=cmd.name, description=cmd.description)
    return Decision(target_of(cmd, ctx), cmd.space_id, (payload,), {"space_id": cmd.space_id})


_POLICY_FIELDS = frozenset(e.SpacePolicySet.model_fields) - {"policy_version"}
_KEPT_FIELDS = _POLICY_FIELDS - {"retroactive"}
"""What a policy update keeps of the previous version unless it names it (``retroactive`` says
which items this version governs: it describes the update, not the policy)."""


@register(c.SetSpacePolicy, t.space_stream)
def _set_policy(cmd: c.SetSpacePolicy, ctx: Context, lookup: Lookup, cur: StreamState | None
                ) -> Decision:
    # The event records the whole policy, as decided from the stream's state: readers (the
    # lifecycle fold, erasure's legal holds) and a replay see every version complete.
    space = _active_space(lookup, cmd.space_id)
    kept = {k: v for k, v in space.policy_fields().items() if k in _KEPT_FIELDS}
    named = cmd.model_dump(include=set(_POLICY_FIELDS & cmd.model_fields_set))
    payload = e.SpacePolicySet.model_validate(
        {**kept, **named, "policy_version": space.policy_version + 1})
    ids = {"space_id": cmd.space_id, "policy_version": str(payload.policy_version)}
    return Decision(target_of(cmd, ctx), cmd.space_id, (payload,), ids)


@register(c.ArchiveSpace, t.space_stream)
def _archive_space(cmd: c.ArchiveSpace, ctx: Context, lookup: Lookup, cur: StreamState | None
                   ) -> Decision:
    _active_space(lookup, cmd.space_id)
    payload = e.SpaceArchived(reason=cmd.reason)
    return Decision(target_of(cmd, ctx), cmd.space_id, (payload,), {"space_id": cmd.space_id})


@register(c.RegisterAgent, t.agent_stream)
def _register_agent(cmd: c.RegisterAgent, ctx: Context, lookup: Lookup, cur: StreamState | None
                    ) -> Decision:
    _absent(cur, "agent", cmd.agent_id)
    payload = e.AgentRegistered(agent_id=cmd.agent_id, name=cmd.name,
                                description=cmd.description)
    return Decision(target_of(cmd, ctx), TENANT_SCOPE, (payload,), {"agent_id": cmd.agent_id})


@register(c.StartSession, t.new_session_stream)
def _start_session(cmd: c.StartSession, ctx: Context, lookup: Lookup, cur: StreamState | None
                   ) -> Decision:
    _active_space(lookup, cmd.space_id)
    session_id = new_or(cmd.session_id, ctx)
    _absent(cur, "session", session_id)
    payload = e.SessionStarted(session_id=session_id, title=cmd.title)
    return Decision(target_of(cmd, ctx), cmd.space_id, (payload,),
                    {"session_id": str(session_id)}, session_id=session_id)


@register(c.EndSession, t.session_stream)
def _end_session(cmd: c.EndSession, ctx: Context, lookup: Lookup, cur: StreamState | None
                 ) -> Decision:
    state = _existing(cur, cmd.space_id, "session", cmd.session_id)
    _in_status(state, ("active",), "session", cmd.session_id)
    payload = e.SessionEnded(session_id=cmd.session_id, reason=cmd.reason)
    return Decision(target_of(cmd, ctx), cmd.space_id, (payload,),
                    {"session_id": str(cmd.session_id)}, session_id=cmd.session_id)


@register(c.AppendMessage, t.session_stream)
def _append_message(cmd: c.AppendMessage, ctx: Context, lookup: Lookup, cur: StreamState | None
                    ) -> Decision:
    _active_space(lookup, cmd.space_id)
    state = _existing(cur, cmd.space_id, "session", cmd.session_id)
    _in_status(state, ("active",), "session", cmd.session_id)
    _not_ahead(cmd.said_at, ctx, "said_at")
    message_id = new_or(cmd.message_id, ctx)
    payload = e.ConversationMessageAppended(
        session_id=cmd.session_id, message_id=message_id, role=cmd.role, content=cmd.content,
        participant=cmd.participant)
    # When it was said is the message's valid time (the envelope's, as an item's).
    return Decision(target_of(cmd, ctx), cmd.space_id, (payload,),
                    {"message_id": str(message_id)}, session_id=cmd.session_id,
                    valid_from=cmd.said_at)


def _not_ahead(instant: datetime | None, ctx: Context, field: str) -> None:
    """A time something happened may not lie beyond now plus the clock skew allowance."""
    if instant is not None and ctx.now is not None and instant > ctx.now + ctx.skew:
        raise Invalid(field, f"{instant.isoformat()} is in the future (more than "
                      f"{ctx.skew.total_seconds():g} s after the server's clock, "
                      f"{ctx.now.isoformat()})")


@register(c.AssertMemory, t.new_item_stream, t.assert_reads)
def _assert_memory(cmd: c.AssertMemory, ctx: Context, lookup: Lookup, cur: StreamState | None
                   ) -> Decision:
    space = _active_space(lookup, cmd.space_id)
    item_id = new_or(cmd.item_id, ctx)
    _absent(cur, "memory item", item_id)
    if cmd.session_id is not None:
        session = lookup(StreamRef("session", str(cmd.session_id)))
        _existing(session, cmd.space_id, "session", cmd.session_id)
    layer = cmd.layer or ("session" if cmd.session_id is not None else "project")
    payload = e.MemoryAsserted(
        item_id=item_id, kind=cmd.kind, content=cmd.content, triple=cmd.triple,
        confidence=cmd.confidence, importance=cmd.importance, tags=cmd.tags,
        sources=cmd.sources, layer=layer, derivation=cmd.__dict__.get("derivation"))
    ids = {"item_id": str(item_id)}
    also = _revise_beliefs(cmd, ctx, lookup, space, item_id, layer, ids)
    return Decision(target_of(cmd, ctx), cmd.space_id, (payload,), ids,
                    session_id=cmd.session_id, valid_from=cmd.valid_from, valid_to=cmd.valid_to,
                    also=also)


def _revise_beliefs(cmd: c.AssertMemory, ctx: Context, lookup: Lookup, space: StreamState,
                    item_id: UUID, layer: str, ids: dict[str, str]) -> tuple[Decision, ...]:
    """Belief revision for a single-valued predicate: the new item claims the (subject,
    predicate) slot of the space, and the item that held it is superseded from the new one's
    valid_from on: "contradiction" for another object, "restated" for the same one. A
    session's memory claims nothing: it is not the project's belief until promoted."""
    triple = cmd.triple
    if triple is None or layer == "session" or space.cardinality_of(
            triple.predicate) != "single":
        return ()
    ref = slot_ref(cmd.space_id, triple.subject, triple.predicate)
    digest = object_digest(triple.object)
    claim = Decision(ref, cmd.space_id, (e.TripleClaimed(item_id=item_id, object_digest=digest),))
    slot = lookup(ref)
    if slot is None or slot.holder is None:
        return (claim,)
    holder, held = slot.holder.split("/", 1)
    state = lookup(StreamRef("item", holder))
    if state is None or state.status != "active" or holder == str(item_id):
        return (claim,)
    reason = "restated" if held == digest else "contradiction"
    ids["superseded"] = holder
    closed = e.MemorySuperseded(item_id=UUID(holder), superseded_by=item_id, reason=reason,
                                valid_until=cmd.valid_from)
    return (claim, Decision(StreamRef("item", holder), cmd.space_id, (closed,)))


def object_digest(value: str) -> str:
    """A short hash of a triple's object, so a slot can tell a restatement without keeping
    the object (personal data) in the clear."""
    return hashlib.sha256(" ".join(value.casefold().split()).encode()).hexdigest()[:16]


@register(c.ReviseMemory, t.item_stream)
def _revise_memory(cmd: c.ReviseMemory, ctx: Context, lookup: Lookup, cur: StreamState | None
                   ) -> Decision:
    _live_item(lookup, cur, cmd.space_id, cmd.item_id,
               ("active", "superseded", "retracted"))
    payload = e.MemoryRevised(
        item_id=cmd.item_id, content=cmd.content, triple=cmd.triple, confidence=cmd.confidence,
        importance=cmd.importance, tags=cmd.tags, reason=cmd.reason)
    return Decision(target_of(cmd, ctx), cmd.space_id, (payload,),
                    {"item_id": str(cmd.item_id)}, valid_from=cmd.valid_from,
                    valid_to=cmd.valid_to)


@register(c.SupersedeMemory, t.item_stream, t.superseding_reads)
def _supersede_memory(cmd: c.SupersedeMemory, ctx: Context, lookup: Lookup,
                      cur: StreamState | None) -> Decision:
    _live_item(lookup, cur, cmd.space_id, cmd.item_id)
    if cmd.superseded_by == cmd.item_id:
        raise Invalid("superseded_by", "an item cannot supersede itself")
    successor = lookup(StreamRef("item", str(cmd.superseded_by)))
    _existing(successor, cmd.space_id, "memory item", cmd.superseded_by)
    payload = e.MemorySuperseded(item_id=cmd.item_id, superseded_by=cmd.superseded_by,
                                 reason=cmd.reason)
    return Decision(target_of(cmd, ctx), cmd.space_id, (payload,), {"item_id": str(cmd.item_id)})


@register(c.RetractMemory, t.item_stream)
def _retract_memory(cmd: c.RetractMemory, ctx: Context, lookup: Lookup, cur: StreamState | None
                    ) -> Decision:
    _live_item(lookup, cur, cmd.space_id, cmd.item_id)
    payload = e.MemoryRetracted(item_id=cmd.item_id, valid_until=cmd.valid_until,
                                reason=cmd.reason)
    return Decision(target_of(cmd, ctx), cmd.space_id, (payload,), {"item_id": str(cmd.item_id)})


@register(c.ReaffirmMemory, t.item_stream)
def _reaffirm_memory(cmd: c.ReaffirmMemory, ctx: Context, lookup: Lookup,
                     cur: StreamState | None) -> Decision:
    _live_item(lookup, cur, cmd.space_id, cmd.item_id)
    payload = e.MemoryReaffirmed(item_id=cmd.item_id, confidence=cmd.confidence,
                                 reason=cmd.reason)
    return Decision(target_of(cmd, ctx), cmd.space_id, (payload,), {"item_id": str(cmd.item_id)})


@register(c.ArchiveMemory, t.item_stream)
def _archive_memory(cmd: c.ArchiveMemory, ctx: Context, lookup: Lookup, cur: StreamState | None
                    ) -> Decision:
    _live_item(lookup, cur, cmd.space_id, cmd.item_id, ("active", "superseded", "retracted"))
    payload = e.MemoryArchived(item_id=cmd.item_id, reason=cmd.reason,
                               policy_version=cmd.policy_version)
    return Decision(target_of(cmd, ctx), cmd.space_id, (payload,), {"item_id": str(cmd.item_id)})


@register(c.PromoteMemory, t.item_stream)
def _promote_memory(cmd: c.PromoteMemory, ctx: Context, lookup: Lookup, cur: StreamState | None
                    ) -> Decision:
    _live_item(lookup, cur, cmd.space_id, cmd.item_id)
    payload = e.MemoryPromoted(item_id=cmd.item_id, layer=cmd.layer, reason=cmd.reason)
    return Decision(target_of(cmd, ctx), cmd.space_id, (payload,), {"item_id": str(cmd.item_id)})


@register(c.MergeMemories, t.item_stream, t.merged_reads)
def _merge_memories(cmd: c.MergeMemories, ctx: Context, lookup: Lookup, cur: StreamState | None
                    ) -> Decision:
    _live_item(lookup, cur, cmd.space_id, cmd.item_id)
    for merged in cmd.merged_item_ids:
        _live_item(lookup, lookup(StreamRef("item", str(merged))), cmd.space_id, merged)
    payload = e.MemoryMerged(
        item_id=cmd.item_id, merged_item_ids=cmd.merged_item_ids, similarity=cmd.similarity,
        sources=tuple(e.SourceRef(type="item", ref=str(m)) for m in cmd.merged_item_ids),
        reason=cmd.reason)
    also = tuple(Decision(StreamRef("item", str(m)), cmd.space_id, (e.MemorySuperseded(
        item_id=m, superseded_by=cmd.item_id, reason=f"merged: {cmd.reason}"),))
        for m in cmd.merged_item_ids)
    return Decision(target_of(cmd, ctx), cmd.space_id, (payload,),
                    {"item_id": str(cmd.item_id)}, also=also)


@register(c.SuggestMerge, t.enrichment_stream, t.suggestion_reads)
def _suggest_merge(cmd: c.SuggestMerge, ctx: Context, lookup: Lookup, cur: StreamState | None
                   ) -> Decision:
    _active_space(lookup, cmd.space_id)
    if cmd.similar_to == cmd.item_id:
        raise Invalid("similar_to", "an item is not a duplicate of itself")
    for item in (cmd.item_id, cmd.similar_to):
        _existing(lookup(StreamRef("item", str(item))), cmd.space_id, "memory item", item)
    payload = e.MergeSuggested(item_id=cmd.item_id, similar_to=cmd.similar_to,
                               similarity=cmd.similarity, policy_version=cmd.policy_version)
    return Decision(target_of(cmd, ctx), cmd.space_id, (payload,), {"item_id": str(cmd.item_id)})


@register(c.UpsertEntity, t.entity_stream)
def _upsert_entity(cmd: c.UpsertEntity, ctx: Context, lookup: Lookup, cur: StreamState | None
                   ) -> Decision:
    _active_space(lookup, cmd.space_id)
    if cur is not None:
        _existing(cur, cmd.space_id, "entity", cmd.entity_id)
    payload = e.EntityUpserted(entity_id=cmd.entity_id, name=cmd.name, type=cmd.type,
                               aliases=cmd.aliases)
    return Decision(target_of(cmd, ctx), cmd.space_id, (payload,), {"entity_id": cmd.entity_id})


@register(c.AssertRelation, t.new_relation_stream, t.relation_reads)
def _assert_relation(cmd: c.AssertRelation, ctx: Context, lookup: Lookup,
                     cur: StreamState | None) -> Decision:
    _active_space(lookup, cmd.space_id)
    relation_id = new_or(cmd.relation_id, ctx)
    _absent(cur, "relation", relation_id)
    for end in (cmd.source_entity, cmd.target_entity):
        _existing(lookup(entity_ref(cmd.space_id, end)), cmd.space_id, "entity", end)
    payload = e.RelationAsserted(
        relation_id=relation_id, source_entity=cmd.source_entity,
        relation_type=cmd.relation_type, target_entity=cmd.target_entity,
        confidence=cmd.confidence)
    return Decision(target_of(cmd, ctx), cmd.space_id, (payload,),
                    {"relation_id": str(relation_id)}, valid_from=cmd.valid_from,
                    valid_to=cmd.valid_to)


@register(c.RetractRelation, t.relation_stream)
def _retract_relation(cmd: c.RetractRelation, ctx: Context, lookup: Lookup,
                      cur: StreamState | None) -> Decision:
    _active_space(lookup, cmd.space_id)
    state = _existing(cur, cmd.space_id, "relation", cmd.relation_id)
    _in_status(state, ("active",), "relation", cmd.relation_id)
    payload = e.RelationRetracted(relation_id=cmd.relation_id, reason=cmd.reason)
    return Decision(target_of(cmd, ctx), cmd.space_id, (payload,),
                    {"relation_id": str(cmd.relation_id)})


@register(c.RecordFeedback, t.new_feedback_stream, t.item_reads)
def _record_feedback(cmd: c.RecordFeedback, ctx: Context, lookup: Lookup,
                     cur: StreamState | None) -> Decision:
    _active_space(lookup, cmd.space_id)
    feedback_id = new_or(cmd.feedback_id, ctx)
    _absent(cur, "feedback", feedback_id)
    _existing(lookup(StreamRef("item", str(cmd.item_id))), cmd.space_id, "memory item",
              cmd.item_id)
    payload = e.FeedbackRecorded(
        feedback_id=feedback_id, item_id=cmd.item_id, signal=cmd.signal, rating=cmd.rating,
        retrieval_id=cmd.retrieval_id, comment=cmd.comment)
    return Decision(target_of(cmd, ctx), cmd.space_id, (payload,),
                    {"feedback_id": str(feedback_id)})


@register(c.RecordEmbedding, t.enrichment_stream, t.item_reads)
def _record_embedding(cmd: c.RecordEmbedding, ctx: Context, lookup: Lookup,
                      cur: StreamState | None) -> Decision:
    _enrichable_item(lookup, cmd.space_id, cmd.item_id, cmd.item_version)
    payload = e.MemoryEmbedded(item_id=cmd.item_id, item_version=cmd.item_version,
                               model=cmd.model, dims=cmd.dims, vector=cmd.vector)
    return Decision(target_of(cmd, ctx), cmd.space_id, (payload,), {"item_id": str(cmd.item_id)})


@register(c.ImportMemory, t.import_stream, t.import_reads)
def _import_memory(cmd: c.ImportMemory, ctx: Context, lookup: Lookup, cur: StreamState | None
                   ) -> Decision:
    """An assertion, then its embedding on the item's enrichment stream (as the enricher's
    would be): the embedding is this decision's own event, so the command's position is the
    one a search waits for."""
    _of_the_index(cmd, ctx)
    item_id = new_or(cmd.item_id, ctx)
    item = StreamRef("item", str(item_id))
    asserted = _assert_memory(cmd, ctx, lookup, lookup(item))
    payload = e.MemoryEmbedded(item_id=item_id, item_version=1, model=cmd.model,
                               dims=cmd.dims, vector=cmd.vector)
    return Decision(target_of(cmd, ctx), cmd.space_id, (payload,), asserted.ids,
                    also=(*asserted.also, replace(asserted, target=item, also=())))


@register(c.ImportRevision, t.revision_import_stream, t.revision_import_reads)
def _import_revision(cmd: c.ImportRevision, ctx: Context, lookup: Lookup,
                     cur: StreamState | None) -> Decision:
    """A revision, then the embedding of the version it makes on the item's enrichment stream
    (as the enricher's would be), in one decision: the command's position is the
    embedding's, the one a search waits for."""
    _of_the_index(cmd, ctx)
    item = StreamRef("item", str(cmd.item_id))
    state = lookup(item)
    revised = _revise_memory(cmd, ctx, lookup, state)
    version = (state.version if state is not None else 0) + len(revised.events)
    payload = e.MemoryEmbedded(item_id=cmd.item_id, item_version=version, model=cmd.model,
                               dims=cmd.dims, vector=cmd.vector)
    return Decision(target_of(cmd, ctx), cmd.space_id, (payload,), revised.ids,
                    also=(replace(revised, target=item, also=()),))


def _of_the_index(cmd: c.ImportMemory | c.ImportRevision, ctx: Context) -> None:
    index = ctx.index
    if index is None:
        return
    if cmd.model != index.model_id:
        raise Invalid("model", f"{cmd.model!r} is not the model of this server's vector index "
                      f"({index.model_id!r}): embed with it, or let the enricher embed")
    if cmd.dims != index.dims:
        raise Invalid("dims", f"{cmd.dims} is not the dimensions of this server's vector index "
                      f"({index.dims}, model {index.model_id!r})")


@register(c.RecordMessageEmbedding, t.message_enrichment_stream, t.message_reads)
def _record_message_embedding(cmd: c.RecordMessageEmbedding, ctx: Context, lookup: Lookup,
                              cur: StreamState | None) -> Decision:
    # The message itself has no stream to check (it is an event of its session's): its
    # session must be in the space, in any status (a message of an ended session is still
    # embedded).
    _active_space(lookup, cmd.space_id)
    _existing(lookup(StreamRef("session", str(cmd.session_id))), cmd.space_id, "session",
              cmd.session_id)
    payload = e.ConversationMessageEmbedded(
        session_id=cmd.session_id, message_id=cmd.message_id, model=cmd.model, dims=cmd.dims,
        vector=cmd.vector)
    return Decision(target_of(cmd, ctx), cmd.space_id, (payload,),
                    {"message_id": str(cmd.message_id)}, session_id=cmd.session_id)


@register(c.RecordEntities, t.enrichment_stream, t.item_reads)
def _record_entities(cmd: c.RecordEntities, ctx: Context, lookup: Lookup,
                     cur: StreamState | None) -> Decision:
    _enrichable_item(lookup, cmd.space_id, cmd.item_id, cmd.item_version)
    payload = e.MemoryEntitiesExtracted(item_id=cmd.item_id, item_version=cmd.item_version,
                                        extractor=cmd.extractor, entities=cmd.entities)
    return Decision(target_of(cmd, ctx), cmd.space_id, (payload,), {"item_id": str(cmd.item_id)})


@register(c.RecordPreference, t.preference_stream)
def _record_preference(cmd: c.RecordPreference, ctx: Context, lookup: Lookup,
                       cur: StreamState | None) -> Decision:
    _active_space(lookup, cmd.space_id)
    # The source may be a message, which has no stream to check; but the preference stream of
    # a source in another space must not take events of this one.
    if cur is not None:
        _existing(cur, cmd.space_id, "preference source", cmd.source_item_id)
    payload = e.PreferenceExtracted(
        source_item_id=cmd.source_item_id, rule_id=cmd.rule_id, category=cmd.category,
        value=cmd.value, confidence=cmd.confidence)
    return Decision(target_of(cmd, ctx), cmd.space_id, (payload,),
                    {"source_item_id": str(cmd.source_item_id)})


@register(c.RecordRetrieval, t.retrieval_stream, t.retrieval_reads)
def _record_retrieval(cmd: c.RecordRetrieval, ctx: Context, lookup: Lookup,
                      cur: StreamState | None) -> Decision:
    # The spaces are not checked: a search of a space that is gone (or never was) is still
    # what was asked and shown. One space read is the event's space, else the tenant's.
    _absent(cur, "retrieval", cmd.retrieval_id)
    payload = e.RetrievalPerformed(
        retrieval_id=cmd.retrieval_id, operation=cmd.operation, query=cmd.query,
        subject=cmd.subject, spaces=cmd.spaces, parameters=cmd.parameters, basis=cmd.basis,
        results=cmd.results, policy_version=cmd.policy_version)
    space = cmd.spaces[0] if len(cmd.spaces) == 1 else TENANT_SCOPE
    return Decision(target_of(cmd, ctx), space, (payload,),
                    {"retrieval_id": str(cmd.retrieval_id)}, session_id=cmd.session_id)


@register(c.RecordTheme, t.theme_stream, t.theme_reads)
def _record_theme(cmd: c.RecordTheme, ctx: Context, lookup: Lookup, cur: StreamState | None
                  ) -> Decision:
    _active_space(lookup, cmd.space_id)
    if cur is not None:
        _existing(cur, cmd.space_id, "theme", cmd.theme_id)
    for member in cmd.members:
        _existing(lookup(StreamRef("item", str(member))), cmd.space_id, "memory item", member)
    fields = {"theme_id": cmd.theme_id, "label": cmd.label, "members": cmd.members,
              "size": cmd.size, "threshold": cmd.threshold,
              "policy_version": cmd.policy_version}
    payload = e.ThemeFormed(**fields) if cur is None else e.ThemeUpdated(**fields)
    return Decision(target_of(cmd, ctx), cmd.space_id, (payload,),
                    {"theme_id": str(cmd.theme_id)})


@register(c.LearnImportance, t.importance_stream, t.item_reads)
def _learn_importance(cmd: c.LearnImportance, ctx: Context, lookup: Lookup,
                      cur: StreamState | None) -> Decision:
    _live_item(lookup, lookup(StreamRef("item", str(cmd.item_id))), cmd.space_id, cmd.item_id)
    payload = e.MemoryImportanceLearned(item_id=cmd.item_id, importance=cmd.importance,
                                        prior=cmd.prior, signals=cmd.signals,
                                        reason=cmd.reason)
    return Decision(target_of(cmd, ctx), cmd.space_id, (payload,), {"item_id": str(cmd.item_id)})


@register(c.EraseSubject, t.subject_stream)
def _erase_subject(cmd: c.EraseSubject, ctx: Context, lookup: Lookup, cur: StreamState | None
                   ) -> Decision:
    # Tenant-wide, and repeatable: erasing again (new data written since) is another event.
    payload = e.SubjectErased(subject_id=cmd.subject_id, key_id=",".join(cmd.key_ids) or "-",
                              reason=cmd.reason)
    return Decision(target_of(cmd, ctx), TENANT_SCOPE, (payload,),
                    {"subject_id": cmd.subject_id})


def handle(cmd: c.CommandBase, ctx: Context, lookup: Lookup, cur: StreamState | None
           ) -> Decision:
    """``cmd`` decided by its registered handler."""
    return route_of(cmd).decide(cmd, ctx, lookup, cur)
