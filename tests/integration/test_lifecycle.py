"""The lifecycle scheduler on the real engines: it folds the events stream, and at a tick
sends ingest what the policy and consolidation decide; the read models then show it, and a
restarted scheduler decides the same and writes nothing twice."""

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from memledger_ingest.core.writer import GroupCommitWriter
from memledger_lifecycle.fold import fold
from memledger_lifecycle.scheduler import Scheduler
from memledger_platform.clock import FixedClock, SystemClock
from memledger_platform.embedding.embedder import Embedder, HashingEmbedder
from memledger_platform.endpoints import Endpoints
from memledger_platform.events import decode
from memledger_platform.eventstore.postgres import PostgresEventStore
from memledger_platform.intake_client import IntakeClient
from memledger_schemas import commands as c
from memledger_schemas.subjects import Subjects
from tests.integration.events_support import read_everything
from tests.integration.semantic_support import Pipeline, pipeline, write
from tests.support import eventually, holds

Nats = tuple[Client, JetStreamContext]


@pytest.fixture
async def running(engines: Endpoints, event_store: PostgresEventStore, pg_schema: str,
                  nats_js: Nats, subjects: Subjects, writer: GroupCommitWriter,
                  tmp_path: Path) -> AsyncIterator[Pipeline]:
    embedder: Embedder = HashingEmbedder()
    async with pipeline(engines.postgres_dsn, event_store, pg_schema, nats_js, subjects,
                        writer, embedder, tmp_path / "vectors") as found:
        yield found



async def _scheduled(nats_js: Nats, subjects: Subjects, clock: FixedClock
                     ) -> AsyncGenerator[Scheduler, None]:
    nc, js = nats_js
    intake = IntakeClient(nc, js, subjects, "lifecycle", timeout_seconds=20)
    await intake.start()
    scheduler = Scheduler(js, subjects, intake, interval_seconds=3600, clock=clock)
    stop = asyncio.Event()
    task = asyncio.create_task(scheduler.run(stop))
    try:
        yield scheduler
    finally:
        stop.set()
        await task
        await intake.close()


async def test_expiry_and_consolidation_are_events_with_their_policy_and_happen_once(
        running: Pipeline, nats_js: Nats, subjects: Subjects,
        event_store: PostgresEventStore) -> None:
    await write(running, c.CreateSpace(space_id="main"))
    await write(running, c.SetSpacePolicy(space_id="main", session_ttl_seconds=1800,
                                           consolidation="merge", merge_cosine=0.99))
    session = (await write(running, c.StartSession(space_id="main")))["session_id"]
    said = await write(running, c.AssertMemory(space_id="main", session_id=session,
                                                kind="observation", content="user seems tired"))
    first = await write(running, c.AssertMemory(space_id="main", kind="fact",
                                                 content="the build needs Python 3.11"))
    again = await write(running, c.AssertMemory(space_id="main", kind="fact",
                                                 content="the build needs Python 3.11"))
    ended = await write(running, c.EndSession(space_id="main", session_id=session))
    clock = FixedClock(SystemClock().now() + timedelta(hours=1))

    scheduling = _scheduled(nats_js, subjects, clock)
    scheduler = await anext(scheduling)
    try:
        async def decided() -> bool:
            # both embeddings folded (the enricher runs meanwhile), then one tick
            if not scheduler.caught_up or len([
                    i for i in scheduler.fold.items.values() if i.vector is not None]) < 3:
                return False
            await scheduler.tick()
            return scheduler.tally.archived == 1 and scheduler.tally.merged == 1
        await eventually(holds(decided), timeout=30)
    finally:
        await scheduling.aclose()

    async with running.client("acme") as client:
        async def listed() -> list[str] | None:
            response = await client.get("/v1/spaces/main/items", params={
                "min_position": ended["position"]})
            ids = [i["item_id"] for i in response.json()["items"]]
            return ids if len(ids) == 1 else None
        assert await eventually(holds(listed), timeout=30) == [first["item_id"]]
        history = (await client.get(f"/v1/spaces/main/items/{said['item_id']}/history")).json()
    archived = [ch for ch in history["changes"] if ch["event_type"] == "memory.archived"]
    assert [(ch["payload"]["policy_version"], ch["actor"]) for ch in archived] == [
        (1, "memledger:lifecycle")]
    assert "session memory expired" in archived[0]["reason"]

    events = read_everything(event_store)
    merged = [e.fields()["payload"] for e in events if e.event_type == "memory.merged"]
    assert [(m["item_id"], m["merged_item_ids"]) for m in merged] == [
        (first["item_id"], [again["item_id"]])]

    # A restart folds the log again: the same clock decides nothing new, writes nothing.
    written = len(events)
    restarted = _scheduled(nats_js, subjects, clock)
    scheduler = await anext(restarted)
    try:
        await eventually(holds(lambda: _true(
            scheduler.caught_up and scheduler.fold.position >= ended["position"])), timeout=30)
        await scheduler.tick()
    finally:
        await restarted.aclose()
    assert (scheduler.tally.archived, scheduler.tally.merged, scheduler.tally.refused) == (0, 0, 0)
    assert len(read_everything(event_store)) == written

    # Replay-safe: the stored log, folded from scratch at the same clock, decides the same.
    # (The log up to the session's end: what the first scheduler decided on.)
    replayed = fold(decode(_document(e)) for e in read_everything(event_store)
                    if e.position <= ended["position"])
    assert [(a.item_id, a.rule) for a in replayed.archives(clock.now())] == [
        (said["item_id"], "ttl")]


async def _true(value: bool) -> bool:
    return value


def _document(event: Any) -> dict[str, Any]:
    document: dict[str, Any] = orjson.loads(event.document())
    return document
