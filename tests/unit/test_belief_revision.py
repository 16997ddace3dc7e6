"""Belief revision on the write side: a single-valued (subject, predicate) slot per space."""

from datetime import UTC, datetime
from uuid import UUID

from memledger_ingest.domain.decide import Context, decide
from memledger_ingest.domain.handlers import object_digest
from memledger_ingest.domain.streams import StreamRef, StreamState, evolve
from memledger_ingest.domain.targets import slot_ref
from memledger_schemas import commands as c
from memledger_schemas import events as e

SPACE = "notes"
OLD, NEW = UUID(int=1), UUID(int=2)
CTX = Context("acme", NEW, "tester")
TEA = e.Triple(subject="Ada", predicate="prefers", object="tea")
SLOT = slot_ref(SPACE, "ada", "PREFERS")


def _world(holder_object: str | None = "tea", holder_status: str = "active",
           cardinality: tuple[tuple[str, str], ...] = ()) -> dict[StreamRef, StreamState]:
    world = {StreamRef("space", SPACE): StreamState(2, SPACE, "active", 1,
                                                    cardinality=cardinality)}
    if holder_object is not None:
        world[SLOT] = StreamState(1, SPACE, "active",
                                  holder=f"{OLD}/{object_digest(holder_object)}")
        world[StreamRef("item", str(OLD))] = StreamState(1, SPACE, holder_status)  # type: ignore[arg-type]
    return world


def _assert(triple: e.Triple = TEA, **extra: object) -> c.AssertMemory:
    return c.AssertMemory(space_id=SPACE, kind="preference", content="Ada prefers it",
                          triple=triple, item_id=NEW, **extra)


def test_a_new_object_for_a_held_slot_supersedes_the_holder_as_a_contradiction() -> None:
    coffee = TEA.model_copy(update={"object": "coffee"})
    since = datetime(2026, 3, 1, tzinfo=UTC)
    decision = decide(_assert(coffee, valid_from=since), CTX, _world().get)

    claim, closed = decision.also
    assert claim.target == SLOT
    assert claim.events == (e.TripleClaimed(item_id=NEW, object_digest=object_digest("coffee")),)
    assert closed.target == StreamRef("item", str(OLD))
    assert closed.events == (e.MemorySuperseded(item_id=OLD, superseded_by=NEW,
                                                reason="contradiction", valid_until=since),)
    assert decision.ids == {"item_id": str(NEW), "superseded": str(OLD)}


def test_the_same_object_again_is_a_restatement_matched_without_regard_to_case() -> None:
    decision = decide(_assert(TEA.model_copy(update={"object": "  TEA "})), CTX, _world().get)

    assert decision.also[1].events[0].reason == "restated"  # type: ignore[attr-defined]


def test_a_free_slot_is_claimed_and_nothing_is_superseded() -> None:
    decision = decide(_assert(), CTX, _world(holder_object=None).get)

    assert [d.target for d in decision.also] == [SLOT]


def test_a_holder_no_longer_active_is_not_superseded_again() -> None:
    decision = decide(_assert(), CTX, _world(holder_status="retracted").get)

    assert [d.target for d in decision.also] == [SLOT]


def test_a_multi_valued_predicate_claims_no_slot() -> None:
    world = _world(cardinality=(("*", "single"), ("prefers", "multi")))

    assert decide(_assert(), CTX, world.get).also == ()
    everything_multi = _world(cardinality=(("*", "multi"),))
    assert decide(_assert(), CTX, everything_multi.get).also == ()


def test_session_memory_claims_nothing_until_promoted() -> None:
    session = UUID(int=9)
    world = _world() | {StreamRef("session", str(session)): StreamState(1, SPACE, "active")}

    assert decide(_assert(session_id=session), CTX, world.get).also == ()


def test_a_policy_sets_the_space_cardinality_and_a_claim_sets_the_slot_holder() -> None:
    space = evolve(None, "space.created", SPACE)
    space = evolve(space, "space.policy_set", SPACE, payload={
        "default_cardinality": "multi", "cardinality": {"Lives_In": "single"}})
    slot = evolve(None, "triple.claimed", SPACE, payload={"item_id": str(OLD),
                                                         "object_digest": "ab" * 8})

    assert space.policy_version == 1
    assert space.cardinality_of("lives_in") == "single"
    assert space.cardinality_of("likes") == "multi"
    assert slot.holder == f"{OLD}/{'ab' * 8}"


def test_a_merge_supersedes_each_duplicate_into_the_survivor() -> None:
    world = {StreamRef("space", SPACE): StreamState(2, SPACE, "active"),
             StreamRef("item", str(OLD)): StreamState(1, SPACE, "active"),
             StreamRef("item", str(NEW)): StreamState(1, SPACE, "active")}
    decision = decide(c.MergeMemories(space_id=SPACE, item_id=OLD, merged_item_ids=(NEW,),
                                      similarity=0.96), CTX, world.get)

    (dup,) = decision.also
    assert dup.events == (e.MemorySuperseded(item_id=NEW, superseded_by=OLD,
                                             reason="merged: merged near-duplicates"),)
