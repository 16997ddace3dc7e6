"""A world with its doors locked, for fuzzing: API keys required (tenants acme and globex),
personal data sealed, the whole pipeline on the real engines with the real Qdrant Edge index,
and ingest and query served together on a real socket behind the request limits, as
``memledger up`` serves them. Populated with several spaces, items with versions, sessions,
messages, entities, relations and feedback."""

import asyncio
import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import httpx
import psycopg
from psycopg_pool import ConnectionPool
from starlette.types import ASGIApp

from memledger_ingest.core.writer import GroupCommitWriter
from memledger_ingest.entrypoints.http import behind
from memledger_platform import bus, http_server
from memledger_platform.auth import Gate, issue
from memledger_platform.auth_postgres import PostgresKeyStore
from memledger_platform.clock import SystemClock
from memledger_platform.embedding.embedder import HashingEmbedder
from memledger_platform.endpoints import Endpoints
from memledger_platform.eventstore.postgres import PostgresEventStore, datastore_from_dsn
from memledger_platform.keyring_postgres import PostgresKeyring
from memledger_platform.limits import RequestLimits
from memledger_query.entrypoints import forming_http, lifecycle_http
from memledger_schemas.subjects import Subjects
from tests.integration.ingest_support import running
from tests.integration.read_support import drop_read_models
from tests.integration.semantic_support import Pipeline, pipeline
from tests.support import delete_streams, eventually

MAX_BODY = 1024 * 1024
"""The test server's ``MEMLEDGER_HTTP_MAX_BODY_BYTES`` (the default, 32 MiB, would make the
bodies near it slow to build and send)."""
REQUEST_SECONDS = 120.0
"""The test server's ``MEMLEDGER_HTTP_REQUEST_TIMEOUT_SECONDS``: generous, so a slow answer
is told apart from one that never comes (504)."""
SPACES = ("main", "notes", "travel")
GLOBEX_SECRET = "globex-private-marmot-5150"
"""Only tenant globex ever writes it: no answer to acme's key may hold it."""


@dataclass
class Locked:
    url: str
    """Ingest and query, on one port."""
    key: str
    """acme's admin key (the whole tenant)."""
    pipeline: Pipeline
    store: PostgresEventStore
    items: list[str]
    sessions: list[str]
    position: int
    """The log position every populated write is at or before."""

    def client(self, key: str | None = None, url: str | None = None) -> httpx.AsyncClient:
        """A client with ``key`` (acme's by default) of the world's server (or ``url``)."""
        return httpx.AsyncClient(base_url=url or self.url, timeout=REQUEST_SECONDS + 30,
                                 headers={"authorization": f"Bearer {key or self.key}"})


@asynccontextmanager
async def locked_world(engines: Endpoints, vectors: Path) -> AsyncIterator[Locked]:
    """The world, on a schema and streams of its own (dropped afterwards)."""
    schema, subjects = f"t_{uuid.uuid4().hex[:12]}", Subjects(f"t{uuid.uuid4().hex[:10]}")
    store = PostgresEventStore(datastore_from_dsn(engines.postgres_dsn, schema=schema))
    store.create_tables()
    nc = await bus.connect(engines.nats_url, "memledger-test")
    js = nc.jetstream()
    await bus.ensure_streams(js, subjects)
    try:
        with ConnectionPool(engines.postgres_dsn, min_size=1, max_size=4, open=True,
                            kwargs={"autocommit": True}) as pool:
            keys = PostgresKeyStore(pool, schema)
            acme, globex = _keys(keys)
            keyring = PostgresKeyring(pool, os.urandom(32), schema)
            async with running(GroupCommitWriter(store, keyring=keyring)) as writer, \
                    pipeline(engines.postgres_dsn, store, schema, (nc, js), subjects, writer,
                             HashingEmbedder(), vectors, Gate(keys, None), keyring) as p:
                app = _together(p)
                async with _served(app, MAX_BODY) as url:
                    world = Locked(url, acme, p, store, [], [], 0)
                    await _populate(world, globex)
                    yield world
    finally:
        await _drop(engines.postgres_dsn, schema, store, js, subjects)
        await nc.close()


def _keys(keys: PostgresKeyStore) -> tuple[str, str]:
    now = datetime.now(UTC)
    for tenant in ("acme", "globex"):
        keys.create_tenant(tenant)
    return (issue(keys, "acme", "admin", None, now)[1],
            issue(keys, "globex", "admin", None, now)[1])


def _together(p: Pipeline) -> ASGIApp:
    """Ingest's routes with the query app mounted behind them, as the embedded mode has them."""
    p.app.include_router(lifecycle_http.router(p.reader, SystemClock()))
    p.app.include_router(forming_http.router(p.reader, SystemClock()))
    behind(p.ingest_app, p.app)
    return cast(ASGIApp, p.ingest_app)


@asynccontextmanager
async def _served(app: ASGIApp, max_body: int) -> AsyncIterator[str]:
    """``app`` behind the request limits (``max_body`` bytes), on a port of its own: its URL."""
    limited = RequestLimits(app, max_body_bytes=max_body, timeout_seconds=REQUEST_SECONDS)
    sock = http_server.bind("127.0.0.1", 0, fallback=0, setting="MEMLEDGER_HTTP_PORT")
    stop = asyncio.Event()
    server = asyncio.create_task(http_server.serve(limited, sock, stop))
    try:
        yield http_server.address(sock)
    finally:
        stop.set()
        await server


async def _drop(dsn: str, schema: str, store: PostgresEventStore, js: Any,
                subjects: Subjects) -> None:
    await delete_streams(js, subjects)
    store.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        drop_read_models(conn, schema)
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


async def _populate(world: Locked, globex_key: str) -> None:
    async with world.client() as api:
        for space in SPACES:
            await _ok(api.post("/v1/spaces", json={"space_id": space, "name": space.title()}))
            await _space(world, api, space)
    async with world.client(globex_key) as api:
        await _ok(api.post("/v1/spaces", json={"space_id": "main"}))
        last = await _ok(api.post("/v1/spaces/main/memories", json={
            "kind": "fact", "content": f"the vault code is {GLOBEX_SECRET}",
            "tags": [GLOBEX_SECRET]}))
    world.position = max(world.position, last["position"])
    await eventually(lambda: _searchable(world), timeout=60, interval=0.2)


FACTS = ["Ana prefers window seats on long flights", "The deploy runs every Tuesday at 9",
         "Bruno is allergic to peanuts", "The staging database is called orca-2",
         "Meetings with the design team are in room Pine", "Ana's manager is Kofi",
         "Invoices are due on the 5th of each month", "The VPN needs a hardware key"]


async def _space(world: Locked, api: httpx.AsyncClient, space: str) -> None:
    """Eight memories (kinds, tags, subjects), three revised (one twice), one superseded,
    one retracted; two sessions of four messages; two entities and a relation; feedback."""
    base = f"/v1/spaces/{space}"
    items = []
    for n, fact in enumerate(FACTS):
        written = await _ok(api.post(f"{base}/memories", json={
            "kind": ("fact", "preference", "observation", "decision")[n % 4],
            "content": f"{fact} ({space})", "tags": [space, f"t{n % 3}"],
            "subject_id": f"u{n % 3}", "importance": round(0.1 * (n + 1), 1)}))
        items.append(written["ids"]["item_id"])
    for n, item in enumerate(items[:3]):
        for version in range(2 if n == 0 else 1):
            await _ok(api.post(f"{base}/memories/{item}/revise", json={
                "content": f"{FACTS[n]}, revised {version + 1} ({space})",
                "reason": "corrected by the user"}))
    await _ok(api.post(f"{base}/memories/{items[3]}/supersede", json={
        "superseded_by": items[4], "reason": "newer"}))
    await _ok(api.post(f"{base}/memories/{items[5]}/retract", json={"reason": "wrong"}))
    for session_no in range(2):
        session = (await _ok(api.post(f"{base}/sessions", json={
            "title": f"planning {session_no}", "subject_id": "u1"})))["ids"]["session_id"]
        world.sessions.append(session)
        for turn in range(4):
            await _ok(api.post(f"{base}/sessions/{session}/messages", json={
                "role": ("user", "assistant")[turn % 2], "content": f"turn {turn} of {space}"}))
    for entity, name in (("ana", "Ana"), ("kofi", "Kofi")):
        await _ok(api.post(f"{base}/entities", json={"entity_id": entity, "name": name,
                                                      "type": "person"}))
    await _ok(api.post(f"{base}/relations", json={
        "source_entity": "ana", "relation_type": "reports_to", "target_entity": "kofi"}))
    last = await _ok(api.post(f"{base}/feedback", json={
        "item_id": items[0], "signal": "rating", "rating": 4, "comment": "useful"}))
    world.items += items
    world.position = max(world.position, last["position"])


async def _searchable(world: Locked) -> None:
    """The vector index has every populated write (a search waits for none)."""
    assert world.pipeline.vectors.position >= world.position
    async with world.client() as api:
        answer = await api.post("/v1/search", json={"query": FACTS[2], "spaces": ["main"],
                                                     "wait_ms": 0})
    assert answer.status_code == 200, answer.text
    assert "peanuts" in answer.text, answer.text


async def _ok(call: Any) -> dict[str, Any]:
    response: httpx.Response = await call
    assert response.status_code in (200, 201), response.text
    body: dict[str, Any] = response.json()
    return body
