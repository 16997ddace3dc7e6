"""GroupCommitWriter over the in-memory event store: grouping, atomicity, idempotency, retries."""

import asyncio
import dataclasses
import hashlib
import threading
from collections.abc import AsyncIterator, Collection, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime
from uuid import UUID

import pytest

from memledger_ingest.core.results import encoded, request_hash
from memledger_ingest.core.writer import CommandResult, GroupCommitWriter, Rejected
from memledger_ingest.domain.errors import Conflict, Invalid, NotFound
from memledger_platform.crypto import Keyring, MemoryKeyring, SubjectKey
from memledger_platform.eventstore import (
    Committed,
    IdempotencyRecord,
    NewEvent,
    StreamConflict,
)
from memledger_platform.eventstore.memory import InMemoryEventStore
from memledger_schemas import commands as c
from memledger_schemas.envelope import EventEnvelope
from memledger_schemas.events import MemoryAsserted
from tests.support import eventually

TENANT = "acme"

Batch = Sequence[c.CommandBase]


class ScriptedStore(InMemoryEventStore):
    """An in-memory store that can hold its first append until ``gate`` is set (so later
    submissions queue up behind it and form one group) and fail chosen appends (1-based)."""

    def __init__(self, *, hold_first: bool = False,
                 failures: dict[int, Exception] | None = None) -> None:
        super().__init__()
        self.sizes: list[int] = []
        self.entered = threading.Event()
        self.gate = threading.Event()
        if not hold_first:
            self.gate.set()
        self._failures = failures or {}

    def append(self, events: Sequence[EventEnvelope | NewEvent],
               keys: Sequence[IdempotencyRecord] = ()) -> list[Committed]:
        self.sizes.append(len(events))
        self.entered.set()
        if len(self.sizes) == 1:
            self.gate.wait(timeout=10)
        failure = self._failures.get(len(self.sizes))
        if failure is not None:
            raise failure
        return super().append(events, keys)


@contextmanager
def running(store: InMemoryEventStore) -> Iterator[GroupCommitWriter]:
    writer = GroupCommitWriter(store)
    writer.start()
    try:
        yield writer
    finally:
        writer.stop()


@asynccontextmanager
async def _writing_in_notes(store: InMemoryEventStore, keyring: Keyring
                            ) -> AsyncIterator[GroupCommitWriter]:
    """A started writer with the space "notes" made, stopped at the end."""
    writer = GroupCommitWriter(store, keyring=keyring)
    writer.start()
    try:
        await writer.submit(TENANT, [space("notes")])
        yield writer
    finally:
        writer.stop()


@pytest.fixture
def store() -> InMemoryEventStore:
    return InMemoryEventStore()


@pytest.fixture
def writer(store: InMemoryEventStore) -> Iterator[GroupCommitWriter]:
    with running(store) as started:
        yield started


def space(space_id: str = "notes", **fields: object) -> c.CreateSpace:
    return c.CreateSpace.model_validate({"space_id": space_id, **fields})


def memory(space_id: str = "notes", content: str = "sky is blue", **fields: object
           ) -> c.AssertMemory:
    return c.AssertMemory.model_validate(
        {"space_id": space_id, "kind": "fact", "content": content, **fields})


async def hold_a_first_write(writer: GroupCommitWriter, store: ScriptedStore
                            ) -> "asyncio.Task[list[CommandResult]]":
    """Submit a write and wait until the store holds it (``store.gate`` lets it go)."""
    blocker = asyncio.create_task(writer.submit(TENANT, [space("blocker")]))

    async def store_entered() -> None:
        assert store.entered.is_set()

    await eventually(store_entered)
    return blocker


async def queue_up(writer: GroupCommitWriter, batches: Sequence[Batch]
                   ) -> list["asyncio.Task[list[CommandResult]]"]:
    tasks = [asyncio.create_task(writer.submit(TENANT, batch)) for batch in batches]
    await asyncio.sleep(0)  # one loop turn: each task queues its unit, then awaits its result
    return tasks


async def pile_up(writer: GroupCommitWriter, store: ScriptedStore, batches: Sequence[Batch]
                  ) -> list["asyncio.Task[list[CommandResult]]"]:
    """Submit ``batches`` while the store holds a first write, so that they are all queued
    when the writer next drains: they form one group. The first write is awaited."""
    blocker = await hold_a_first_write(writer, store)
    tasks = await queue_up(writer, batches)
    store.gate.set()
    await blocker
    return tasks


# --- plain writes ---------------------------------------------------------------------------


async def test_a_write_returns_its_event_ids_and_positions(
        writer: GroupCommitWriter, store: InMemoryEventStore) -> None:
    (result,) = await writer.submit(TENANT, [space("notes")])

    (recorded,) = store.read_all(0, 10)
    envelope = recorded.envelope()
    assert result.command == "create_space"
    assert result.event_ids == (str(envelope.event_id),)
    assert result.positions == (1,) == (envelope.global_position,)
    assert (result.stream_version, result.ids, result.duplicate) == (1, {"space_id": "notes"},
                                                                     False)
    assert (envelope.tenant_id, envelope.space_id, envelope.event_type, envelope.actor) == (
        TENANT, "notes", "space.created", "api")


async def test_every_event_the_writer_stores_is_a_valid_envelope_carrying_the_command_context(
        writer: GroupCommitWriter, store: InMemoryEventStore) -> None:
    session = UUID(int=7)
    start, end = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 2, 1, tzinfo=UTC)
    await writer.submit(TENANT, [space("notes"), c.StartSession(space_id="notes",
                                                                 session_id=session)])
    await writer.submit(TENANT, [memory(session_id=session, valid_from=start, valid_to=end,
                                        agent_id="scribe", idempotency_key="k-1",
                                        correlation_id="corr", causation_id="cause")],
                        actor="key:k1",
                        traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")

    envelope = store.read_all(2, 1)[0].envelope()
    assert (envelope.session_id, envelope.valid_from, envelope.valid_to) == (session, start, end)
    assert (envelope.agent_id, envelope.actor, envelope.idempotency_key) == (
        "scribe", "key:k1", "k-1")
    assert (envelope.correlation_id, envelope.causation_id) == ("corr", "cause")
    assert envelope.traceparent is not None
    assert envelope.stream_version == 1
    payload = envelope.typed_payload()
    assert isinstance(payload, MemoryAsserted)
    assert payload.content == "sky is blue"


async def test_positions_increase_from_one_write_to_the_next(writer: GroupCommitWriter) -> None:
    await writer.submit(TENANT, [space("notes")])
    positions = [(await writer.submit(TENANT, [memory(content=f"fact {n}")]))[0].position
                 for n in range(5)]

    assert positions == sorted(positions)
    assert len(set(positions)) == 5
    assert positions[0] > 1


async def test_a_later_command_of_a_batch_sees_the_effect_of_an_earlier_one(
        writer: GroupCommitWriter, store: InMemoryEventStore) -> None:
    created, asserted = await writer.submit(TENANT, [space("fresh"), memory("fresh")])

    assert created.positions == (1,)
    assert asserted.positions == (2,)
    assert asserted.ids.keys() == {"item_id"}
    envelopes = [e.envelope() for e in store.read_all(0, 10)]
    assert [(e.event_type, e.space_id) for e in envelopes] == [
        ("space.created", "fresh"), ("memory.asserted", "fresh")]


async def test_the_actor_is_who_submitted_never_what_the_command_says(
        writer: GroupCommitWriter, store: InMemoryEventStore) -> None:
    await writer.submit(TENANT, [space("notes", agent_id="scribe")], actor="key:k1")
    await writer.submit(TENANT, [space("other", actor="memledger:lifecycle")], actor="key:k2")

    envelopes = [e.envelope() for e in store.read_all(0, 10)]
    assert [(e.actor, e.agent_id) for e in envelopes] == [("key:k1", "scribe"),
                                                           ("key:k2", None)]


async def test_a_policy_update_keeps_what_an_earlier_writer_set_and_it_did_not_name(
        store: InMemoryEventStore) -> None:
    with running(store) as first:
        await first.submit(TENANT, [space("notes"), c.SetSpacePolicy(
            space_id="notes", legal_hold=True, max_items=7)])
    with running(store) as second:  # nothing cached: the state is folded from the store
        await second.submit(TENANT, [c.SetSpacePolicy(space_id="notes", max_items=8)])
        await second.submit(TENANT, [c.SetSpacePolicy(space_id="notes",
                                                      audit_retrievals=True)])

    policies = [e.envelope().payload for e in store.read_all(0, 10)
                if e.event_type == "space.policy_set"]
    assert [(p["legal_hold"], p["max_items"], p["audit_retrievals"]) for p in policies] == [
        (True, 7, False), (True, 8, False), (True, 8, True)]


async def test_one_key_for_a_policy_update_naming_a_field_and_one_leaving_it_out_is_refused(
        writer: GroupCommitWriter) -> None:
    await writer.submit(TENANT, [space("notes")])
    await writer.submit(TENANT, [c.SetSpacePolicy(space_id="notes", idempotency_key="p")])

    with pytest.raises(Rejected) as refused:
        await writer.submit(TENANT, [c.SetSpacePolicy(space_id="notes", legal_hold=False,
                                                      idempotency_key="p")])
    assert isinstance(refused.value.error, Invalid)
    assert refused.value.error.field == "idempotency_key"


async def test_the_commit_callback_hears_the_highest_committed_position(
        store: InMemoryEventStore) -> None:
    heard: list[int] = []
    writer = GroupCommitWriter(store, on_commit=heard.append)
    writer.start()
    try:
        await writer.submit(TENANT, [space("notes"), memory(), memory()])
    finally:
        writer.stop()

    async def heard_three() -> None:
        assert heard == [3]

    await eventually(heard_three)


# --- idempotency ----------------------------------------------------------------------------


async def test_a_retry_with_the_same_idempotency_key_returns_the_first_result(
        writer: GroupCommitWriter, store: InMemoryEventStore) -> None:
    (first,) = await writer.submit(TENANT, [space("notes", idempotency_key="k-1")])
    written = store.max_position()

    (again,) = await writer.submit(TENANT, [space("notes", idempotency_key="k-1")])

    assert again.duplicate is True
    assert (again.event_ids, again.positions, again.ids, again.stream_version) == (
        first.event_ids, first.positions, first.ids, first.stream_version)
    assert store.max_position() == written


async def test_a_key_reused_for_a_different_request_is_refused_as_invalid(
        writer: GroupCommitWriter, store: InMemoryEventStore) -> None:
    await writer.submit(TENANT, [space("notes", idempotency_key="k-1")])

    with pytest.raises(Rejected) as refusal:
        await writer.submit(TENANT, [space("notes", name="Renamed", idempotency_key="k-1")])

    assert refusal.value.index == 0
    assert isinstance(refusal.value.error, Invalid)
    assert refusal.value.error.field == "idempotency_key"
    assert store.max_position() == 1


async def test_an_idempotency_key_is_scoped_by_tenant(
        writer: GroupCommitWriter, store: InMemoryEventStore) -> None:
    (ours,) = await writer.submit("acme", [space("notes", idempotency_key="k-1")])
    (theirs,) = await writer.submit("globex", [space("notes", idempotency_key="k-1")])

    assert not theirs.duplicate
    assert theirs.event_ids != ours.event_ids
    assert store.max_position() == 2


async def test_a_key_repeated_with_the_same_request_inside_one_batch_writes_once(
        writer: GroupCommitWriter, store: InMemoryEventStore) -> None:
    first, second = await writer.submit(
        TENANT, [space("notes", idempotency_key="k-1"), space("notes", idempotency_key="k-1")])

    assert second == dataclasses.replace(first, duplicate=True)
    assert store.max_position() == 1


async def test_a_key_reused_for_a_different_request_inside_one_batch_is_refused(
        writer: GroupCommitWriter, store: InMemoryEventStore) -> None:
    with pytest.raises(Rejected) as refusal:
        await writer.submit(TENANT, [space("notes", idempotency_key="k-1"),
                                     space("other", idempotency_key="k-1")])

    assert refusal.value.index == 1
    assert isinstance(refusal.value.error, Invalid)
    assert store.max_position() == 0


async def test_a_retry_that_arrives_while_its_original_is_queued_gets_the_first_result() -> None:
    store = ScriptedStore(hold_first=True)
    with running(store) as writer:
        tasks = await pile_up(writer, store, [[space("notes", idempotency_key="k-1")],
                                              [space("notes", idempotency_key="k-1")]])
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)

    first, again = outcomes
    assert isinstance(first, list)
    assert isinstance(again, list), f"the retry was refused: {again!r}"
    assert again[0].duplicate
    assert again[0].event_ids == first[0].event_ids


# --- refusals -------------------------------------------------------------------------------


async def test_an_expected_version_mismatch_is_rejected_with_the_current_version(
        writer: GroupCommitWriter, store: InMemoryEventStore) -> None:
    await writer.submit(TENANT, [space("notes")])

    with pytest.raises(Rejected) as refusal:
        await writer.submit(TENANT, [c.SetSpacePolicy(space_id="notes", expected_version=0)])

    assert isinstance(refusal.value.error, Conflict)
    assert refusal.value.error.current_version == 1
    assert store.max_position() == 1


async def test_an_atomic_batch_with_a_refused_command_writes_nothing(
        writer: GroupCommitWriter, store: InMemoryEventStore) -> None:
    batch = [space("fresh"), memory("fresh"), memory("nowhere"), memory("fresh")]

    with pytest.raises(Rejected) as refusal:
        await writer.submit(TENANT, batch)

    assert refusal.value.index == 2
    assert isinstance(refusal.value.error, NotFound)
    assert store.max_position() == 0
    (created,) = await writer.submit(TENANT, [space("fresh")])
    assert created.positions == (1,)


async def test_a_refused_submission_does_not_hold_back_the_others_of_its_group() -> None:
    store = ScriptedStore(hold_first=True)
    with running(store) as writer:
        tasks = await pile_up(writer, store, [[space("a")], [memory("nowhere")], [space("b")]])
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)

    assert isinstance(outcomes[0], list)
    assert isinstance(outcomes[1], Rejected)
    assert isinstance(outcomes[2], list)
    assert store.sizes == [1, 2]
    assert store.max_position() == 3


class CountingKeyring(MemoryKeyring):
    """Counts how often the writer asks which source keys are live."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[set[str]] = []

    def live(self, key_ids: Collection[str]) -> set[str]:
        self.asked.append(set(key_ids))
        return super().live(key_ids)


def learned(item: UUID, source_key_id: str, n: int) -> c.RecordEntities:
    return c.RecordEntities(space_id="notes", item_id=item, item_version=1,
                            extractor="mentions/v1", entities=(), source_key_id=source_key_id,
                            idempotency_key=f"entities-{n}")


async def test_what_was_learned_from_an_erased_subjects_text_is_refused_one_lookup_a_group(
        ) -> None:
    keyring = CountingKeyring()
    gone = keyring.for_writing(TENANT, "u1", "notes").key_id
    kept = keyring.for_writing(TENANT, "u2", "notes").key_id
    keyring.destroy(TENANT, "u1")
    store = ScriptedStore()
    async with _writing_in_notes(store, keyring) as writer:
        (asserted,) = await writer.submit(TENANT, [memory("notes")])
        item = UUID(str(asserted.ids["item_id"]))
        store.sizes, keyring.asked = [], []
        store.gate.clear()
        store.entered.clear()  # the next append is held: the two submissions form one group
        tasks = await pile_up(writer, store, [[learned(item, gone, 1)],
                                              [learned(item, kept, 2)]])
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)

    refused = outcomes[0]
    assert isinstance(refused, Rejected)
    assert isinstance(refused.error, Invalid)
    assert refused.error.field == "source_key_id"
    assert isinstance(outcomes[1], list)
    assert keyring.asked == [{gone, kept}]  # one question for the group, none for the blocker


class ErasedAfterTheCheck(MemoryKeyring):
    """Erases ``erasing`` just after the writer asked whether a group's source keys are live:
    an erasure through another process landing between a group's check and its sealing."""

    erasing: str | None = None

    def live(self, key_ids: Collection[str]) -> set[str]:
        found = super().live(key_ids)
        if self.erasing is not None:
            self.destroy(TENANT, self.erasing)
            self.erasing = None
        return found


async def test_what_is_learned_from_text_erased_after_the_groups_check_is_refused_unsealed(
        ) -> None:
    keyring = ErasedAfterTheCheck()
    async with _writing_in_notes(InMemoryEventStore(), keyring) as writer:
        (asserted,) = await writer.submit(TENANT, [memory("notes", subject_id="u1")])
        [source] = keyring.existing_for_writing([(TENANT, "u1", "notes")]).values()
        await asyncio.sleep(0.2)  # past the keys looked up ahead: this group looks its own up
        keyring.erasing = "u1"
        with pytest.raises(Rejected) as refused:
            await writer.submit(TENANT, [learned(UUID(str(asserted.ids["item_id"])),
                                                 source.key_id, 1)])
    assert isinstance(refused.value.error, Invalid)
    assert refused.value.error.field == "source_key_id"
    assert keyring.spaces_of(TENANT, "u1") == []  # no new key holds what the text taught


class WritingKeyring(MemoryKeyring):
    """Counts the keys the writer looks up one by one (``for_writing``)."""

    def __init__(self) -> None:
        super().__init__()
        self.one_by_one: list[str] = []

    def for_writing(self, tenant: str, subject: str, space: str, source: str | None = None
                    ) -> SubjectKey:
        self.one_by_one.append(subject)
        return super().for_writing(tenant, subject, space, source)


async def test_a_groups_existing_subject_keys_are_looked_up_together_and_seal_as_before(
        ) -> None:
    keyring = WritingKeyring()
    store = InMemoryEventStore()
    async with _writing_in_notes(store, keyring) as writer:
        first = await writer.submit(TENANT, [memory(subject_id=s) for s in ("a", "b", "c")])
        made = list(keyring.one_by_one)
        keyring.one_by_one.clear()
        again = await writer.submit(TENANT, [memory(subject_id=s) for s in ("a", "b", "c")]
                                    + [memory(subject_id="d")])

    assert made == ["a", "b", "c"]  # made on first use, one by one
    assert keyring.one_by_one == ["d"]  # the rest found in one lookup
    sealed = {e.position: e.fields()["key_id"] for e in store.read_all(0, 100)}
    assert [sealed[r.position] for r in again[:3]] == [sealed[r.position] for r in first]
    assert len({sealed[r.position] for r in again}) == 4


class AheadKeyring(MemoryKeyring):
    """Records each group lookup: on which thread, and whether the store's held append had
    not been let go yet."""

    def __init__(self, store: ScriptedStore) -> None:
        super().__init__()
        self.store = store
        self.lookups: list[tuple[str, bool]] = []

    def existing_for_writing(self, wanted: Collection[tuple[str, str, str]]
                             ) -> dict[tuple[str, str, str], SubjectKey]:
        held = not self.store.gate.is_set()
        self.lookups.append((threading.current_thread().name, held))
        return super().existing_for_writing(wanted)


async def _holding_a_write_of(writer: GroupCommitWriter, store: ScriptedStore,
                              keyring: AheadKeyring, subject: str
                              ) -> "asyncio.Task[list[CommandResult]]":
    """A write sealed for ``subject``, held in the store until ``store.gate`` is set, once
    the lookup of its subjects' keys for the next group has been made."""
    store.sizes, keyring.lookups = [], []
    store.gate.clear()
    store.entered.clear()
    held = asyncio.create_task(writer.submit(TENANT, [memory(subject_id=subject)]))

    async def looked_ahead() -> None:
        assert any(t.startswith("memledger-writer-keys") and h for t, h in keyring.lookups)

    await eventually(looked_ahead)
    return held


def _key_ids(store: InMemoryEventStore, results: Sequence[CommandResult]) -> list[str]:
    sealed = {e.position: e.fields()["key_id"] for e in store.read_all(0, 1_000)}
    return [sealed[r.position] for r in results]


async def test_the_next_groups_keys_are_looked_up_while_the_group_before_it_commits() -> None:
    store = ScriptedStore()
    keyring = AheadKeyring(store)
    async with _writing_in_notes(store, keyring) as writer:
        first = await writer.submit(TENANT, [memory(subject_id="u1")])
        held = await _holding_a_write_of(writer, store, keyring, "u1")
        (queued,) = await queue_up(writer, [[memory(subject_id="u1")]])
        lookups = len(keyring.lookups)
        store.gate.set()
        results = [*first, *await held, *await queued]

    # the queued group's keys came from the lookup made during the held commit: none of its own
    assert [t for t, _ in keyring.lookups[lookups:] if not t.startswith("memledger-writer-keys")
            ] == []
    assert len(set(_key_ids(store, results))) == 1  # all sealed under u1's one key


async def test_a_group_recording_an_erasure_looks_its_keys_up_itself() -> None:
    store = ScriptedStore()
    keyring = AheadKeyring(store)
    async with _writing_in_notes(store, keyring) as writer:
        held = await _holding_a_write_of(writer, store, keyring, "u1")
        destroyed = keyring.destroy(TENANT, "u1")  # after the lookup ahead found the key
        erased, after = await queue_up(writer, [
            [c.EraseSubject(subject_id="u1", key_ids=tuple(destroyed))],
            [memory(subject_id="u1")]])
        store.gate.set()
        before = await held
        await erased
        written = await after

    assert _key_ids(store, before) == destroyed
    (fresh,) = _key_ids(store, written)
    assert fresh not in destroyed  # a new key, never the one destroyed before its group
    assert keyring.key(fresh) is not None


async def test_a_group_after_a_quiet_spell_looks_its_keys_up_itself() -> None:
    """Another process may destroy a key with no erasure passing through this writer: keys
    looked up during a commit serve only a group that follows it at once."""
    store = ScriptedStore()
    keyring = AheadKeyring(store)
    async with _writing_in_notes(store, keyring) as writer:
        held = await _holding_a_write_of(writer, store, keyring, "u1")
        store.gate.set()
        before = await held
        destroyed = keyring.destroy(TENANT, "u1")
        await asyncio.sleep(0.2)  # a quiet spell, longer than a lookup ahead is kept
        written = await writer.submit(TENANT, [memory(subject_id="u1")])

    assert _key_ids(store, before) == destroyed
    (fresh,) = _key_ids(store, written)
    assert fresh not in destroyed


# --- concurrency and failures ---------------------------------------------------------------


async def test_many_concurrent_submissions_all_commit_at_distinct_gapless_positions(
        writer: GroupCommitWriter, store: InMemoryEventStore) -> None:
    results = await asyncio.gather(
        *(writer.submit(TENANT, [space(f"s{n}")]) for n in range(200)))

    positions = sorted(r[0].position for r in results)
    assert positions == list(range(1, 201))
    assert store.max_position() == 200


async def test_after_a_stream_conflict_each_submission_of_the_group_is_retried_alone() -> None:
    store = ScriptedStore(hold_first=True, failures={2: StreamConflict("taken meanwhile")})
    with running(store) as writer:
        tasks = await pile_up(writer, store, [[space("a")], [space("b")], [space("c")]])
        results = await asyncio.gather(*tasks)

    assert store.sizes == [1, 3, 1, 1, 1]
    assert sorted(r[0].position for r in results) == [2, 3, 4]
    assert store.max_position() == 4


async def test_a_write_on_a_stream_another_writer_moved_is_retried_on_fresh_state(
        store: InMemoryEventStore) -> None:
    with running(store) as ours, running(store) as theirs:
        await ours.submit(TENANT, [space("notes")])
        await theirs.submit(TENANT, [c.SetSpacePolicy(space_id="notes")])

        (result,) = await ours.submit(TENANT, [c.SetSpacePolicy(space_id="notes")])

    assert result.stream_version == 3
    assert result.ids["policy_version"] == "2"


async def test_a_real_conflict_found_on_retry_is_refused(store: InMemoryEventStore) -> None:
    with running(store) as ours, running(store) as theirs:
        await ours.submit(TENANT, [space("notes")])
        await theirs.submit(TENANT, [c.ArchiveSpace(space_id="notes")])

        with pytest.raises(Rejected) as refusal:
            await ours.submit(TENANT, [c.SetSpacePolicy(space_id="notes")])

    assert isinstance(refusal.value.error, Conflict)
    assert store.max_position() == 2


async def test_when_the_store_fails_every_waiter_of_the_group_gets_the_error() -> None:
    store = ScriptedStore(hold_first=True, failures={2: RuntimeError("disk on fire")})
    with running(store) as writer:
        tasks = await pile_up(writer, store, [[space("a")], [space("b")], [space("c")]])
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)

    assert all(isinstance(o, RuntimeError) and str(o) == "disk on fire" for o in outcomes)
    assert store.sizes == [1, 3]
    assert store.max_position() == 1


async def test_the_writer_keeps_working_after_a_store_failure() -> None:
    store = ScriptedStore(failures={1: RuntimeError("blip")})
    with running(store) as writer:
        with pytest.raises(RuntimeError, match="blip"):
            await writer.submit(TENANT, [space("notes")])
        (result,) = await writer.submit(TENANT, [space("notes")])

    assert result.positions == (1,)


async def test_stop_finishes_the_submissions_queued_before_it() -> None:
    store = ScriptedStore(hold_first=True)
    writer = GroupCommitWriter(store)
    writer.start()
    blocker = await hold_a_first_write(writer, store)
    tasks = await queue_up(writer, [[space(f"s{n}")] for n in range(10)])

    store.gate.set()
    writer.stop()  # at once: the writer is still busy with the blocker, the ten are queued
    results = await asyncio.gather(blocker, *tasks)

    assert len(results) == 11
    assert store.max_position() == 11


@pytest.mark.parametrize("command", [
    c.AssertMemory(space_id="s", kind="fact", content="the sky is blue", tags=("sky",),
                   idempotency_key="k1"),
    c.SetSpacePolicy(space_id="s", default_cardinality="multi", idempotency_key="k2"),
])
def test_a_request_hashes_as_its_json_did_before_so_recorded_keys_still_match(
        command: c.CommandBase) -> None:
    text = command.model_dump_json()
    if isinstance(command, c.SetSpacePolicy):
        text += "|" + ",".join(sorted(command.model_fields_set))
    recorded = hashlib.sha256(text.encode()).hexdigest()[:32]
    assert request_hash(command) == recorded
    assert request_hash(command, encoded(command)) == recorded
