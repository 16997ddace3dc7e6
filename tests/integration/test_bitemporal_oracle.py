"""The bi-temporal read models against an independent point-wise model (``bitemporal_oracle``):
random histories of assert (with belief revision), revise, retract, supersede, promote,
reaffirm and archive, committed by the real writer (whose refusals the model predicts too),
projected by the projector's own batch function in random splits (so prior state is loaded
from PostgreSQL between batches), and read back through the query service's HTTP API
(``bitemporal_reads``): items by id and listed at (valid_at, as_of_position) and at
recorded_at, history, and the change feeds."""

import itertools
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar
from uuid import UUID, uuid4

import httpx
import orjson
import psycopg
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from memledger_ingest.core.writer import GroupCommitWriter, Rejected, WriterTuning
from memledger_platform.endpoints import Endpoints
from memledger_platform.events import decode
from memledger_platform.eventstore import RecordedEvent
from memledger_platform.eventstore.postgres import PostgresEventStore, datastore_from_dsn
from memledger_projector.core import store
from memledger_schemas import commands as c
from tests.integration.bitemporal_oracle import Oracle, Planned, Recorded, position_at
from tests.integration.bitemporal_reads import ReadBack
from tests.integration.ingest_support import running
from tests.integration.read_support import ReadSide, query_api, read_side

SPACE = "s"
ITEMS = [UUID(int=i + 1) for i in range(3)]
# Years in the past and far in the future: an absent valid_from means "from the recording
# time", which lies between them.
INSTANTS = [datetime(y, 1, 1, tzinfo=UTC) for y in (2019, 2020, 2021, 2022, 2023, 2040, 2050)]
TEXTS = ["red", "green", "blue", "grey"]
_tenants = itertools.count()
T = TypeVar("T")


@dataclass
class World:
    """One event store, one writer, one read model and its HTTP API for every example; each
    example is a tenant of its own."""

    side: ReadSide
    writer: GroupCommitWriter
    http: httpx.AsyncClient
    log: list[tuple[int, datetime]] = field(default_factory=list)
    """(position, recorded_at) of every event committed so far, in position order."""

    def fresh(self) -> list[RecordedEvent]:
        """The events committed since the last call (recorded in ``log``)."""
        found = self.side.store.read_all(self.log[-1][0] if self.log else 0, 10_000)
        self.log += [(e.position, e.recorded_at) for e in found]
        return found


@pytest.fixture(scope="module")
async def world(engines: Endpoints) -> AsyncIterator[World]:
    base = f"oracle_{uuid4().hex[:8]}"
    event_store = PostgresEventStore(datastore_from_dsn(engines.postgres_dsn, schema=base))
    event_store.create_tables()
    try:
        with read_side(engines.postgres_dsn, event_store, base) as side:
            writer = GroupCommitWriter(event_store,
                                       tuning=WriterTuning(linger_seconds=0))
            async with running(writer), query_api(engines.postgres_dsn, side) as (http, _):
                yield World(side, writer, http)
    finally:
        event_store.close()
        with psycopg.connect(engines.postgres_dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{base}" CASCADE')


# --- random histories ------------------------------------------------------------------------

maybe_instant = st.sampled_from([*INSTANTS, None])


@st.composite
def interval(draw: st.DrawFn) -> tuple[datetime | None, datetime | None]:
    start, end = draw(maybe_instant), draw(maybe_instant)
    if start and end and end <= start:
        start, end = end, (start if end < start else None)
    return start, end


@st.composite
def assertion(draw: st.DrawFn, item: UUID) -> c.AssertMemory:
    start, end = draw(interval())
    text = draw(st.sampled_from(TEXTS))
    triple = draw(st.sampled_from([None, {"subject": "sky", "predicate": "is", "object": text}]))
    return c.AssertMemory(space_id=SPACE, item_id=item, kind="fact", content=text,
                          tags=(text,), valid_from=start, valid_to=end, triple=triple,
                          confidence=draw(st.sampled_from([0.25, 1.0])),
                          layer=draw(st.sampled_from([None, "ecosystem"])))


REVISIONS = {"content": st.sampled_from(TEXTS), "tags": st.sampled_from([(), ("new",)]),
             "importance": st.sampled_from([0.0, 0.75])}


@st.composite
def operation(draw: st.DrawFn) -> c.CommandBase:
    """Any command on any item: some are refused (the item is not there, or not active)."""
    item = draw(st.sampled_from(ITEMS))
    kind = draw(st.sampled_from(["assert", "revise", "revise", "retract", "supersede",
                                 "archive", "promote", "reaffirm"]))
    reason = draw(st.sampled_from([None, "because"]))
    if kind == "assert":
        return draw(assertion(item))
    if kind == "revise":
        start, end = draw(interval())
        changed = draw(st.sampled_from(sorted(REVISIONS)))
        changes = draw(st.fixed_dictionaries({changed: REVISIONS[changed]}, optional={
            k: v for k, v in REVISIONS.items() if k != changed}))
        return c.ReviseMemory(space_id=SPACE, item_id=item, valid_from=start, valid_to=end,
                              reason=reason, **changes)
    if kind == "retract":
        return c.RetractMemory(space_id=SPACE, item_id=item, valid_until=draw(maybe_instant),
                               reason=reason)
    if kind == "supersede":
        return c.SupersedeMemory(space_id=SPACE, item_id=item, reason="newer",
                                 superseded_by=draw(st.sampled_from(ITEMS)))
    if kind == "promote":
        return c.PromoteMemory(space_id=SPACE, item_id=item, reason=reason,
                               layer=draw(st.sampled_from(["project", "ecosystem"])))
    if kind == "reaffirm":
        return c.ReaffirmMemory(space_id=SPACE, item_id=item, reason=reason)
    return c.ArchiveMemory(space_id=SPACE, item_id=item, reason="policy")


@st.composite
def histories(draw: st.DrawFn) -> list[c.CommandBase]:
    """One to three items asserted, then any commands."""
    items = draw(st.lists(st.sampled_from(ITEMS), min_size=1, max_size=3, unique=True))
    return [*(draw(assertion(item)) for item in items),
            *draw(st.lists(operation(), max_size=6))]


# --- writing: the system and the model side by side ------------------------------------------

async def _write(w: World, tenant: str, oracle: Oracle, command: c.CommandBase) -> None:
    """Submit ``command``; the model must agree on whether it is refused and on what it
    records, and learns where the event store put it."""
    planned = oracle.plan(command)
    try:
        await w.writer.submit(tenant, [command])
    except Rejected as refused:
        refusal: Rejected | None = refused
    else:
        refusal = None
    assert (planned is None) == (refusal is not None), f"{command}: {refusal or planned}"
    if planned is None:
        assert not w.fresh(), "a refused command recorded something"
        return
    oracle.commit(planned, _match(planned, w.fresh()))


def _match(planned: list[Planned], found: list[RecordedEvent]) -> list[Recorded]:
    def key(event_type: str, payload: dict[str, Any], space: str) -> tuple[str, str]:
        return event_type, str(payload.get("item_id", space))

    by_key = {key(e.event_type, (f := e.fields())["payload"], f["space_id"]): e for e in found}
    assert sorted(by_key) == sorted((p.event_type, p.subject) for p in planned), found
    return [Recorded(p, by_key[(p.event_type, p.subject)].position,
                     by_key[(p.event_type, p.subject)].recorded_at) for p in planned]


async def _history(w: World, tenant: str, operations: list[c.CommandBase]) -> Oracle:
    oracle = Oracle(SPACE, now=datetime.now(UTC))
    await w.writer.submit(tenant, [c.CreateSpace(space_id=SPACE)])
    created = Planned("space.created", SPACE)
    oracle.commit([created], _match([created], w.fresh()))
    for command in operations:
        await _write(w, tenant, oracle, command)
    return oracle


def _project_in_batches(w: World, sizes: list[int]) -> Iterator[int]:
    """Project every committed event not projected yet, in batches of ``sizes`` (cycled),
    yielding the checkpoint after each batch."""
    events = [decode(orjson.loads(e.document()))
              for e in w.side.store.read_all(w.side.position(), 10_000)]
    for size in itertools.cycle(sizes):
        if not events:
            return
        batch, events = events[:size], events[size:]
        yield store.apply_batch(w.side.conn, w.side.names, batch).position


# --- the test ----------------------------------------------------------------------------------

class Dice:
    """Choices made with numbers Hypothesis drew up front: what a test draws must not depend
    on what the system answered (recording times, positions), or a failing example could not
    be replayed and shrunk."""

    def __init__(self, numbers: list[float]) -> None:
        self._numbers = itertools.cycle(numbers)

    def choice(self, among: Sequence[T]) -> T:
        return among[int(next(self._numbers) * len(among))]

    def chance(self) -> bool:
        return next(self._numbers) < 0.5

    def randint(self, low: int, high: int) -> int:
        return low + int(next(self._numbers) * (high - low + 1))


def _agreement(examples: int) -> Any:
    """The oracle test over ``examples`` random histories."""

    @settings(max_examples=examples, deadline=None, suppress_health_check=[
        HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
    @given(operations=histories(), sizes=st.lists(st.integers(1, 6), min_size=1, max_size=4),
           dice=st.lists(st.floats(0, 1, exclude_max=True), min_size=48, max_size=48).map(Dice))
    async def agrees(world: World, operations: list[c.CommandBase], sizes: list[int],
                     dice: Dice) -> None:
        tenant = f"o{next(_tenants)}"
        reads = ReadBack(world.http, tenant, SPACE, await _history(world, tenant, operations))
        probes = reads.oracle.probes()
        for checkpoint in _project_in_batches(world, sizes):
            if dice.chance():  # what the latest position shows while the rest is pending
                at = await reads.listing(dice.choice(probes), None, include_archived=True)
                assert at == checkpoint
        event(f"{len(reads.oracle.events) // 4 * 4}+ events, smallest batch {min(sizes)}")
        await _probe(world, reads, dice)

    return agrees


# 150 histories in a run of the suite (about 20 s); 1,000 in the longer run, `make test-faults`.
test_every_read_agrees_with_an_independent_point_wise_model = _agreement(150)
test_every_read_agrees_over_many_more_histories = pytest.mark.faults(_agreement(1_000))


async def _probe(w: World, reads: ReadBack, dice: Dice) -> None:
    events = reads.oracle.events
    positions = [events[0].position - 1, *(e.position for e in events), w.side.position()]
    probes = reads.oracle.probes()
    for _ in range(4):
        valid_at, position = dice.choice(probes), dice.choice(positions)
        event(f"item {await reads.item(dice.choice(ITEMS), valid_at, position)}")
        await reads.listing(valid_at, position, include_archived=dice.chance())
    await reads.listing(None, None)  # valid now, as of the latest
    recorded = dice.choice(events).recorded_at - timedelta(microseconds=dice.choice([0, 1]))
    at = await reads.listing(dice.choice(probes), None, recorded_at=recorded,
                             include_archived=True)
    assert at == position_at(w.log, recorded)
    for item in ITEMS:
        await reads.history(item, dice.choice(positions[1:]))
    since = dice.choice([None, dice.choice(events).recorded_at])
    await reads.feed(f"/v1/spaces/{SPACE}/changes", dice.randint(2, 6), since)
    await reads.feed("/v1/changes", 100, None)


async def test_the_model_catches_a_projector_that_forgets_prior_state_between_batches(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison can fail: a projector that does not load an item's current rows before
    a batch loses a revision made in a later batch than the assertion, and the reads say so
    (projected in one batch, the same history reads right)."""
    item, when = ITEMS[0], datetime(2022, 1, 1, tzinfo=UTC)
    history = [c.AssertMemory(space_id=SPACE, item_id=item, kind="fact", content="red",
                              valid_from=INSTANTS[0]),
               c.ReviseMemory(space_id=SPACE, item_id=item, content="blue",
                              valid_from=INSTANTS[2])]
    whole, split = f"o{next(_tenants)}", f"o{next(_tenants)}"
    reads = ReadBack(world.http, whole, SPACE, await _history(world, whole, history))
    list(_project_in_batches(world, [10]))
    await reads.listing(when, None)
    monkeypatch.setattr(store, "_current_versions", lambda *_: {})
    reads = ReadBack(world.http, split, SPACE, await _history(world, split, history))
    list(_project_in_batches(world, [1]))
    with pytest.raises(AssertionError, match="blue"):
        await reads.listing(when, None)
