"""Large writes within the request limits commit in bounded time over the real event store,
and a commit held up past its deadline is given up on: neither stops the writer for anyone
else."""

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any
from uuid import uuid4

import httpx
import psycopg
import pytest

from memledger_ingest.core.writer import GroupCommitWriter, WriterLimits
from memledger_ingest.entrypoints.http import create_app
from memledger_platform.auth import TENANT_HEADER
from memledger_platform.endpoints import Endpoints
from memledger_platform.eventstore.postgres import EVENTS_TABLE, PostgresEventStore

TEXT = "x" * 60_000
"""60 KB: close to the 64 KiB limit of one content or query field."""

HANG_GUARD_SECONDS = 240.0
"""Only so that a wedged writer fails the test instead of hanging the run (not a timing
assertion: a healthy commit takes a small fraction of it)."""


async def _healthy() -> dict[str, Any]:
    return {"status": "ok"}


@asynccontextmanager
async def serving(store: PostgresEventStore, limits: WriterLimits | None = None
                  ) -> AsyncIterator[tuple[httpx.AsyncClient, GroupCommitWriter]]:
    """The ingest HTTP API over a running writer, with space ``s1`` in two tenants."""
    writer = GroupCommitWriter(store, limits=limits or WriterLimits())
    writer.start()
    app = create_app(writer, _healthy, "default")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test",
                                 timeout=None) as client:
        for tenant in ("default", "other"):
            response = await client.post("/v1/spaces", json={"space_id": "s1"},
                                         headers={TENANT_HEADER: tenant})
            assert response.status_code == 201, response.text
        yield client, writer
    writer.stop()


@pytest.fixture
async def api(event_store: PostgresEventStore) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(event_store) as (client, _):
        yield client


@contextmanager
def events_table_locked(dsn: str, schema: str) -> Iterator[None]:
    """Another client holds the lock a commit needs, until the block ends."""
    with psycopg.connect(dsn) as conn:
        conn.execute(f'LOCK TABLE "{schema}".{EVENTS_TABLE} IN EXCLUSIVE MODE')
        yield
        conn.rollback()


def _memory(i: int) -> dict[str, Any]:
    return {"command": "assert_memory", "space_id": "s1", "kind": "fact",
            "content": f"{i} {TEXT}"}


def _retrieval(i: int) -> dict[str, Any]:
    return {"command": "record_retrieval", "retrieval_id": str(uuid4()), "operation": "search",
            "query": f"{i} {TEXT}", "spaces": ["s1"], "policy_version": "1",
            "basis": {"position": 0, "recorded_at": None,
                      "valid_at": "2026-01-01T00:00:00Z"}}


@pytest.mark.parametrize(("count", "command"), [(400, _memory), (150, _retrieval)],
                         ids=["400 memories", "150 retrievals"])
async def test_a_batch_of_commands_with_60_kb_texts_commits_and_other_tenants_still_write(
        api: httpx.AsyncClient, event_store: PostgresEventStore, count: int,
        command: Callable[[int], dict[str, Any]]) -> None:
    batch = {"commands": [command(i) for i in range(count)]}
    response = await asyncio.wait_for(api.post("/v1/batch", json=batch), HANG_GUARD_SECONDS)
    assert response.status_code == 201, response.text[:500]
    assert len(response.json()["results"]) == count
    other = await asyncio.wait_for(api.post(
        "/v1/spaces/s1/memories", json={"kind": "fact", "content": "still writable"},
        headers={TENANT_HEADER: "other"}), HANG_GUARD_SECONDS)
    assert other.status_code == 201, other.text
    assert other.json()["position"] == event_store.max_position()


async def test_a_commit_held_up_past_its_deadline_gets_a_retryable_503_and_the_writer_recovers(
        engines: Endpoints, pg_schema: str, event_store: PostgresEventStore) -> None:
    limits = WriterLimits(commit_timeout_seconds=1.0)
    async with serving(event_store, limits) as (api, writer):
        with events_table_locked(engines.postgres_dsn, pg_schema):
            held = await asyncio.wait_for(api.post(
                "/v1/spaces/s1/memories", json={"kind": "fact", "content": "held up"}),
                HANG_GUARD_SECONDS)
        later = await api.post("/v1/spaces/s1/memories", json={"kind": "fact", "content": "ok"},
                               headers={TENANT_HEADER: "other"})

        assert writer.state()["commits_timed_out"] == 1
    assert held.status_code == 503, held.text
    assert held.json()["error"]["code"] == "commit_timeout"
    assert held.headers["retry-after"] == "1"
    assert later.status_code == 201, later.text
    assert not [e for e in event_store.read_all(0, 100) if b"held up" in e.data]
