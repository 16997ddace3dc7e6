"""Tenant isolation and space grants, as a matrix: every read and write endpoint, attacked with
another tenant's ids, spaces, cursors and filters, and with a key lacking the grant or role.
Every attack is denied (401/403/404) or answered with the caller's own data only: never a byte
of the other tenant's (their distinctive strings are looked for in every response body)."""

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
import psycopg
import pytest
from psycopg_pool import ConnectionPool

from memledger_ingest.core.writer import GroupCommitWriter
from memledger_platform import bus
from memledger_platform.auth import Gate, Role, issue
from memledger_platform.auth_postgres import PostgresKeyStore
from memledger_platform.embedding.embedder import HashingEmbedder
from memledger_platform.endpoints import Endpoints
from memledger_platform.eventstore.postgres import PostgresEventStore, datastore_from_dsn
from memledger_schemas.subjects import Subjects
from tests.integration.ingest_support import running
from tests.integration.read_support import drop_read_models
from tests.integration.semantic_support import Pipeline, pipeline
from tests.support import delete_streams

SECRET = "zebra-umbrella-acme-secret"
"""A string only tenant acme ever writes: it must never reach another tenant or grant."""
SIDE_SECRET = "walrus-side-space-secret"
"""Only in acme's space "side": never visible to a key granted "main" only."""


@dataclass
class World:
    p: Pipeline
    keys: dict[str, str]
    store: PostgresKeyStore
    ids: dict[str, str]
    cursor: str


@pytest.fixture(scope="module")
async def world(engines: Endpoints, tmp_path_factory: pytest.TempPathFactory
                ) -> AsyncIterator[World]:
    """One populated world for the whole matrix (every test only reads it, or writes what no
    other test looks at), on its own schema and streams."""
    schema, subjects = f"t_{uuid.uuid4().hex[:12]}", Subjects(f"t{uuid.uuid4().hex[:10]}")
    event_store = PostgresEventStore(datastore_from_dsn(engines.postgres_dsn, schema=schema))
    event_store.create_tables()
    nc = await bus.connect(engines.nats_url, "memledger-test")
    js = nc.jetstream()
    await bus.ensure_streams(js, subjects)
    try:
        with ConnectionPool(engines.postgres_dsn, min_size=1, max_size=4, open=True,
                            kwargs={"autocommit": True}) as pool:
            store = PostgresKeyStore(pool, schema)
            keys = _keys(store)
            async with running(GroupCommitWriter(event_store)) as writer, pipeline(
                    engines.postgres_dsn, event_store, schema, (nc, js), subjects, writer,
                    HashingEmbedder(), tmp_path_factory.mktemp("vectors"),
                    Gate(store, None)) as p:
                ids, cursor = await _populate(p, keys)
                yield World(p, keys, store, ids, cursor)
    finally:
        await delete_streams(js, subjects)
        await nc.close()
        event_store.close()
        with psycopg.connect(engines.postgres_dsn, autocommit=True) as conn:
            drop_read_models(conn, schema)
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _keys(store: PostgresKeyStore) -> dict[str, str]:
    now = datetime.now(UTC)
    for tenant in ("acme", "globex"):
        store.create_tenant(tenant)
    grants: list[tuple[str, str, Role, list[str] | None]] = [
        ("acme", "acme", "admin", None), ("globex", "globex", "admin", None),
        ("acme_main_reader", "acme", "read", ["main"]),
        ("acme_main_writer", "acme", "write", ["main"]), ("acme_reader", "acme", "read", None)]
    return {name: issue(store, tenant, role, spaces, now)[1]
            for name, tenant, role, spaces in grants}


async def _populate(p: Pipeline, keys: dict[str, str]) -> tuple[dict[str, str], str]:
    ids: dict[str, str] = {}
    async with p.writer_client(key=keys["acme"]) as acme, p.writer_client(
            key=keys["globex"]) as globex:
        for client, space in ((acme, "main"), (acme, "side"), (globex, "main")):
            await _ok(client.post("/v1/spaces", json={"space_id": space}))
        ids["item"] = (await _ok(acme.post("/v1/spaces/main/memories", json={
            "kind": "fact", "content": f"the vault code is {SECRET}"})))["ids"]["item_id"]
        ids["side_item"] = (await _ok(acme.post("/v1/spaces/side/memories", json={
            "kind": "fact", "content": f"the side note is {SIDE_SECRET}"})))["ids"]["item_id"]
        ids["session"] = (await _ok(acme.post("/v1/spaces/main/sessions", json={})))[
            "ids"]["session_id"]
        await _ok(acme.post(f"/v1/spaces/main/sessions/{ids['session']}/messages", json={
            "role": "user", "content": f"remember {SECRET}"}))
        await _ok(acme.post("/v1/spaces/main/entities", json={
            "entity_id": "vault", "name": SECRET, "type": "thing"}))
        await _ok(globex.post("/v1/spaces/main/memories", json={
            "kind": "fact", "content": "the vault code is globex-own"}))
        last = await _ok(globex.post("/v1/spaces/main/memories", json={
            "kind": "fact", "content": "globex knows nothing of zebras"}))
    async with p.client(key=keys["acme"]) as acme_reads:
        page = await _ok(acme_reads.get("/v1/spaces/main/changes", params={
            "min_position": last["position"], "wait_ms": 10_000}))
    ids["pos"] = str(last["position"])
    return ids, page["next_cursor"]


async def _ok(call: Any) -> dict[str, Any]:
    response: httpx.Response = await call
    assert response.status_code in (200, 201), response.text
    body: dict[str, Any] = response.json()
    return body


# --- the matrix: (who, what) → expected outcome -------------------------------------------------

READS = [
    # name, method, path (formatted with ids), json body, query params
    ("item", "GET", "/v1/spaces/main/items/{item}", None, {}),
    ("item as of", "GET", "/v1/spaces/main/items/{item}", None, {"as_of_position": "{pos}"}),
    ("item by replay", "GET", "/v1/spaces/main/items/{item}", None, {"source": "replay"}),
    ("history", "GET", "/v1/spaces/main/items/{item}/history", None, {}),
    ("list", "GET", "/v1/spaces/main/items", None, {}),
    ("list filtered", "GET", "/v1/spaces/main/items", None, {"session_id": "{session}"}),
    ("messages", "GET", "/v1/spaces/main/sessions/{session}/messages", None, {}),
    ("changes", "GET", "/v1/spaces/main/changes", None, {}),
    ("changes from their cursor", "GET", "/v1/spaces/main/changes", None, {"after": "{cursor}"}),
    ("tenant changes", "GET", "/v1/changes", None, {}),
    ("graph", "GET", "/v1/spaces/main/graph", None, {}),
    ("neighbours", "GET", "/v1/spaces/main/entities/vault/neighbours", None, {"depth": "3"}),
    ("items mentioning", "GET", "/v1/spaces/main/entities/vault/items", None, {}),
    ("search", "POST", "/v1/search", {"query": f"vault code {SECRET}", "threshold": 0}, {}),
    ("search their space", "POST", "/v1/search",
     {"query": SECRET, "spaces": ["main", "side"], "threshold": 0}, {}),
    ("context", "POST", "/v1/context", {"space_id": "main", "session_id": "{session}",
                                         "query": SECRET}, {}),
]


def _fill(value: Any, w: World) -> Any:
    if isinstance(value, str):
        return value.format(**w.ids, cursor=w.cursor)
    if isinstance(value, dict):
        return {k: _fill(v, w) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, w) for v in value]
    return value


async def _call(w: World, key: str | None, method: str, path: str, body: Any,
                params: dict[str, Any], tenant: str | None = None) -> httpx.Response:
    async with w.p.client(tenant=tenant, key=key) as client:
        return await client.request(method, _fill(path, w), json=_fill(body, w),
                                    params=_fill(params, w))


@pytest.mark.parametrize(("name", "method", "path", "body", "params"), READS,
                         ids=[r[0] for r in READS])
async def test_another_tenant_never_reads_a_byte(world: World, name: str, method: str,
                                                 path: str, body: Any,
                                                 params: dict[str, Any]) -> None:
    response = await _call(world, world.keys["globex"], method, path, body, params)
    assert response.status_code in (200, 404), response.text
    assert SECRET not in response.text
    assert SIDE_SECRET not in response.text
    # Asking in the other tenant's name with one's own key is refused outright.
    spoofed = await _call(world, world.keys["globex"], method, path, body, params,
                          tenant="acme")
    assert spoofed.status_code == 403
    assert SECRET not in spoofed.text


@pytest.mark.parametrize(("name", "method", "path", "body", "params"), READS,
                         ids=[r[0] for r in READS])
async def test_a_key_without_a_grant_for_a_space_never_reads_it(
        world: World, name: str, method: str, path: str, body: Any,
        params: dict[str, Any]) -> None:
    side = _fill(path, world).replace("/spaces/main/", "/spaces/side/")
    side_body = _fill(body, world)
    if isinstance(side_body, dict) and "space_id" in side_body:
        side_body["space_id"] = "side"
    response = await _call(world, world.keys["acme_main_reader"], method, side, side_body,
                           params)
    assert SIDE_SECRET not in response.text
    if "/spaces/side/" in side or name in ("context", "search their space", "tenant changes"):
        assert response.status_code == 403, response.text


async def test_the_owner_reads_what_the_others_cannot(world: World) -> None:
    """The matrix can fail: the same calls as the owner do see the secret."""
    seen = []
    for name, method, path, body, params in READS:
        response = await _call(world, world.keys["acme"], method, path, body, params)
        seen.append((name, response.status_code, SECRET in response.text))
    assert all(status == 200 for _, status, _ in seen), seen
    assert sum(found for _, _, found in seen) >= 10, seen


WRITES = [
    ("assert into their space", "POST", "/v1/spaces/side/memories",
     {"kind": "fact", "content": "x"}),
    ("revise their item", "POST", "/v1/spaces/main/memories/{item}/revise", {"content": "x"}),
    ("retract their item", "POST", "/v1/spaces/main/memories/{item}/retract", {}),
    ("append to their session", "POST", "/v1/spaces/main/sessions/{session}/messages",
     {"role": "user", "content": "x"}),
    ("batch", "POST", "/v1/batch", {"commands": [
        {"command": "archive_memory", "space_id": "main", "item_id": "{item}", "reason": "x"}]}),
]


@pytest.mark.parametrize(("name", "method", "path", "body"), WRITES, ids=[w[0] for w in WRITES])
async def test_writes_to_another_tenants_data_are_refused(world: World, name: str, method: str,
                                                          path: str, body: Any) -> None:
    async with world.p.writer_client(key=world.keys["globex"]) as globex:
        response = await globex.request(method, _fill(path, world), json=_fill(body, world))
    # Globex has no space "side"; its "main" holds no acme item or session.
    assert response.status_code in (404, 409), response.text
    async with world.p.writer_client(key=world.keys["globex"], tenant="acme") as spoof:
        assert (await spoof.request(method, _fill(path, world),
                                    json=_fill(body, world))).status_code == 403


@pytest.mark.parametrize(("key", "path", "status"), [
    ("acme_reader", "/v1/spaces/main/memories", 403),       # read role cannot write
    ("acme_main_writer", "/v1/spaces/side/memories", 403),  # no grant for "side"
    ("acme_main_writer", "/v1/spaces/main/memories", 201),
    (None, "/v1/spaces/main/memories", 401),
    ("mlk_0000000000000000_" + "A" * 43, "/v1/spaces/main/memories", 401),
])
async def test_writes_need_the_role_and_the_grant(world: World, key: str | None, path: str,
                                                  status: int) -> None:
    token = world.keys.get(key or "", key)
    async with world.p.writer_client(key=token) as client:
        response = await client.post(path, json={"kind": "fact", "content": "granted?"})
    assert response.status_code == status, response.text


async def test_a_revoked_key_is_refused_from_the_next_request_on(world: World) -> None:
    token = issue(world.store, "acme", "read", None, datetime.now(UTC))[1]
    assert (await _call(world, token, "GET", "/v1/spaces/main/items", None, {})
            ).status_code == 200
    world.store.revoke(token.split("_")[1], datetime.now(UTC))
    refused = await _call(world, token, "GET", "/v1/spaces/main/items", None, {})
    assert refused.status_code == 401
    assert "revoked" in refused.json()["error"]["message"]
