"""The pure write-side domain: a command plus stream states in, events (or a refusal) out."""

import contextlib
from dataclasses import replace
from datetime import datetime, timedelta
from uuid import UUID

import pytest

from memledger_ingest.domain.decide import Context, Lookup, decide, reads_of, target_of
from memledger_ingest.domain.errors import Conflict, DomainError, Invalid, NotFound
from memledger_ingest.domain.streams import Status, StreamRef, StreamState, evolve
from memledger_schemas import commands as c
from memledger_schemas import events as e
from memledger_schemas.envelope import TENANT_SCOPE

TENANT = "acme"
SPACE, OTHER_SPACE, ARCHIVED_SPACE, MISSING_SPACE = "notes", "elsewhere", "attic", "nowhere"
FRESH = UUID("0190a000-0000-7000-8000-000000000001")
CTX = Context(TENANT, FRESH, "tester")

ITEM, SUCCESSOR, OTHER_ITEM, MISSING_ITEM = (UUID(int=0x100 + n) for n in range(4))
RETRACTED_ITEM, SUPERSEDED_ITEM, ARCHIVED_ITEM = (UUID(int=0x110 + n) for n in range(3))
SESSION, ENDED_SESSION, OTHER_SESSION, MISSING_SESSION = (UUID(int=0x200 + n) for n in range(4))
RELATION, RETRACTED_RELATION, OTHER_RELATION, MISSING_RELATION = (
    UUID(int=0x300 + n) for n in range(4))
FEEDBACK = UUID(int=0x400)
MESSAGE, OTHER_MESSAGE = UUID(int=0x500), UUID(int=0x501)

SPACE_VERSION, ARCHIVED_SPACE_VERSION, ITEM_VERSION = 4, 3, 2


def _state(space: str, status: Status = "active", version: int = 1,
           policy_version: int = 0) -> StreamState:
    return StreamState(version, space, status, policy_version)


def _space(space_id: str) -> StreamRef:
    return StreamRef("space", space_id)


def _item(item_id: UUID) -> StreamRef:
    return StreamRef("item", str(item_id))


def _session(session_id: UUID) -> StreamRef:
    return StreamRef("session", str(session_id))


def _relation(relation_id: UUID) -> StreamRef:
    return StreamRef("relation", str(relation_id))


def _entity(space_id: str, entity_id: str) -> StreamRef:
    return StreamRef("entity", f"{space_id}/{entity_id}")


def _enrichment(item_id: UUID) -> StreamRef:
    return StreamRef("enrichment", str(item_id))


def _preference(source_id: UUID) -> StreamRef:
    return StreamRef("preference", str(source_id))


def _embedding(item_id: UUID = ITEM, space_id: str = SPACE,
               item_version: int = ITEM_VERSION) -> c.RecordEmbedding:
    return c.RecordEmbedding(space_id=space_id, item_id=item_id, item_version=item_version,
                             model="mini", dims=2, vector=(0.6, 0.8))


def _message_embedding(session_id: UUID = SESSION, space_id: str = SPACE
                       ) -> c.RecordMessageEmbedding:
    return c.RecordMessageEmbedding(space_id=space_id, session_id=session_id,
                                    message_id=MESSAGE, model="mini", dims=2,
                                    vector=(0.6, 0.8))


PERSON = e.ExtractedEntity(name="Alice", type="person")
THEME, OLD_THEME = UUID(int=0x600), UUID(int=0x601)
MESSAGE_SOURCE = e.SourceRef(type="message", ref=str(UUID(int=0x500)))
DERIVATION = e.Derivation(extractor="rules", prompt_version="rules/v1")


def _entities(item_id: UUID = ITEM, space_id: str = SPACE,
              item_version: int = ITEM_VERSION) -> c.RecordEntities:
    return c.RecordEntities(space_id=space_id, item_id=item_id, item_version=item_version,
                            extractor="rules", entities=(PERSON,))


def _preference_of(source_id: UUID = MESSAGE, space_id: str = SPACE) -> c.RecordPreference:
    return c.RecordPreference(space_id=space_id, source_item_id=source_id, rule_id="likes",
                              category="food", value="tea", confidence=0.7)


RETRIEVAL = UUID(int=0x600)
RETRIEVED = {"retrieval_id": RETRIEVAL, "operation": "search", "query": "tea?",
             "parameters": {"mode": "planning"}, "policy_version": "rank-0",
             "basis": {"position": 7, "recorded_at": None,
                       "valid_at": "2026-01-01T00:00:00+00:00"},
             "results": [{"ref": str(ITEM), "score": 0.5, "section": "filtered"}]}


def _retrieval_of(*spaces: str) -> c.RecordRetrieval:
    return c.RecordRetrieval.model_validate({**RETRIEVED, "spaces": spaces})


WORLD: dict[StreamRef, StreamState] = {
    _space(SPACE): _state(SPACE, version=SPACE_VERSION, policy_version=2),
    _space(OTHER_SPACE): _state(OTHER_SPACE),
    _space(ARCHIVED_SPACE): _state(ARCHIVED_SPACE, "archived", ARCHIVED_SPACE_VERSION),
    StreamRef("agent", "scribe"): _state(TENANT_SCOPE),
    _item(ITEM): _state(SPACE, version=ITEM_VERSION),
    _item(SUCCESSOR): _state(SPACE),
    _item(OTHER_ITEM): _state(OTHER_SPACE),
    _item(RETRACTED_ITEM): _state(SPACE, "retracted", 5),
    _item(SUPERSEDED_ITEM): _state(SPACE, "superseded", 6),
    _item(ARCHIVED_ITEM): _state(SPACE, "archived", 7),
    _session(SESSION): _state(SPACE),
    _session(ENDED_SESSION): _state(SPACE, "ended", 8),
    _session(OTHER_SESSION): _state(OTHER_SPACE),
    _entity(SPACE, "alice"): _state(SPACE),
    _entity(SPACE, "bob"): _state(SPACE),
    _entity(OTHER_SPACE, "carol"): _state(OTHER_SPACE),
    _relation(RELATION): _state(SPACE),
    _relation(RETRACTED_RELATION): _state(SPACE, "retracted", 9),
    _relation(OTHER_RELATION): _state(OTHER_SPACE),
    StreamRef("feedback", str(FEEDBACK)): _state(SPACE, version=10),
    _preference(OTHER_MESSAGE): _state(OTHER_SPACE),
    StreamRef("theme", str(OLD_THEME)): _state(SPACE),
}


def lookup_in(world: dict[StreamRef, StreamState]) -> Lookup:
    def lookup(ref: StreamRef) -> StreamState | None:
        return world.get(ref)

    return lookup


def _ok(cmd: c.CommandBase, target: StreamRef, event: e.Payload, ids: dict[str, str],
        name: str) -> pytest.ParameterSet:
    return pytest.param(cmd, target, event, ids, id=name)


SUCCESSES = [
    _ok(c.CreateSpace(space_id="fresh", name="Fresh"), _space("fresh"),
        e.SpaceCreated(name="Fresh"), {"space_id": "fresh"}, "create_space"),
    _ok(c.SetSpacePolicy(space_id=SPACE, max_items=10), _space(SPACE),
        e.SpacePolicySet(policy_version=3, max_items=10),
        {"space_id": SPACE, "policy_version": "3"}, "set_space_policy"),
    _ok(c.ArchiveSpace(space_id=SPACE, reason="done"), _space(SPACE),
        e.SpaceArchived(reason="done"), {"space_id": SPACE}, "archive_space"),
    _ok(c.RegisterAgent(agent_id="helper", name="Helper"), StreamRef("agent", "helper"),
        e.AgentRegistered(agent_id="helper", name="Helper"), {"agent_id": "helper"},
        "register_agent"),
    _ok(c.StartSession(space_id=SPACE, title="chat"), _session(FRESH),
        e.SessionStarted(session_id=FRESH, title="chat"), {"session_id": str(FRESH)},
        "start_session"),
    _ok(c.EndSession(space_id=SPACE, session_id=SESSION), _session(SESSION),
        e.SessionEnded(session_id=SESSION), {"session_id": str(SESSION)}, "end_session"),
    _ok(c.AppendMessage(space_id=SPACE, session_id=SESSION, role="user", content="hi"),
        _session(SESSION),
        e.ConversationMessageAppended(session_id=SESSION, message_id=FRESH, role="user",
                                      content="hi"),
        {"message_id": str(FRESH)}, "append_message"),
    _ok(c.AssertMemory(space_id=SPACE, kind="fact", content="sky is blue", tags=("sky",)),
        _item(FRESH),
        e.MemoryAsserted(item_id=FRESH, kind="fact", content="sky is blue", tags=("sky",),
                         layer="project"),
        {"item_id": str(FRESH)}, "assert_memory"),
    _ok(c.ReviseMemory(space_id=SPACE, item_id=ITEM, content="sky is grey"), _item(ITEM),
        e.MemoryRevised(item_id=ITEM, content="sky is grey"), {"item_id": str(ITEM)},
        "revise_memory"),
    _ok(c.SupersedeMemory(space_id=SPACE, item_id=ITEM, superseded_by=SUCCESSOR,
                          reason="newer"), _item(ITEM),
        e.MemorySuperseded(item_id=ITEM, superseded_by=SUCCESSOR, reason="newer"),
        {"item_id": str(ITEM)}, "supersede_memory"),
    _ok(c.RetractMemory(space_id=SPACE, item_id=ITEM, reason="wrong"), _item(ITEM),
        e.MemoryRetracted(item_id=ITEM, reason="wrong"), {"item_id": str(ITEM)},
        "retract_memory"),
    _ok(c.ReaffirmMemory(space_id=SPACE, item_id=ITEM, confidence=0.9), _item(ITEM),
        e.MemoryReaffirmed(item_id=ITEM, confidence=0.9), {"item_id": str(ITEM)},
        "reaffirm_memory"),
    _ok(c.ArchiveMemory(space_id=SPACE, item_id=ITEM, reason="stale"), _item(ITEM),
        e.MemoryArchived(item_id=ITEM, reason="stale"), {"item_id": str(ITEM)},
        "archive_memory"),
    _ok(c.PromoteMemory(space_id=SPACE, item_id=ITEM, reason="useful beyond the session"),
        _item(ITEM), e.MemoryPromoted(item_id=ITEM, layer="project",
                                      reason="useful beyond the session"),
        {"item_id": str(ITEM)}, "promote_memory"),
    _ok(c.MergeMemories(space_id=SPACE, item_id=ITEM, merged_item_ids=(SUCCESSOR,),
                        similarity=0.97), _item(ITEM),
        e.MemoryMerged(item_id=ITEM, merged_item_ids=(SUCCESSOR,), similarity=0.97,
                       sources=(e.SourceRef(type="item", ref=str(SUCCESSOR)),),
                       reason="merged near-duplicates"),
        {"item_id": str(ITEM)}, "merge_memories"),
    _ok(c.SuggestMerge(space_id=SPACE, item_id=ITEM, similar_to=SUCCESSOR, similarity=0.93,
                       policy_version=2), _enrichment(ITEM),
        e.MergeSuggested(item_id=ITEM, similar_to=SUCCESSOR, similarity=0.93,
                         policy_version=2),
        {"item_id": str(ITEM)}, "suggest_merge"),
    _ok(c.UpsertEntity(space_id=SPACE, entity_id="dave", name="Dave", type="person"),
        _entity(SPACE, "dave"), e.EntityUpserted(entity_id="dave", name="Dave", type="person"),
        {"entity_id": "dave"}, "upsert_entity_new"),
    _ok(c.UpsertEntity(space_id=SPACE, entity_id="alice", name="Alice", type="person"),
        _entity(SPACE, "alice"),
        e.EntityUpserted(entity_id="alice", name="Alice", type="person"),
        {"entity_id": "alice"}, "upsert_entity_existing"),
    _ok(c.AssertRelation(space_id=SPACE, source_entity="alice", relation_type="knows",
                         target_entity="bob"), _relation(FRESH),
        e.RelationAsserted(relation_id=FRESH, source_entity="alice", relation_type="knows",
                           target_entity="bob"),
        {"relation_id": str(FRESH)}, "assert_relation"),
    _ok(c.RetractRelation(space_id=SPACE, relation_id=RELATION), _relation(RELATION),
        e.RelationRetracted(relation_id=RELATION), {"relation_id": str(RELATION)},
        "retract_relation"),
    _ok(c.RecordFeedback(space_id=SPACE, item_id=ITEM, signal="rating", rating=4),
        StreamRef("feedback", str(FRESH)),
        e.FeedbackRecorded(feedback_id=FRESH, item_id=ITEM, signal="rating", rating=4),
        {"feedback_id": str(FRESH)}, "record_feedback"),
    _ok(_embedding(), _enrichment(ITEM),
        e.MemoryEmbedded(item_id=ITEM, item_version=ITEM_VERSION, model="mini", dims=2,
                         vector=(0.6, 0.8)),
        {"item_id": str(ITEM)}, "record_embedding"),
    _ok(_message_embedding(), _enrichment(MESSAGE),
        e.ConversationMessageEmbedded(session_id=SESSION, message_id=MESSAGE, model="mini",
                                      dims=2, vector=(0.6, 0.8)),
        {"message_id": str(MESSAGE)}, "record_message_embedding"),
    _ok(_entities(), _enrichment(ITEM),
        e.MemoryEntitiesExtracted(item_id=ITEM, item_version=ITEM_VERSION, extractor="rules",
                                  entities=(PERSON,)),
        {"item_id": str(ITEM)}, "record_entities"),
    _ok(_preference_of(), _preference(MESSAGE),
        e.PreferenceExtracted(source_item_id=MESSAGE, rule_id="likes", category="food",
                              value="tea", confidence=0.7),
        {"source_item_id": str(MESSAGE)}, "record_preference"),
    _ok(_retrieval_of(), StreamRef("retrieval", str(RETRIEVAL)),
        e.RetrievalPerformed.model_validate(RETRIEVED), {"retrieval_id": str(RETRIEVAL)},
        "record_retrieval"),
    _ok(c.DeriveMemory(space_id=SPACE, item_id=MISSING_ITEM, kind="preference",
                       content="Ada prefers tea", sources=(MESSAGE_SOURCE,),
                       derivation=DERIVATION, layer="project"), _item(MISSING_ITEM),
        e.MemoryAsserted(item_id=MISSING_ITEM, kind="preference", content="Ada prefers tea",
                         sources=(MESSAGE_SOURCE,), layer="project", derivation=DERIVATION),
        {"item_id": str(MISSING_ITEM)}, "derive_memory"),
    _ok(c.RecordTheme(space_id=SPACE, theme_id=THEME, label="tea coffee", members=(ITEM,),
                      size=1, threshold=0.7, policy_version=1), StreamRef("theme", str(THEME)),
        e.ThemeFormed(theme_id=THEME, label="tea coffee", members=(ITEM,), size=1,
                      threshold=0.7, policy_version=1), {"theme_id": str(THEME)},
        "record_theme_new"),
    _ok(c.RecordTheme(space_id=SPACE, theme_id=OLD_THEME, label="tea", members=(), size=0,
                      threshold=0.7, policy_version=1), StreamRef("theme", str(OLD_THEME)),
        e.ThemeUpdated(theme_id=OLD_THEME, label="tea", members=(), size=0, threshold=0.7,
                       policy_version=1), {"theme_id": str(OLD_THEME)},
        "record_theme_existing"),
    _ok(c.LearnImportance(space_id=SPACE, item_id=ITEM, importance=0.7, prior=0.5,
                          signals=e.ImportanceSignals(used=2), reason="used 2"),
        StreamRef("importance", str(ITEM)),
        e.MemoryImportanceLearned(item_id=ITEM, importance=0.7, prior=0.5,
                                  signals=e.ImportanceSignals(used=2), reason="used 2"),
        {"item_id": str(ITEM)}, "learn_importance"),
    _ok(c.ImportMemory(space_id=SPACE, kind="fact", content="sky is blue", model="m", dims=2,
                       vector=(0.6, 0.8)), _enrichment(FRESH),
        e.MemoryEmbedded(item_id=FRESH, item_version=1, model="m", dims=2, vector=(0.6, 0.8)),
        {"item_id": str(FRESH)}, "import_memory"),
    _ok(c.ImportRevision(space_id=SPACE, item_id=ITEM, content="sky is grey", model="m",
                         dims=2, vector=(0.6, 0.8)), _enrichment(ITEM),
        e.MemoryEmbedded(item_id=ITEM, item_version=ITEM_VERSION + 1, model="m", dims=2,
                         vector=(0.6, 0.8)), {"item_id": str(ITEM)}, "import_revision"),
]


@pytest.mark.parametrize(("cmd", "target", "event", "ids"), SUCCESSES)
def test_an_accepted_command_yields_its_event_on_its_target_stream_and_reports_its_ids(
        cmd: c.CommandBase, target: StreamRef, event: e.Payload, ids: dict[str, str]) -> None:
    decision = decide(cmd, CTX, lookup_in(WORLD))

    assert decision.target == target == target_of(cmd, CTX)
    assert decision.events == (event,)
    assert type(decision.events[0]) is type(event)
    assert decision.ids == ids
    assert decision.space_id == getattr(cmd, "space_id", TENANT_SCOPE)


def test_every_command_kind_has_a_success_case() -> None:
    covered = {type(case.values[0]) for case in SUCCESSES}
    assert covered == set(c.COMMANDS)


@pytest.mark.parametrize(("spaces", "space"), [((), TENANT_SCOPE), ((SPACE,), SPACE),
                                              ((SPACE, OTHER_SPACE), TENANT_SCOPE)])
def test_a_retrieval_belongs_to_the_one_space_it_read_else_to_the_tenant(
        spaces: tuple[str, ...], space: str) -> None:
    assert decide(_retrieval_of(*spaces), CTX, lookup_in(WORLD)).space_id == space


def test_a_derived_preference_supersedes_the_one_it_contradicts_as_any_assertion_does(
        ) -> None:
    slot = StreamRef("slot", f"{SPACE}/ada/prefers")
    world = {**WORLD, slot: replace(_state(SPACE), holder=f"{ITEM}/{'0' * 16}")}
    cmd = c.DeriveMemory(space_id=SPACE, item_id=MISSING_ITEM, kind="preference",
                         content="Ada prefers coffee", layer="project",
                         triple=e.Triple(subject="Ada", predicate="prefers", object="coffee"),
                         sources=(MESSAGE_SOURCE,), derivation=DERIVATION)

    decision = decide(cmd, CTX, lookup_in(world))

    assert decision.ids["superseded"] == str(ITEM)
    assert decision.events[0] == e.MemoryAsserted(
        item_id=MISSING_ITEM, kind="preference", content="Ada prefers coffee",
        triple=cmd.triple, sources=(MESSAGE_SOURCE,), layer="project", derivation=DERIVATION)


def test_a_retrieval_is_recorded_once() -> None:
    recorded = {**WORLD, StreamRef("retrieval", str(RETRIEVAL)): _state(SPACE)}
    with pytest.raises(Conflict):
        decide(_retrieval_of(SPACE), CTX, lookup_in(recorded))


def test_an_assertion_carries_its_session_and_valid_interval_to_the_decision() -> None:
    start = datetime.fromisoformat("2026-01-01T00:00:00+00:00")
    end = datetime.fromisoformat("2026-02-01T00:00:00+00:00")
    cmd = c.AssertMemory(space_id=SPACE, kind="episode", content="met", session_id=SESSION,
                         valid_from=start, valid_to=end)

    decision = decide(cmd, CTX, lookup_in(WORLD))

    assert (decision.session_id, decision.valid_from, decision.valid_to) == (SESSION, start, end)


@pytest.mark.parametrize("cmd", [
    pytest.param(_embedding(RETRACTED_ITEM, item_version=1), id="embed_retracted"),
    pytest.param(_entities(SUPERSEDED_ITEM, item_version=6), id="entities_of_superseded"),
    pytest.param(_embedding(ARCHIVED_ITEM, item_version=3), id="embed_archived"),
])
def test_enrichment_describes_any_version_of_an_item_whatever_its_status_now(
        cmd: c.CommandBase) -> None:
    assert len(decide(cmd, CTX, lookup_in(WORLD)).events) == 1


def test_recording_an_embedding_leaves_the_item_version_a_client_expects_unchanged() -> None:
    world = dict(WORLD)
    decision = decide(_embedding(), CTX, lookup_in(world))
    for payload in decision.events:  # folded as the writer folds them
        world[decision.target] = evolve(world.get(decision.target), payload.event_type,
                                        decision.space_id)

    revision = c.ReviseMemory(space_id=SPACE, item_id=ITEM, content="x",
                              expected_version=ITEM_VERSION)

    assert world[_item(ITEM)] == WORLD[_item(ITEM)]
    assert world[_enrichment(ITEM)].version == 1
    assert len(decide(revision, CTX, lookup_in(world)).events) == 1


NOW = datetime.fromisoformat("2026-03-01T12:00:00+00:00")
AT_NOW = Context(TENANT, FRESH, "tester", NOW, timedelta(seconds=300))


def _said(at: datetime) -> c.AppendMessage:
    return c.AppendMessage(space_id=SPACE, session_id=SESSION, role="user", content="hi",
                           said_at=at)


def test_a_message_is_valid_from_when_it_was_said_however_long_ago() -> None:
    said = datetime.fromisoformat("2023-05-08T13:56:00+00:00")

    decision = decide(_said(said), AT_NOW, lookup_in(WORLD))

    assert (decision.valid_from, decision.valid_to) == (said, None)


def test_a_message_without_said_at_is_valid_from_when_it_is_recorded() -> None:
    cmd = c.AppendMessage(space_id=SPACE, session_id=SESSION, role="user", content="hi")

    assert decide(cmd, AT_NOW, lookup_in(WORLD)).valid_from is None


def test_a_message_said_within_the_clock_skew_allowance_ahead_is_accepted() -> None:
    assert len(decide(_said(NOW + timedelta(seconds=300)), AT_NOW,
                      lookup_in(WORLD)).events) == 1


def test_a_message_said_beyond_the_clock_skew_allowance_ahead_is_refused_naming_said_at(
        ) -> None:
    with pytest.raises(Invalid) as refusal:
        decide(_said(NOW + timedelta(seconds=301)), AT_NOW, lookup_in(WORLD))

    assert refusal.value.field == "said_at"
    assert "future" in refusal.value.reason


def test_an_embedding_of_a_message_of_an_ended_session_is_recorded() -> None:
    decision = decide(_message_embedding(session_id=ENDED_SESSION), CTX, lookup_in(WORLD))

    assert decision.target == _enrichment(MESSAGE)
    assert decision.session_id == ENDED_SESSION


def test_an_explicit_id_is_used_instead_of_the_fresh_one() -> None:
    chosen = UUID(int=0xABC)
    cmd = c.AssertMemory(space_id=SPACE, kind="fact", content="x", item_id=chosen)

    decision = decide(cmd, CTX, lookup_in(WORLD))

    assert decision.target == _item(chosen)
    assert decision.ids == {"item_id": str(chosen)}


@pytest.mark.parametrize("cmd", [
    pytest.param(c.ReviseMemory(space_id=SPACE, item_id=RETRACTED_ITEM, content="fixed"),
                 id="revise_retracted"),
    pytest.param(c.ReviseMemory(space_id=SPACE, item_id=SUPERSEDED_ITEM, importance=0.1),
                 id="revise_superseded"),
    pytest.param(c.ArchiveMemory(space_id=SPACE, item_id=RETRACTED_ITEM, reason="gc"),
                 id="archive_retracted"),
    pytest.param(c.ArchiveMemory(space_id=SPACE, item_id=SUPERSEDED_ITEM, reason="gc"),
                 id="archive_superseded"),
])
def test_corrections_and_archiving_still_reach_items_that_are_no_longer_active(
        cmd: c.CommandBase) -> None:
    assert len(decide(cmd, CTX, lookup_in(WORLD)).events) == 1


# --- refusals -------------------------------------------------------------------------------


def _nf(cmd: c.CommandBase, what: str, ident: object, name: str) -> pytest.ParameterSet:
    return pytest.param(cmd, what, str(ident), id=name)


NOT_FOUND = [
    # unknown space
    _nf(c.SetSpacePolicy(space_id=MISSING_SPACE), "space", MISSING_SPACE, "policy_unknown_space"),
    _nf(c.ArchiveSpace(space_id=MISSING_SPACE), "space", MISSING_SPACE, "archive_unknown_space"),
    _nf(c.StartSession(space_id=MISSING_SPACE), "space", MISSING_SPACE, "session_unknown_space"),
    _nf(c.AppendMessage(space_id=MISSING_SPACE, session_id=SESSION, role="user", content="x"),
        "space", MISSING_SPACE, "message_unknown_space"),
    _nf(c.AssertMemory(space_id=MISSING_SPACE, kind="fact", content="x"), "space",
        MISSING_SPACE, "assert_unknown_space"),
    _nf(c.ReviseMemory(space_id=MISSING_SPACE, item_id=ITEM, content="x"), "space",
        MISSING_SPACE, "revise_unknown_space"),
    _nf(c.SupersedeMemory(space_id=MISSING_SPACE, item_id=ITEM, superseded_by=SUCCESSOR,
                          reason="r"), "space", MISSING_SPACE, "supersede_unknown_space"),
    _nf(c.RetractMemory(space_id=MISSING_SPACE, item_id=ITEM), "space", MISSING_SPACE,
        "retract_unknown_space"),
    _nf(c.ReaffirmMemory(space_id=MISSING_SPACE, item_id=ITEM), "space", MISSING_SPACE,
        "reaffirm_unknown_space"),
    _nf(c.ArchiveMemory(space_id=MISSING_SPACE, item_id=ITEM, reason="r"), "space",
        MISSING_SPACE, "archive_memory_unknown_space"),
    _nf(c.UpsertEntity(space_id=MISSING_SPACE, entity_id="e", name="E", type="t"), "space",
        MISSING_SPACE, "entity_unknown_space"),
    _nf(c.AssertRelation(space_id=MISSING_SPACE, source_entity="alice", relation_type="knows",
                         target_entity="bob"), "space", MISSING_SPACE, "relation_unknown_space"),
    _nf(c.RetractRelation(space_id=MISSING_SPACE, relation_id=RELATION), "space",
        MISSING_SPACE, "retract_relation_unknown_space"),
    _nf(c.RecordFeedback(space_id=MISSING_SPACE, item_id=ITEM, signal="used"), "space",
        MISSING_SPACE, "feedback_unknown_space"),
    _nf(_embedding(space_id=MISSING_SPACE), "space", MISSING_SPACE, "embedding_unknown_space"),
    _nf(_entities(space_id=MISSING_SPACE), "space", MISSING_SPACE, "entities_unknown_space"),
    _nf(_message_embedding(space_id=MISSING_SPACE), "space", MISSING_SPACE,
        "message_embedding_unknown_space"),
    _nf(_message_embedding(session_id=OTHER_SESSION), "session", OTHER_SESSION,
        "message_embedding_other_space_session"),
    _nf(_message_embedding(session_id=MISSING_SESSION), "session", MISSING_SESSION,
        "message_embedding_unknown_session"),
    _nf(_preference_of(space_id=MISSING_SPACE), "space", MISSING_SPACE,
        "preference_unknown_space"),
    # something of another space is reported as missing, not as forbidden
    _nf(c.ReviseMemory(space_id=SPACE, item_id=OTHER_ITEM, content="x"), "memory item",
        OTHER_ITEM, "revise_other_space_item"),
    _nf(c.SupersedeMemory(space_id=SPACE, item_id=OTHER_ITEM, superseded_by=ITEM, reason="r"),
        "memory item", OTHER_ITEM, "supersede_other_space_item"),
    _nf(c.SupersedeMemory(space_id=SPACE, item_id=ITEM, superseded_by=OTHER_ITEM, reason="r"),
        "memory item", OTHER_ITEM, "supersede_by_other_space_item"),
    _nf(c.RetractMemory(space_id=SPACE, item_id=OTHER_ITEM), "memory item", OTHER_ITEM,
        "retract_other_space_item"),
    _nf(c.ReaffirmMemory(space_id=SPACE, item_id=OTHER_ITEM), "memory item", OTHER_ITEM,
        "reaffirm_other_space_item"),
    _nf(c.ArchiveMemory(space_id=SPACE, item_id=OTHER_ITEM, reason="r"), "memory item",
        OTHER_ITEM, "archive_other_space_item"),
    _nf(c.EndSession(space_id=SPACE, session_id=OTHER_SESSION), "session", OTHER_SESSION,
        "end_other_space_session"),
    _nf(c.AppendMessage(space_id=SPACE, session_id=OTHER_SESSION, role="user", content="x"),
        "session", OTHER_SESSION, "message_other_space_session"),
    _nf(c.AssertMemory(space_id=SPACE, kind="fact", content="x", session_id=OTHER_SESSION),
        "session", OTHER_SESSION, "assert_in_other_space_session"),
    _nf(c.AssertRelation(space_id=SPACE, source_entity="alice", relation_type="knows",
                         target_entity="carol"), "entity", "carol", "relation_to_other_entity"),
    _nf(c.RetractRelation(space_id=SPACE, relation_id=OTHER_RELATION), "relation",
        OTHER_RELATION, "retract_other_space_relation"),
    _nf(c.RecordFeedback(space_id=SPACE, item_id=OTHER_ITEM, signal="used"), "memory item",
        OTHER_ITEM, "feedback_other_space_item"),
    _nf(_embedding(OTHER_ITEM, item_version=1), "memory item", OTHER_ITEM,
        "embedding_of_other_space_item"),
    _nf(_entities(OTHER_ITEM, item_version=1), "memory item", OTHER_ITEM,
        "entities_of_other_space_item"),
    _nf(_preference_of(OTHER_MESSAGE), "preference source", OTHER_MESSAGE,
        "preference_from_other_space_source"),
    _nf(c.RecordEmbedding(space_id=SPACE, item_id=OTHER_ITEM, item_version=1, model="m",
                          dims=1, vector=(1.0,), expected_version=0), "memory item",
        OTHER_ITEM, "embedding_of_other_space_item_at_a_version"),
    # plainly missing
    _nf(c.ReviseMemory(space_id=SPACE, item_id=MISSING_ITEM, content="x"), "memory item",
        MISSING_ITEM, "revise_missing_item"),
    _nf(c.SupersedeMemory(space_id=SPACE, item_id=ITEM, superseded_by=MISSING_ITEM,
                          reason="r"), "memory item", MISSING_ITEM, "supersede_by_missing"),
    _nf(c.EndSession(space_id=SPACE, session_id=MISSING_SESSION), "session", MISSING_SESSION,
        "end_missing_session"),
    _nf(c.AssertMemory(space_id=SPACE, kind="fact", content="x", session_id=MISSING_SESSION),
        "session", MISSING_SESSION, "assert_in_missing_session"),
    _nf(c.AssertRelation(space_id=SPACE, source_entity="zed", relation_type="knows",
                         target_entity="bob"), "entity", "zed", "relation_missing_source"),
    _nf(c.AssertRelation(space_id=SPACE, source_entity="alice", relation_type="knows",
                         target_entity="zed"), "entity", "zed", "relation_missing_target"),
    _nf(c.RetractRelation(space_id=SPACE, relation_id=MISSING_RELATION), "relation",
        MISSING_RELATION, "retract_missing_relation"),
    _nf(c.RecordFeedback(space_id=SPACE, item_id=MISSING_ITEM, signal="unused"), "memory item",
        MISSING_ITEM, "feedback_on_missing_item"),
    _nf(_embedding(MISSING_ITEM, item_version=1), "memory item", MISSING_ITEM,
        "embedding_of_missing_item"),
    _nf(_entities(MISSING_ITEM, item_version=1), "memory item", MISSING_ITEM,
        "entities_of_missing_item"),
    _nf(c.RecordTheme(space_id=SPACE, theme_id=THEME, label="t", members=(ITEM, OTHER_ITEM),
                      size=2, threshold=0.7, policy_version=1), "memory item", OTHER_ITEM,
        "theme_member_of_another_space"),
    _nf(c.LearnImportance(space_id=SPACE, item_id=MISSING_ITEM, importance=0.6, prior=0.5,
                          signals=e.ImportanceSignals(), reason="r"), "memory item",
        MISSING_ITEM, "importance_of_missing_item"),
]


@pytest.mark.parametrize(("cmd", "what", "ident"), NOT_FOUND)
def test_a_command_naming_something_that_is_not_there_is_refused_as_not_found(
        cmd: c.CommandBase, what: str, ident: str) -> None:
    with pytest.raises(NotFound) as refusal:
        decide(cmd, CTX, lookup_in(WORLD))

    assert (refusal.value.what, refusal.value.ident) == (what, ident)


def _cf(cmd: c.CommandBase, current_version: int, name: str) -> pytest.ParameterSet:
    return pytest.param(cmd, current_version, id=name)


A = ARCHIVED_SPACE
CONFLICTS = [
    # archived space
    _cf(c.SetSpacePolicy(space_id=A), ARCHIVED_SPACE_VERSION, "policy_archived_space"),
    _cf(c.ArchiveSpace(space_id=A), ARCHIVED_SPACE_VERSION, "archive_archived_space"),
    _cf(c.StartSession(space_id=A), ARCHIVED_SPACE_VERSION, "session_archived_space"),
    _cf(c.AppendMessage(space_id=A, session_id=SESSION, role="user", content="x"),
        ARCHIVED_SPACE_VERSION, "message_archived_space"),
    _cf(c.AssertMemory(space_id=A, kind="fact", content="x"), ARCHIVED_SPACE_VERSION,
        "assert_archived_space"),
    _cf(c.ReviseMemory(space_id=A, item_id=ITEM, content="x"), ARCHIVED_SPACE_VERSION,
        "revise_archived_space"),
    _cf(c.SupersedeMemory(space_id=A, item_id=ITEM, superseded_by=SUCCESSOR, reason="r"),
        ARCHIVED_SPACE_VERSION, "supersede_archived_space"),
    _cf(c.RetractMemory(space_id=A, item_id=ITEM), ARCHIVED_SPACE_VERSION,
        "retract_archived_space"),
    _cf(c.ReaffirmMemory(space_id=A, item_id=ITEM), ARCHIVED_SPACE_VERSION,
        "reaffirm_archived_space"),
    _cf(c.ArchiveMemory(space_id=A, item_id=ITEM, reason="r"), ARCHIVED_SPACE_VERSION,
        "archive_memory_archived_space"),
    _cf(c.UpsertEntity(space_id=A, entity_id="e", name="E", type="t"), ARCHIVED_SPACE_VERSION,
        "entity_archived_space"),
    _cf(c.AssertRelation(space_id=A, source_entity="alice", relation_type="knows",
                         target_entity="bob"), ARCHIVED_SPACE_VERSION, "relation_archived_space"),
    _cf(c.RetractRelation(space_id=A, relation_id=RELATION), ARCHIVED_SPACE_VERSION,
        "retract_relation_archived_space"),
    _cf(c.RecordFeedback(space_id=A, item_id=ITEM, signal="used"), ARCHIVED_SPACE_VERSION,
        "feedback_archived_space"),
    _cf(_embedding(space_id=A), ARCHIVED_SPACE_VERSION, "embedding_archived_space"),
    _cf(_entities(space_id=A), ARCHIVED_SPACE_VERSION, "entities_archived_space"),
    _cf(_preference_of(space_id=A), ARCHIVED_SPACE_VERSION, "preference_archived_space"),
    # creating what exists
    _cf(c.CreateSpace(space_id=SPACE), SPACE_VERSION, "create_existing_space"),
    _cf(c.CreateSpace(space_id=ARCHIVED_SPACE), ARCHIVED_SPACE_VERSION,
        "create_archived_space_again"),
    _cf(c.RegisterAgent(agent_id="scribe"), 1, "register_existing_agent"),
    _cf(c.StartSession(space_id=SPACE, session_id=SESSION), 1, "start_existing_session"),
    _cf(c.AssertMemory(space_id=SPACE, kind="fact", content="x", item_id=ITEM), ITEM_VERSION,
        "assert_existing_item"),
    _cf(c.AssertRelation(space_id=SPACE, relation_id=RELATION, source_entity="alice",
                         relation_type="knows", target_entity="bob"), 1,
        "assert_existing_relation"),
    _cf(c.RecordFeedback(space_id=SPACE, item_id=ITEM, signal="used", feedback_id=FEEDBACK), 10,
        "record_existing_feedback"),
    # wrong status
    _cf(c.ReviseMemory(space_id=SPACE, item_id=ARCHIVED_ITEM, content="x"), 7,
        "revise_archived_item"),
    _cf(c.SupersedeMemory(space_id=SPACE, item_id=RETRACTED_ITEM, superseded_by=SUCCESSOR,
                          reason="r"), 5, "supersede_retracted_item"),
    _cf(c.SupersedeMemory(space_id=SPACE, item_id=SUPERSEDED_ITEM, superseded_by=SUCCESSOR,
                          reason="r"), 6, "supersede_superseded_item"),
    _cf(c.RetractMemory(space_id=SPACE, item_id=RETRACTED_ITEM), 5, "retract_retracted_item"),
    _cf(c.RetractMemory(space_id=SPACE, item_id=SUPERSEDED_ITEM), 6,
        "retract_superseded_item"),
    _cf(c.ReaffirmMemory(space_id=SPACE, item_id=SUPERSEDED_ITEM), 6,
        "reaffirm_superseded_item"),
    _cf(c.ReaffirmMemory(space_id=SPACE, item_id=ARCHIVED_ITEM), 7, "reaffirm_archived_item"),
    _cf(c.ArchiveMemory(space_id=SPACE, item_id=ARCHIVED_ITEM, reason="r"), 7,
        "archive_archived_item"),
    _cf(c.EndSession(space_id=SPACE, session_id=ENDED_SESSION), 8, "end_ended_session"),
    _cf(c.AppendMessage(space_id=SPACE, session_id=ENDED_SESSION, role="user", content="x"), 8,
        "message_to_ended_session"),
    _cf(c.RetractRelation(space_id=SPACE, relation_id=RETRACTED_RELATION), 9,
        "retract_retracted_relation"),
    # optimistic concurrency
    _cf(c.ReviseMemory(space_id=SPACE, item_id=ITEM, content="x", expected_version=1),
        ITEM_VERSION, "expected_version_behind"),
    _cf(c.ReviseMemory(space_id=SPACE, item_id=ITEM, content="x", expected_version=9),
        ITEM_VERSION, "expected_version_ahead"),
    _cf(c.CreateSpace(space_id="fresh", expected_version=1), 0, "expected_version_of_new"),
    _cf(c.SetSpacePolicy(space_id=SPACE, expected_version=0), SPACE_VERSION,
        "expected_version_zero_on_existing"),
    _cf(c.LearnImportance(space_id=SPACE, item_id=RETRACTED_ITEM, importance=0.6, prior=0.5,
                          signals=e.ImportanceSignals(), reason="r"), 5,
        "importance_of_a_retracted_item"),
]


@pytest.mark.parametrize(("cmd", "current_version"), CONFLICTS)
def test_a_command_contradicting_current_state_is_refused_as_a_conflict_with_the_version(
        cmd: c.CommandBase, current_version: int) -> None:
    with pytest.raises(Conflict) as refusal:
        decide(cmd, CTX, lookup_in(WORLD))

    assert refusal.value.current_version == current_version


@pytest.mark.parametrize("cmd", [
    pytest.param(c.ReviseMemory(space_id=SPACE, item_id=ITEM, content="x",
                                expected_version=ITEM_VERSION), id="revise"),
    pytest.param(c.CreateSpace(space_id="fresh", expected_version=0), id="create"),
    pytest.param(c.SetSpacePolicy(space_id=SPACE, expected_version=SPACE_VERSION), id="policy"),
])
def test_a_matching_expected_version_lets_the_command_through(cmd: c.CommandBase) -> None:
    assert len(decide(cmd, CTX, lookup_in(WORLD)).events) == 1


def test_an_item_cannot_supersede_itself() -> None:
    cmd = c.SupersedeMemory(space_id=SPACE, item_id=ITEM, superseded_by=ITEM, reason="loop")

    with pytest.raises(Invalid) as refusal:
        decide(cmd, CTX, lookup_in(WORLD))

    assert refusal.value.field == "superseded_by"


@pytest.mark.parametrize("cmd", [
    pytest.param(_embedding(item_version=ITEM_VERSION + 1), id="embedding"),
    pytest.param(_entities(item_version=ITEM_VERSION + 1), id="entities"),
])
def test_enrichment_of_an_item_version_that_does_not_exist_yet_is_refused(
        cmd: c.CommandBase) -> None:
    with pytest.raises(Invalid) as refusal:
        decide(cmd, CTX, lookup_in(WORLD))

    assert refusal.value.field == "item_version"
    assert str(ITEM_VERSION) in refusal.value.reason


def test_setting_a_space_policy_takes_the_next_policy_version() -> None:
    world = {**WORLD, _space(SPACE): _state(SPACE, version=9, policy_version=41)}

    decision = decide(c.SetSpacePolicy(space_id=SPACE), CTX, lookup_in(world))

    (payload,) = decision.events
    assert isinstance(payload, e.SpacePolicySet)
    assert payload.policy_version == 42
    assert decision.ids["policy_version"] == "42"


def test_folding_policy_events_counts_the_policy_version_that_decide_increments() -> None:
    state = evolve(None, "space.created", SPACE)
    for _ in range(3):
        state = evolve(state, "space.policy_set", SPACE)

    decision = decide(c.SetSpacePolicy(space_id=SPACE), CTX, lookup_in({_space(SPACE): state}))

    assert (state.version, state.policy_version) == (4, 3)
    assert decision.ids["policy_version"] == "4"


def _policy_after(*updates: c.SetSpacePolicy) -> e.SpacePolicySet:
    """The policy each update leaves, decided on the state the previous one's event left (as
    the writer folds it, and a replay)."""
    state = evolve(None, "space.created", SPACE)
    policies: list[e.SpacePolicySet] = []
    for update in updates:
        (payload,) = decide(update, CTX, lookup_in({_space(SPACE): state})).events
        assert isinstance(payload, e.SpacePolicySet)
        policies.append(payload)
        state = evolve(state, "space.policy_set", SPACE,
                       payload=payload.model_dump(mode="json"))
    return policies[-1]


def test_a_policy_update_changes_only_the_fields_it_names() -> None:
    policy = _policy_after(
        c.SetSpacePolicy(space_id=SPACE, legal_hold=True, max_items=50,
                         retention_days={"fact": 30}, cardinality={"lives_in": "single"}),
        c.SetSpacePolicy(space_id=SPACE, audit_retrievals=True, max_items=None))

    assert policy.policy_version == 2
    assert (policy.legal_hold, policy.retention_days, policy.cardinality) == (
        True, {"fact": 30}, {"lives_in": "single"})
    assert (policy.audit_retrievals, policy.max_items) == (True, None)


def test_retroactive_describes_one_update_and_is_not_carried_to_the_next() -> None:
    policy = _policy_after(c.SetSpacePolicy(space_id=SPACE, max_items=5, retroactive=True),
                           c.SetSpacePolicy(space_id=SPACE, forget_below=0.1))
    assert (policy.retroactive, policy.max_items, policy.forget_below) == (False, 5, 0.1)


def test_a_policy_update_on_a_policy_folded_from_a_first_version_event_keeps_its_hold() -> None:
    state = evolve(evolve(None, "space.created", SPACE), "space.policy_set", SPACE,
                   payload={"policy_version": 1, "legal_hold": True, "max_items": 3})

    (payload,) = decide(c.SetSpacePolicy(space_id=SPACE, consolidation="suggest"), CTX,
                        lookup_in({_space(SPACE): state})).events

    assert isinstance(payload, e.SpacePolicySet)
    assert (payload.legal_hold, payload.max_items, payload.consolidation) == (
        True, 3, "suggest")


def test_folding_events_tracks_status_and_keeps_it_for_events_that_do_not_change_it() -> None:
    state = evolve(None, "memory.asserted", SPACE)
    state = evolve(state, "memory.embedded", SPACE)
    assert (state.version, state.status) == (2, "active")
    state = evolve(state, "memory.retracted", SPACE)
    assert (state.version, state.status, state.space_id) == (3, "retracted", SPACE)


def test_the_same_stream_of_two_tenants_has_two_ids() -> None:
    ref = _item(ITEM)
    assert ref.stream_id("acme") != ref.stream_id("globex")
    assert ref.stream_id("acme") == _item(ITEM).stream_id("acme")


def test_an_expected_version_on_an_item_of_another_space_does_not_reveal_that_it_exists(
        ) -> None:
    cmd = c.ReviseMemory(space_id=SPACE, item_id=OTHER_ITEM, content="x", expected_version=0)

    with pytest.raises(NotFound):
        decide(cmd, CTX, lookup_in(WORLD))


# --- reads_of -------------------------------------------------------------------------------

ALL_COMMANDS = [
    pytest.param(case.values[0], id=case.id)
    for case in (*SUCCESSES, *NOT_FOUND, *CONFLICTS)
]


@pytest.mark.parametrize("cmd", ALL_COMMANDS)
def test_reads_of_names_every_stream_that_decide_looks_up(cmd: c.CommandBase) -> None:
    looked_up: list[StreamRef] = []
    world = lookup_in(WORLD)

    def recording(ref: StreamRef) -> StreamState | None:
        looked_up.append(ref)
        return world(ref)

    with contextlib.suppress(DomainError):
        decide(cmd, CTX, recording)

    assert looked_up
    assert set(looked_up) <= set(reads_of(cmd, CTX))


@pytest.mark.parametrize("cmd", ALL_COMMANDS)
def test_reads_of_starts_with_the_target_stream(cmd: c.CommandBase) -> None:
    assert reads_of(cmd, CTX)[0] == target_of(cmd, CTX)


# --- evolve ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("event_type", "status"), [
    ("memory.asserted", "active"), ("session.started", "active"),
    ("memory.retracted", "retracted"), ("memory.embedded", "active")])
def test_a_streams_first_event_folds_to_version_1_with_its_subject(
        event_type: str, status: Status) -> None:
    assert evolve(None, event_type, "notes", "alice") == StreamState(
        1, "notes", status, subject="alice")


def test_a_first_policy_keeps_its_payload() -> None:
    state = evolve(None, "space.policy_set", "notes", None,
                   {"default_cardinality": "multi", "policy_version": 1})
    assert (state.version, state.policy_version) == (1, 1)
    assert state.cardinality_of("lives_in") == "multi"
