"""The bi-temporal read models against an independent point-wise model (``bitemporal_oracle``):
random histories of assert, revise (belief revision included), retract, supersede and archive,
committed by the real writer, projected by the projector's own batch function in random splits
(so prior state is loaded from PostgreSQL between batches), and read back through the query
service's HTTP API: items by id and listed at (valid_at, as_of_position) and at recorded_at,
history, and the change feeds."""

import itertools
import random
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import httpx
import orjson
import psycopg
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from memledger_ingest.bootstrap import Endpoints
from memledger_ingest.writer import GroupCommitWriter, Rejected
from memledger_platform.auth import TENANT_HEADER
from memledger_platform.eventstore import RecordedEvent
from memledger_platform.eventstore.postgres import PostgresEventStore, datastore_from_dsn
from memledger_projector import store
from memledger_projector.projection import event_from
from memledger_query.dto import Change, History, ItemAnswer, ItemList
from memledger_schemas import commands as c
from tests.integration.bitemporal_oracle import (
    ATTRIBUTES,
    Oracle,
    Planned,
    Recorded,
    constant_over,
    position_at,
)
from tests.integration.ingest_support import running
from tests.integration.read_support import ReadSide, query_api, read_side

SPACE = "s"
ITEMS = [UUID(int=i + 1) for i in range(3)]
# Years in the past and far in the future: an absent valid_from means "from the recording
# time", which lies between them.
INSTANTS = [datetime(y, 1, 1, tzinfo=UTC) for y in (2019, 2020, 2021, 2022, 2023, 2040, 2050)]
TEXTS = ["red", "green", "blue", "grey"]
_tenants = itertools.count()


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
            writer = GroupCommitWriter(event_store, linger_seconds=0)
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
    events = [event_from(orjson.loads(e.document()))
              for e in w.side.store.read_all(w.side.position(), 10_000)]
    for size in itertools.cycle(sizes):
        if not events:
            return
        batch, events = events[:size], events[size:]
        yield store.apply_batch(w.side.conn, w.side.names, batch).position


# --- reading: every answer against the model -------------------------------------------------

async def _get(w: World, tenant: str, path: str, **params: Any) -> httpx.Response:
    query = {k: v.isoformat() if isinstance(v, datetime) else v for k, v in params.items()
             if v is not None}
    return await w.http.get(path, params=query, headers={TENANT_HEADER: tenant})


def _check_item(oracle: Oracle, answer: dict[str, Any], valid_at: datetime, position: int
                ) -> None:
    """An item as read at (``valid_at``, ``position``): the model's attributes and status,
    on a rectangle over which the model's answer is the same, known since a position from
    which the model's answer at ``valid_at`` has not changed."""
    item = answer["item_id"]
    expected = oracle.attrs_at(item, valid_at, position)
    assert expected is not None, f"{item} shown at {valid_at} as of {position}"
    assert answer["status"] == oracle.status_at(item, position)
    assert {k: answer[k] for k in ATTRIBUTES} == expected
    start = datetime.fromisoformat(answer["valid_from"])
    end = answer["valid_to"] and datetime.fromisoformat(answer["valid_to"])
    assert start <= valid_at
    assert end is None or valid_at < end
    for t in constant_over(oracle, start, end):
        assert oracle.attrs_at(item, t, position) == expected, f"not constant at {t}"
    since = answer["known_since_position"]
    positions = [e.position for e in oracle.of(item, position)]
    assert since in positions
    for p in (p for p in positions if p >= since):
        assert oracle.attrs_at(item, valid_at, p) == expected, f"changed at {p}"


async def _read_item(w: World, tenant: str, oracle: Oracle, item: UUID, valid_at: datetime,
                     position: int) -> str:
    """Read ``item``; return its status (``absent`` for a 404)."""
    response = await _get(w, tenant, f"/v1/spaces/{SPACE}/items/{item}", valid_at=valid_at,
                          as_of_position=position)
    present = oracle.attrs_at(str(item), valid_at, position) is not None
    assert response.status_code == (200 if present else 404), response.text
    if present:
        answer = ItemAnswer.model_validate_json(response.content)
        assert (answer.basis.position, answer.basis.valid_at) == (position, valid_at)
        _check_item(oracle, orjson.loads(answer.item.model_dump_json()), valid_at, position)
        return answer.item.status
    return "absent"


async def _read_list(w: World, tenant: str, oracle: Oracle, valid_at: datetime | None,
                     position: int | None, *, recorded_at: datetime | None = None,
                     include_archived: bool = False) -> int:
    """A listing (at the default position if neither ``position`` nor ``recorded_at``);
    return the position it was read at."""
    response = await _get(w, tenant, f"/v1/spaces/{SPACE}/items", valid_at=valid_at,
                          as_of_position=position, recorded_at=recorded_at,
                          include_archived=str(include_archived).lower())
    assert response.status_code == 200, response.text
    answer = ItemList.model_validate_json(response.content)
    at = answer.basis.position
    expected = oracle.listed(answer.basis.valid_at, at, include_archived)
    assert [i.item_id for i in answer.items] == sorted(expected)
    for found in answer.items:
        _check_item(oracle, orjson.loads(found.model_dump_json()), answer.basis.valid_at, at)
    return at


async def _read_history(w: World, tenant: str, oracle: Oracle, item: UUID, position: int
                        ) -> None:
    """History as of ``position``: the item's changes up to it, and the versions known then,
    which at every position up to it tile valid time exactly as the model says."""
    response = await _get(w, tenant, f"/v1/spaces/{SPACE}/items/{item}/history",
                          as_of_position=position)
    if str(item) not in oracle.status:
        assert response.status_code == 404, response.text
        return
    assert response.status_code == 200, response.text
    history = History.model_validate_json(response.content)
    assert history.basis.position == position
    _check_changes(history.changes, oracle.of(str(item), position))
    for q in {position, *(e.position for e in oracle.of(str(item), position))}:
        known = [v for v in history.versions
                 if v.sys_from <= q and (v.sys_to is None or q < v.sys_to)]
        for t in oracle.probes():
            holding = [v for v in known if v.valid_from <= t and (
                v.valid_to is None or t < v.valid_to)]
            expected = oracle.attrs_at(str(item), t, q)
            assert len(holding) == (expected is not None), (t, q, holding, expected)
            if expected is not None:
                assert {k: holding[0].attrs.get(k) for k in ATTRIBUTES} == expected, (t, q)


def _check_changes(found: list[Change], expected: list[Recorded]) -> None:
    assert [(f.position, f.recorded_at, f.event_type, f.subject, f.reason, f.valid_from,
             f.valid_to) for f in found] == [
        (e.position, e.recorded_at, e.planned.event_type, e.planned.subject,
         e.planned.reason, e.planned.valid_from, e.planned.valid_to) for e in expected]


async def _read_feed(w: World, tenant: str, oracle: Oracle, path: str, limit: int,
                     since: datetime | None) -> None:
    """The whole change feed, page by page from its cursors, then an empty page."""
    found: list[Change] = []
    cursor = None
    while True:
        response = await _get(w, tenant, path, after=cursor, limit=limit, since=since)
        assert response.status_code == 200, response.text
        page = response.json()
        found += [Change.model_validate(change) for change in page["changes"]]
        cursor = page["next_cursor"]
        if not page["changes"]:
            break
        assert len(page["changes"]) <= limit
    _check_changes(found, oracle.changes(since=since))


# --- the test ----------------------------------------------------------------------------------

@settings(max_examples=500, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
@given(operations=histories(), sizes=st.lists(st.integers(1, 6), min_size=1, max_size=4),
       rng=st.randoms())
async def test_every_read_agrees_with_an_independent_point_wise_model(
        world: World, operations: list[c.CommandBase], sizes: list[int],
        rng: random.Random) -> None:
    tenant = f"o{next(_tenants)}"
    oracle = await _history(world, tenant, operations)
    probes = oracle.probes()
    for checkpoint in _project_in_batches(world, sizes):
        if rng.random() < 0.5:  # what the latest position shows while the rest is pending
            at = await _read_list(world, tenant, oracle, rng.choice(probes), None,
                                  include_archived=True)
            assert at == checkpoint
    event(f"{len(oracle.events) // 4 * 4}+ events, smallest batch {min(sizes)}")
    await _probe(world, tenant, oracle, rng)


async def _probe(w: World, tenant: str, oracle: Oracle, rng: random.Random) -> None:
    first = oracle.events[0].position
    positions = [first - 1, *(e.position for e in oracle.events), w.side.position()]
    probes = oracle.probes()
    for _ in range(4):
        valid_at, position = rng.choice(probes), rng.choice(positions)
        event(f"item {await _read_item(w, tenant, oracle, rng.choice(ITEMS), valid_at, position)}")
        await _read_list(w, tenant, oracle, valid_at, position,
                         include_archived=rng.random() < 0.5)
    await _read_list(w, tenant, oracle, None, None)  # valid now, as of the latest
    recorded = rng.choice(oracle.events).recorded_at - timedelta(microseconds=rng.choice([0, 1]))
    at = await _read_list(w, tenant, oracle, rng.choice(probes), None, recorded_at=recorded,
                          include_archived=True)
    assert at == position_at(w.log, recorded)
    for item in ITEMS:
        await _read_history(w, tenant, oracle, item, rng.choice(positions[1:]))
    since = rng.choice([None, rng.choice(oracle.events).recorded_at])
    await _read_feed(w, tenant, oracle, f"/v1/spaces/{SPACE}/changes", rng.randint(2, 6), since)
    await _read_feed(w, tenant, oracle, "/v1/changes", 100, None)


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
    oracle = await _history(world, whole, history)
    list(_project_in_batches(world, [10]))
    await _read_list(world, whole, oracle, when, None)
    monkeypatch.setattr(store, "_current_versions", lambda *_: {})
    oracle = await _history(world, split, history)
    list(_project_in_batches(world, [1]))
    with pytest.raises(AssertionError, match="blue"):
        await _read_list(world, split, oracle, when, None)
