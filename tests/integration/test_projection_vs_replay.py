"""Differential test: the PostgreSQL read models answer every as-of question exactly as a
replay of the events does (the replay path is the oracle)."""

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from uuid import UUID, uuid4

import orjson
import psycopg
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from memledger_ingest.core.writer import GroupCommitWriter, Rejected
from memledger_platform.endpoints import Endpoints
from memledger_platform.events import decode
from memledger_platform.eventstore.postgres import PostgresEventStore
from memledger_platform.readmodel import schema
from memledger_platform.readmodel.checkpoint import read_checkpoint
from memledger_projector.core import store
from memledger_query.core import replay, views
from memledger_schemas import commands as c
from memledger_schemas.api.reads import Basis

SPACE = "s"
ITEMS = [UUID(int=i + 1) for i in range(3)]
INSTANTS = [datetime(y, 1, 1, tzinfo=UTC) for y in (2019, 2020, 2021, 2022, 2023, 2024)]
_tenants = itertools.count()

# Mostly explicit instants: an absent valid_from means "from the recording time" (now), after
# every probe but the last two.
maybe_instant = st.sampled_from([*INSTANTS, None])
PROBES = [*INSTANTS, datetime(2027, 1, 1, tzinfo=UTC), datetime(2030, 1, 1, tzinfo=UTC)]


@st.composite
def interval(draw: st.DrawFn) -> tuple[datetime | None, datetime | None]:
    start, end = draw(maybe_instant), draw(maybe_instant)
    if start and end and end <= start:
        start, end = end, start if end < start else None
    return start, end


@st.composite
def operation(draw: st.DrawFn) -> c.CommandBase:
    item = draw(st.sampled_from(ITEMS))
    kind = draw(st.sampled_from(["assert", "revise", "retract", "supersede", "archive"]))
    start, end = draw(interval())
    text = draw(st.sampled_from(["red", "green", "blue", "grey"]))
    if kind == "assert":
        return c.AssertMemory(space_id=SPACE, item_id=item, kind="fact", content=text,
                              tags=(text,), valid_from=start, valid_to=end)
    if kind == "revise":
        return c.ReviseMemory(space_id=SPACE, item_id=item, content=text, valid_from=start,
                              valid_to=end, reason="correction")
    if kind == "retract":
        return c.RetractMemory(space_id=SPACE, item_id=item, valid_until=draw(maybe_instant))
    if kind == "supersede":
        other = draw(st.sampled_from([i for i in ITEMS if i != item]))
        return c.SupersedeMemory(space_id=SPACE, item_id=item, superseded_by=other,
                                 reason="newer")
    return c.ArchiveMemory(space_id=SPACE, item_id=item, reason="policy")


@pytest.fixture(scope="module")
def world(engines: Endpoints) -> Iterator[tuple[PostgresEventStore, psycopg.Connection[Any],
                                                 schema.Names]]:
    """One event store and one projection for every example; each example is its own tenant."""
    from memledger_platform.eventstore.postgres import datastore_from_dsn

    base = f"diff_{uuid4().hex[:8]}"
    event_store = PostgresEventStore(datastore_from_dsn(engines.postgres_dsn, schema=base))
    event_store.create_tables()
    with psycopg.connect(engines.postgres_dsn, autocommit=True) as conn:
        names = schema.Names(base)
        schema.ensure_pointer(conn, names)
        yield event_store, conn, names
        conn.execute(f'DROP SCHEMA "{base}" CASCADE')
        conn.execute(f'DROP SCHEMA "{names.schema(1)}" CASCADE')
    event_store.close()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.data_too_large])
@given(operations=st.lists(operation(), min_size=1, max_size=10),
       probes=st.lists(st.tuples(st.sampled_from(PROBES), st.floats(0, 1)), min_size=1,
                       max_size=6))
async def test_the_projection_answers_every_as_of_question_like_a_replay(
        world: tuple[PostgresEventStore, psycopg.Connection[Any], schema.Names],
        operations: list[c.CommandBase], probes: list[tuple[datetime, float]]) -> None:
    event_store, conn, names = world
    tenant = f"t{next(_tenants)}"
    positions = await _write(event_store, tenant, operations)
    _project(event_store, conn, names)
    oracle = replay.fold(event_store, tenant)
    s = names.schema(schema.live_version(conn, names))
    for valid_at, fraction in probes:
        position = positions[int(fraction * (len(positions) - 1))] if positions else 0
        at = Basis(position=position, recorded_at=None, valid_at=valid_at)
        for item in ITEMS:
            answer = views.item(conn, s, tenant, SPACE, str(item), at)
            assert answer == replay.item(oracle, tenant, SPACE, str(item), at)
            event("item found" if answer else "item absent")
            if answer:
                event(f"status {answer.status}")
        assert views.items(conn, s, tenant, SPACE, at) == replay.items(oracle, tenant, SPACE, at)
        archived_too = views.ItemFilters(include_archived=True)
        assert views.items(conn, s, tenant, SPACE, at, archived_too) == replay.items(
            oracle, tenant, SPACE, at, include_archived=True)


async def _write(event_store: PostgresEventStore, tenant: str,
                 operations: list[c.CommandBase]) -> list[int]:
    writer = GroupCommitWriter(event_store)
    writer.start()
    positions = []
    try:
        await writer.submit(tenant, [c.CreateSpace(space_id=SPACE)])
        for command in operations:
            try:
                positions.append((await writer.submit(tenant, [command]))[0].position)
            except Rejected:
                continue
    finally:
        writer.stop()
    return positions


def _project(event_store: PostgresEventStore, conn: psycopg.Connection[Any],
             names: schema.Names) -> None:
    s = names.schema(schema.live_version(conn, names))
    after = read_checkpoint(conn, s).position
    events = event_store.read_all(after, 10_000)
    store.apply_batch(conn, names, [decode(orjson.loads(e.document())) for e in events])
