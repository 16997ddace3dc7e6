"""Misuse of a deployment: two relays, two projectors or two vectors services on one stream,
and a replica pointed at the wrong database or stream."""

import asyncio
import logging
import subprocess
import sys
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from uuid import uuid4

import pytest
from nats.js import JetStreamContext

from memledger_ingest.core.writer import GroupCommitWriter
from memledger_platform import deployment
from memledger_platform.endpoints import Endpoints
from memledger_platform.eventstore.postgres import PostgresEventStore
from memledger_platform.settings import Settings, load_settings
from memledger_projector.bootstrap import serve as serve_projector
from memledger_relay.bootstrap import serve as serve_relay
from memledger_schemas import commands as c
from memledger_schemas.subjects import HDR_MSG_ID, Subjects
from memledger_vectors.bootstrap import serve as serve_vectors
from tests.integration.events_support import envelope
from tests.integration.nats_support import stream_messages
from tests.integration.read_support import SPACE, ReadSide, write
from tests.support import eventually


def _settings(schema: str, subjects: Subjects) -> Settings:
    return load_settings(mode="distributed", postgres_schema=schema,
                         nats_prefix=subjects.prefix, relay_poll_seconds=0.1,
                         postgres_dsn="postgresql://unused", nats_url="nats://unused:1")


async def _published_once(js: JetStreamContext, subjects: Subjects, count: int) -> None:
    messages = await stream_messages(js, subjects.events_stream, subjects.all_events)
    ids = Counter((m.headers or {}).get(HDR_MSG_ID) for m in messages)
    assert sum(ids.values()) == count, sum(ids.values())
    assert max(ids.values()) == 1


async def test_a_second_relay_on_the_same_stream_stands_by_naming_the_first_and_takes_over(
        engines: Endpoints, event_store: PostgresEventStore, pg_schema: str,
        subjects: Subjects, nats_js: tuple[object, JetStreamContext],
        caplog: pytest.LogCaptureFixture) -> None:
    _, js = nats_js
    settings = _settings(pg_schema, subjects)
    first_stop, second_stop = asyncio.Event(), asyncio.Event()
    first = asyncio.create_task(serve_relay(settings, engines, first_stop))
    event_store.append([envelope(uuid4(), 1) for _ in range(5)])
    await eventually(lambda: _published_once(js, subjects, 5), timeout=20)
    with caplog.at_level(logging.WARNING, logger="memledger_platform.lease"):
        second = asyncio.create_task(serve_relay(settings, engines, second_stop))

        async def told() -> None:
            assert any("memledger-relay" in r.getMessage() and "holds its lease" in
                       r.getMessage() for r in caplog.records), caplog.text
        await eventually(told, timeout=20)
    event_store.append([envelope(uuid4(), 1) for _ in range(5)])
    await eventually(lambda: _published_once(js, subjects, 10), timeout=20)

    first_stop.set()
    await first
    event_store.append([envelope(uuid4(), 1) for _ in range(5)])
    await eventually(lambda: _published_once(js, subjects, 15), timeout=30)
    second_stop.set()
    await second


def _told(caplog: pytest.LogCaptureFixture, *parts: str) -> Callable[[], Awaitable[None]]:
    async def told() -> None:
        assert any(all(p in r.getMessage() for p in parts) for r in caplog.records), caplog.text
    return told


async def test_a_second_projector_on_the_same_stream_stands_by_naming_the_first_and_takes_over(
        engines: Endpoints, writer: GroupCommitWriter, side: ReadSide, pg_schema: str,
        subjects: Subjects, caplog: pytest.LogCaptureFixture) -> None:
    settings = _settings(pg_schema, subjects)
    dsn, url = engines.postgres_dsn, engines.nats_url
    relay_stop, first_stop, second_stop = asyncio.Event(), asyncio.Event(), asyncio.Event()
    relay = asyncio.create_task(serve_relay(settings, engines, relay_stop))
    first = asyncio.create_task(serve_projector(settings, dsn, url, first_stop))
    await write(writer, c.CreateSpace(space_id=SPACE))

    async def projected(content: str) -> None:
        done = await write(writer, c.AssertMemory(space_id=SPACE, kind="fact", content=content))

        async def reached() -> None:
            assert side.position() >= done.position
        await eventually(reached, timeout=30)

    await projected("before the second projector")
    with caplog.at_level(logging.WARNING, logger="memledger_platform.lease"):
        second = asyncio.create_task(serve_projector(settings, dsn, url, second_stop))
        await eventually(_told(caplog, "another projector works on", "memledger-projector",
                               "holds its lease"), timeout=30)
        await projected("while the second stands by")
        first_stop.set()
        await first
        await projected("after the first stopped")  # the second took over
    second_stop.set()
    relay_stop.set()
    await asyncio.gather(second, relay)


async def test_a_second_vectors_service_on_the_same_index_stands_by_and_takes_over(
        engines: Endpoints, pg_schema: str, subjects: Subjects, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    settings = _settings(pg_schema, subjects).model_copy(update={
        "home": tmp_path, "embedder": "hashing"})
    dsn, url = engines.postgres_dsn, engines.nats_url
    first_stop, second_stop = asyncio.Event(), asyncio.Event()
    with caplog.at_level(logging.INFO, logger="memledger_platform.lease"):
        first = asyncio.create_task(serve_vectors(settings, dsn, url, first_stop))
        await eventually(_told(caplog, "vectors holds the lease"), timeout=60)
        second = asyncio.create_task(serve_vectors(settings, dsn, url, second_stop))
        await eventually(_told(caplog, "another vectors works on", "memledger-vectors",
                               "holds its lease"), timeout=30)
        assert not second.done()
        first_stop.set()
        await first
        await eventually(lambda: _held_twice(caplog), timeout=60)
    second_stop.set()
    await second


async def _held_twice(caplog: pytest.LogCaptureFixture) -> None:
    held = [r for r in caplog.records if "vectors holds the lease" in r.getMessage()]
    assert len(held) == 2, caplog.text


def _start_replica(service: str, engines: Endpoints, schema: str, subjects: Subjects
                   ) -> subprocess.CompletedProcess[str]:
    env = {"MEMLEDGER_MODE": "distributed", "MEMLEDGER_POSTGRES_DSN": engines.postgres_dsn,
           "MEMLEDGER_NATS_URL": engines.nats_url, "MEMLEDGER_POSTGRES_SCHEMA": schema,
           "MEMLEDGER_NATS_PREFIX": subjects.prefix, "MEMLEDGER_EMBEDDER": "hashing",
           "MEMLEDGER_HTTP_PORT": "0", "MEMLEDGER_GRPC_PORT": "0", "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "memledger_cli", service], env=env,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture
async def bound(engines: Endpoints, pg_schema: str, subjects: Subjects) -> str:
    """This test's event store and events stream, bound to each other."""
    return await deployment.check(_settings(pg_schema, subjects), engines.postgres_dsn,
                                  engines.nats_url)


@pytest.mark.parametrize("service", ["relay", "ingest", "vectors"])
async def test_a_replica_pointed_at_another_database_says_so_and_exits_non_zero(
        engines: Endpoints, subjects: Subjects, bound: str, service: str) -> None:
    other = f"t_{uuid4().hex[:12]}"
    try:
        done = await asyncio.to_thread(_start_replica, service, engines, other, subjects)
    finally:
        await asyncio.to_thread(_drop, engines, other)

    assert done.returncode != 0
    assert f"the events stream {subjects.events_stream!r} belongs to deployment {bound}" in (
        done.stderr), done.stderr[-2000:]
    assert "MEMLEDGER_POSTGRES_DSN" in done.stderr


@pytest.mark.parametrize("service", ["projector", "query", "vectors"])
async def test_a_replica_pointed_at_another_stream_says_so_and_exits_non_zero(
        engines: Endpoints, pg_schema: str, subjects: Subjects, bound: str,
        service: str) -> None:
    other = Subjects(prefix=f"t{uuid4().hex[:10]}")

    done = await asyncio.to_thread(_start_replica, service, engines, pg_schema, other)

    assert done.returncode != 0
    assert (f"is relayed to the events stream {subjects.events_stream!r}, not to "
            f"{other.events_stream!r}") in done.stderr, done.stderr[-2000:]


async def test_the_same_database_and_stream_are_bound_once_and_stay_bound(
        engines: Endpoints, pg_schema: str, subjects: Subjects, bound: str,
        nats_js: tuple[object, JetStreamContext]) -> None:
    _, js = nats_js
    again = await deployment.check(_settings(pg_schema, subjects), engines.postgres_dsn,
                                   engines.nats_url)

    assert again == bound
    info = await js.stream_info(subjects.events_stream)
    assert (info.config.metadata or {})[deployment.METADATA_KEY] == bound


def _drop(engines: Endpoints, schema: str) -> None:
    import psycopg
    with psycopg.connect(engines.postgres_dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
