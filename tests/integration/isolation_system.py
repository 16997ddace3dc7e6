"""A whole memledger with API keys on, in this process: every service's own ``serve`` (ingest
with the query API mounted behind it and both gRPC services, the relay, the projector, the
enricher and the vector projector), as ``memledger up`` composes them, over real sockets; and
two tenants' worth of data written into it: a victim with two spaces full of everything a
route can address, and an attacker with data of its own."""

import asyncio
import base64
import contextlib
import os
import re
import uuid
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg_pool import ConnectionPool
from pydantic import SecretStr

from memledger_enricher import bootstrap as enricher
from memledger_ingest import bootstrap as ingest
from memledger_ingest.core.erasure import Erasure
from memledger_ingest.core.writer import GroupCommitWriter
from memledger_ingest.entrypoints import http as ingest_http
from memledger_platform.auth import Role, issue
from memledger_platform.auth_postgres import PostgresKeyStore
from memledger_platform.crypto import Keyring
from memledger_platform.endpoints import Endpoints
from memledger_platform.engines import free_port
from memledger_platform.eventstore.postgres import PostgresEventStore, datastore_from_dsn
from memledger_platform.keyring_postgres import keyring_for
from memledger_platform.settings import Settings
from memledger_projector import bootstrap as projector
from memledger_query import bootstrap as query
from memledger_relay import bootstrap as relay
from memledger_schemas import commands as c
from memledger_schemas.events import ExtractedEntity, Member, Triple
from memledger_vectors import bootstrap as vectors
from tests.integration.read_support import drop_read_models
from tests.support import eventually, flat_routes

VICTIM, ATTACKER, GRPC_ATTACKER = "acme", "globex", "initech"
"""The victim, and two others (one per API: writes made over HTTP with the victim's ids would
leave the attacker's tenant holding them, and the same writes over gRPC would then conflict
with those rather than reach the ids)."""
SPACES = ("main", f"side-{uuid.uuid4().hex[:8]}")
"""The victim's spaces: "main", which each attacker has too (the same name in another tenant),
and one whose very name only the victim has (a key granted "main" alone must never see it)."""


@dataclass
class Owned:
    """What a tenant wrote into one space: the ids a route can name, and its cursor."""

    space: str
    marker: str
    """A string found in every text this space holds, and nowhere else."""
    ids: dict[str, str] = field(default_factory=dict)
    cursor: str = ""


@dataclass
class System:
    settings: Settings
    http: str
    grpc: str
    store: PostgresEventStore
    keys: PostgresKeyStore
    tokens: dict[str, str]
    keyring: Keyring
    routes: set[tuple[str, str]]
    """(method, path) of every route the HTTP API serves."""
    owned: dict[tuple[str, str], Owned] = field(default_factory=dict)
    """(tenant, space) → what is there."""
    callers: dict[tuple[str | None, str | None], httpx.AsyncClient] = field(
        default_factory=dict)

    def client(self, token: str | None = None, tenant: str | None = None) -> httpx.AsyncClient:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        if tenant:
            headers["x-memledger-tenant"] = tenant
        return httpx.AsyncClient(base_url=self.http, headers=headers, timeout=30)

    def caller(self, token: str | None = None, tenant: str | None = None) -> httpx.AsyncClient:
        """``client``, kept open for every call with the same key and tenant (closed when the
        system stops): the matrix makes over a thousand calls, and a new client costs ~20 ms
        of CPU (it loads the CA bundle)."""
        if (token, tenant) not in self.callers:
            self.callers[(token, tenant)] = self.client(token, tenant)
        return self.callers[(token, tenant)]


KEYS: list[tuple[str, str, Role, list[str] | None]] = [
    # name, tenant, role, spaces (None: the whole tenant)
    ("victim", VICTIM, "admin", None), ("attacker", ATTACKER, "admin", None),
    ("grpc_attacker", GRPC_ATTACKER, "admin", None),
    ("victim_main_only", VICTIM, "admin", ["main"]), ("victim_reader", VICTIM, "read", None),
    ("victim_revoked", VICTIM, "admin", None)]


RATE_LIMITS_OFF: dict[str, Any] = {
    "rate_limit_per_second": 0, "rate_limit_per_key_per_second": 0,
    "rate_limit_unauthenticated_per_second": 0}
"""The matrix sends hundreds of requests a second, many without a valid key: a 429 would
hide the answer it looks at."""


def settings_for(endpoints: Endpoints, home: Path) -> Settings:
    return Settings(
        mode="distributed", home=home, postgres_dsn=endpoints.postgres_dsn,
        nats_url=endpoints.nats_url, postgres_schema=f"iso_{uuid.uuid4().hex[:10]}",
        nats_prefix=f"iso{uuid.uuid4().hex[:10]}", embedder="hashing", auth="required",
        master_key=SecretStr(base64.b64encode(os.urandom(32)).decode()),
        http_host="127.0.0.1", http_port=free_port(), grpc_port=free_port(),
        relay_poll_seconds=0.05, **RATE_LIMITS_OFF)


@contextlib.asynccontextmanager
async def running(endpoints: Endpoints, home: Path) -> AsyncIterator[System]:
    """Every service of ``memledger up`` on the shared engines, with keys issued; stopped and
    dropped afterwards."""
    settings = settings_for(endpoints, home)
    dsn, nats = endpoints.postgres_dsn, endpoints.nats_url
    service = await asyncio.to_thread(query.build, settings, dsn)
    stop, urls, grpc = asyncio.Event(), asyncio.Queue[str](), asyncio.Queue[str]()
    jobs: list[Coroutine[Any, Any, None]] = [
        ingest.serve(settings, endpoints, stop, urls.put_nowait, also=service.app,
                     also_grpc=service.grpc, on_grpc_ready=grpc.put_nowait),
        relay.serve(settings, endpoints, stop), projector.serve(settings, dsn, nats, stop),
        vectors.serve(settings, dsn, nats, stop), enricher.serve(settings, nats, stop),
        service.record_retrievals(settings, nats, stop)]
    tasks = [asyncio.create_task(job) for job in jobs]
    pool = ConnectionPool(dsn, min_size=1, max_size=2, open=True, kwargs={"autocommit": True})
    store = PostgresEventStore(datastore_from_dsn(dsn, schema=settings.postgres_schema))
    keyring, keyring_pool = await asyncio.to_thread(keyring_for, settings, dsn)
    assert keyring is not None
    assert keyring_pool is not None
    try:
        http, address = await asyncio.wait_for(asyncio.gather(urls.get(), grpc.get()), 60)
        keys = PostgresKeyStore(pool, settings.postgres_schema)
        system = System(settings, http, address, store, keys, _issue(keys), keyring,
                        served(store, keyring, service.app))
        yield system
        for caller in system.callers.values():
            await caller.aclose()
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 60)
        await asyncio.to_thread(service.close)
        store.close()
        pool.close()
        keyring_pool.close()
        with psycopg.connect(dsn, autocommit=True) as conn:
            drop_read_models(conn, settings.postgres_schema)
            conn.execute(f'DROP SCHEMA IF EXISTS "{settings.postgres_schema}" CASCADE')


def _issue(keys: PostgresKeyStore) -> dict[str, str]:
    now = datetime.now(UTC)
    for tenant in (VICTIM, ATTACKER, GRPC_ATTACKER):
        keys.create_tenant(tenant)
    return {name: issue(keys, tenant, role, spaces, now)[1]
            for name, tenant, role, spaces in KEYS}


# --- data ---------------------------------------------------------------------------------

def commands_for(owned: Owned) -> list[list[c.CommandBase]]:
    """Everything a space can hold, each step one submission; the ids they name are recorded
    in ``owned.ids`` (what requests of the matrix name)."""
    s, m, ids = owned.space, owned.marker, owned.ids
    ids.update({k: str(uuid.uuid4()) for k in ("session_id", "message_id", "relation_id",
                                                "feedback_id", "item_id", "other_item_id",
                                                "old_item_id")})
    # Ids without the marker: requests name them, and the marker must stay a string only the
    # victim's data holds.
    tag = uuid.uuid4().hex[:8]
    ids.update(entity_id=f"ent-{tag}", other_entity_id=f"ent2-{tag}",
               subject_id=f"person-{tag}", agent_id=f"agent-{tag}", subject=f"who-{tag}")
    item, other, old = (uuid.UUID(ids[k]) for k in ("item_id", "other_item_id", "old_item_id"))
    session = uuid.UUID(ids["session_id"])
    return [
        [c.CreateSpace(space_id=s, name=f"name {m}", description=f"about {m}")],
        [c.SetSpacePolicy(space_id=s, retention_days={"fact": 400}, consolidation="suggest",
                          members=(Member(principal=f"member-{m}", rights=("read",)),))],
        [c.StartSession(space_id=s, session_id=session, title=f"title {m}",
                        agent_id=ids["agent_id"])],
        [c.AppendMessage(space_id=s, session_id=session, role="user",
                         message_id=uuid.UUID(ids["message_id"]),
                         content=f"said {m} zebra", participant=f"participant-{m}")],
        [c.AssertMemory(space_id=s, item_id=item, kind="fact", content=f"fact {m} umbrella",
                        tags=(f"tag-{m}",), subject_id=ids["subject_id"],
                        triple=Triple(subject=ids["subject"], predicate="likes",
                                      object=f"obj-{m}"), agent_id=ids["agent_id"]),
         c.AssertMemory(space_id=s, item_id=other, kind="preference",
                        content=f"other {m} umbrella"),
         c.AssertMemory(space_id=s, item_id=old, kind="fact", content=f"old {m} umbrella"),
         c.AssertMemory(space_id=s, session_id=session, kind="observation",
                        content=f"session note {m}"),
         c.AssertMemory(space_id=s, kind="fact", content=f"forgotten {m}",
                        subject_id=f"gone-{m}")],
        [c.ReviseMemory(space_id=s, item_id=item, content=f"revised {m} umbrella",
                        reason=f"reason {m}"),
         c.SupersedeMemory(space_id=s, item_id=old, superseded_by=item, reason=f"newer {m}"),
         c.SuggestMerge(space_id=s, item_id=other, similar_to=item, similarity=0.97,
                        policy_version=1)],
        [c.UpsertEntity(space_id=s, entity_id=ids["entity_id"], name=f"Name {m}",
                        type="person", aliases=(f"alias-{m}",)),
         c.UpsertEntity(space_id=s, entity_id=ids["other_entity_id"], name=f"Other {m}",
                        type="place")],
        [c.AssertRelation(space_id=s, relation_id=uuid.UUID(ids["relation_id"]),
                          source_entity=ids["entity_id"], relation_type=f"knows-{m}",
                          target_entity=ids["other_entity_id"]),
         c.RecordFeedback(space_id=s, item_id=item, feedback_id=uuid.UUID(ids["feedback_id"]),
                          signal="rating", rating=4, comment=f"comment {m}"),
         c.RecordPreference(space_id=s, source_item_id=item, rule_id=f"rule-{m}",
                            category="food", value=f"preference {m}", confidence=0.9),
         c.RecordEntities(space_id=s, item_id=item, item_version=1, extractor="rules",
                          entities=(ExtractedEntity(name=f"Name {m}", type="person"),)),
         c.RecordTheme(space_id=s, theme_id=uuid.uuid4(), label=f"theme {m}",
                       members=(item, other), size=2, threshold=0.8, policy_version=1)],
    ]


async def populate(system: System, writer: GroupCommitWriter, tenant: str, space: str
                   ) -> Owned:
    """Write a space's worth of data as ``tenant``; then wait until search finds it, record
    one audited search (a retrieval id) and take a cursor from the middle of its feed."""
    owned = Owned(space, f"{tenant}-{space}-{uuid.uuid4().hex[:8]}")
    steps = commands_for(owned)
    await writer.submit(tenant, [c.RegisterAgent(agent_id=owned.ids["agent_id"],
                                                 name=f"agent {owned.marker}")])
    position = 0
    for step in steps:
        position = (await writer.submit(tenant, step))[-1].position
    token = system.tokens["victim" if tenant == VICTIM else "attacker"]
    async with system.client(token) as client:
        # Erased first: a retrieval that showed the subject's item could not be replayed.
        erased = await client.post(f"/v1/subjects/gone-{owned.marker}/erase", json={})
        assert erased.status_code == 200, erased.text  # a receipt in GET /v1/erasures
        owned.ids["retrieval_id"] = await _audited_search(client, owned, position)
        page = await client.get(f"/v1/spaces/{space}/changes", params={"limit": 3})
        owned.cursor = page.json()["next_cursor"]
    system.owned[(tenant, space)] = owned
    return owned


async def _audited_search(client: httpx.AsyncClient, owned: Owned, position: int) -> str:
    async def found() -> str:
        response = await client.post("/v1/search", json={
            "query": f"fact {owned.marker} umbrella", "spaces": [owned.space], "threshold": 0,
            "audit": True, "min_position": position})
        assert response.status_code == 200, response.text
        body = response.json()
        assert owned.ids["item_id"] in {r["item_id"] for r in body["results"]}, body
        return str(body["retrieval_id"])

    return await eventually(found, timeout=60, interval=0.2)


@contextlib.asynccontextmanager
async def writer_of(system: System) -> AsyncIterator[GroupCommitWriter]:
    """A second writer on the system's event store (another ingest replica), sealing with the
    same keys: it writes what tenant keys may not send over the API."""
    writer = GroupCommitWriter(system.store, keyring=system.keyring)
    writer.start()
    try:
        yield writer
    finally:
        writer.stop()


def served(store: PostgresEventStore, keyring: Keyring, query_app: Any) -> set[tuple[str, str]]:
    """(method, path) of every route ``memledger up`` serves over HTTP: ingest's (as its
    ``serve`` makes them, with erasure since personal data is sealed) and the query app's."""
    writer = GroupCommitWriter(store, keyring=keyring)
    ingest_app = ingest_http.create_app(writer, _no_health, None, None,
                                        Erasure(store, keyring, writer))
    return {(method, re.sub(r":\w+}", "}", route.path))
            for route in flat_routes([*ingest_app.routes, *query_app.routes])
            for method in getattr(route, "methods", None) or () if method != "HEAD"}


async def _no_health() -> dict[str, Any]:
    return {}


def fill_of(owned: Owned) -> dict[str, Any]:
    """The values a request about ``owned`` carries, by the names that carry them
    (``isolation_cases``)."""
    ids = owned.ids
    return {**ids, "space_id": owned.space, "spaces": [owned.space],
            "superseded_by": ids["other_item_id"], "similar_to": ids["other_item_id"],
            "merged_item_ids": [ids["other_item_id"]], "source_item_id": ids["item_id"],
            "source_entity": ids["entity_id"], "target_entity": ids["other_entity_id"],
            "query": "umbrella", "threshold": 0, "cursor": owned.cursor}
