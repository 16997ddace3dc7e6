"""The ingest service stops within its grace period even while a commit is stuck: the stop
gives up on the commit, and the request waiting on it gets a retryable 503."""

import asyncio
from typing import Any

import httpx
import psycopg
from nats.aio.client import Client
from nats.js import JetStreamContext

from memledger_ingest.bootstrap import serve
from memledger_platform.endpoints import Endpoints
from memledger_platform.eventstore.postgres import EVENTS_TABLE, PostgresEventStore
from memledger_platform.settings import Settings
from memledger_schemas.subjects import Subjects
from tests.support import eventually

HANG_GUARD_SECONDS = 120.0
"""Only so that a stop that never finishes fails the test instead of hanging the run."""


def _settings(engines: Endpoints, schema: str, subjects: Subjects) -> Settings:
    # A commit deadline far past the grace period: only the stop can end the stuck commit.
    return Settings(mode="distributed", postgres_dsn=engines.postgres_dsn,
                    nats_url=engines.nats_url, postgres_schema=schema,
                    nats_prefix=subjects.prefix, http_port=0, grpc_port=0, auth="off",
                    default_tenant="acme", stop_grace_seconds=2.0,
                    writer_commit_timeout_seconds=25.0, http_request_timeout_seconds=30.0)


async def _waiting_on_a_lock(conn: psycopg.AsyncConnection[Any]) -> None:
    cursor = await conn.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
    row = await cursor.fetchone()
    assert row is not None
    assert row[0] > 0


async def test_a_stop_gives_up_on_a_stuck_commit_within_the_grace_period(
        engines: Endpoints, pg_schema: str, subjects: Subjects,
        nats_js: tuple[Client, JetStreamContext], event_store: PostgresEventStore) -> None:
    stop, ready = asyncio.Event(), asyncio.get_running_loop().create_future()
    service = asyncio.create_task(serve(_settings(engines, pg_schema, subjects), engines, stop,
                                        on_ready=ready.set_result))
    url = await asyncio.wait_for(ready, HANG_GUARD_SECONDS)
    async with httpx.AsyncClient(base_url=url, timeout=None) as api, \
            await psycopg.AsyncConnection.connect(engines.postgres_dsn) as other:
        assert (await api.post("/v1/spaces", json={"space_id": "s1"})).status_code == 201
        await other.execute(f'LOCK TABLE "{pg_schema}".{EVENTS_TABLE} IN EXCLUSIVE MODE')
        stuck = asyncio.create_task(api.post("/v1/spaces/s1/memories",
                                             json={"kind": "fact", "content": "stuck"}))
        await eventually(lambda: _waiting_on_a_lock(other))

        stop.set()
        await asyncio.wait_for(service, HANG_GUARD_SECONDS)
        response = await stuck
        await other.rollback()

    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "stopping"
    assert not [e for e in event_store.read_all(0, 100) if b"stuck" in e.data]
