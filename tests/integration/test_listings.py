"""Listings over a real read model: the spaces and agents of a tenant as of a position, a page
at a time, scoped by the key's grants; erasure receipts for admins only."""

from collections.abc import AsyncIterator
from typing import Any

import httpx
import psycopg
import pytest
from psycopg_pool import ConnectionPool

from memledger_ingest.core.writer import GroupCommitWriter
from memledger_platform import receipts
from memledger_platform.auth import TENANT_HEADER, Gate, Principal
from memledger_platform.endpoints import Endpoints
from memledger_query.entrypoints.http import create_app
from memledger_schemas import commands as c
from tests.integration.read_support import TENANT, CountingReader, ReadSide, query_api, write


@pytest.fixture
async def api(engines: Endpoints, side: ReadSide) -> AsyncIterator[httpx.AsyncClient]:
    async with query_api(engines.postgres_dsn, side) as (client, _):
        yield client


async def _spaces(writer: GroupCommitWriter, side: ReadSide, *names: str,
                  tenant: str = TENANT) -> int:
    for name in names:
        await write(writer, c.CreateSpace(space_id=name, name=f"the {name} space"),
                    tenant=tenant)
    return side.project()


async def _get(api: httpx.AsyncClient, path: str, **params: Any) -> dict[str, Any]:
    response = await api.get(path, params=params)
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()
    return found


async def test_spaces_are_listed_in_id_order_a_page_at_a_time_with_a_cursor(
        api: httpx.AsyncClient, writer: GroupCommitWriter, side: ReadSide) -> None:
    await _spaces(writer, side, "gamma", "alpha", "delta", "beta")
    first = await _get(api, "/v1/spaces", limit=3)
    assert [s["space_id"] for s in first["spaces"]] == ["alpha", "beta", "delta"]
    assert first["spaces"][0]["name"] == "the alpha space"
    rest = await _get(api, "/v1/spaces", limit=3, after=first["next_cursor"])
    assert [s["space_id"] for s in rest["spaces"]] == ["gamma"]
    assert rest["next_cursor"] is None


async def test_a_space_listing_as_of_a_position_leaves_out_spaces_created_after_it(
        api: httpx.AsyncClient, writer: GroupCommitWriter, side: ReadSide) -> None:
    early = await _spaces(writer, side, "early")
    await _spaces(writer, side, "late")
    then = await _get(api, "/v1/spaces", as_of_position=early)
    assert [s["space_id"] for s in then["spaces"]] == ["early"]
    assert then["basis"]["position"] == early


async def test_another_tenants_spaces_and_agents_are_never_listed(
        api: httpx.AsyncClient, writer: GroupCommitWriter, side: ReadSide) -> None:
    await _spaces(writer, side, "mine")
    await _spaces(writer, side, "theirs", tenant="other")
    await write(writer, c.RegisterAgent(agent_id="their-agent"), tenant="other")
    await write(writer, c.RegisterAgent(agent_id="my-agent", name="Mine"))
    side.project()
    assert [s["space_id"] for s in (await _get(api, "/v1/spaces"))["spaces"]] == ["mine"]
    agents = (await _get(api, "/v1/agents"))["agents"]
    assert [(a["agent_id"], a["name"]) for a in agents] == [("my-agent", "Mine")]


async def test_a_key_limited_to_some_spaces_lists_only_those_and_no_agents(
        engines: Endpoints, writer: GroupCommitWriter, side: ReadSide) -> None:
    await _spaces(writer, side, "granted", "hidden")
    async with _as(engines, side, Principal(TENANT, "read", frozenset({"granted"}))) as api:
        listed = await _get(api, "/v1/spaces")
        agents = await api.get("/v1/agents")
    assert [s["space_id"] for s in listed["spaces"]] == ["granted"]
    assert agents.status_code == 403
    assert agents.json()["error"]["fields"][0]["path"] == "header.Authorization"


async def test_erasure_receipts_are_listed_newest_first_for_an_admin_only(
        engines: Endpoints, side: ReadSide) -> None:
    with psycopg.connect(engines.postgres_dsn, autocommit=True) as conn:
        receipts.ensure(conn, side.names.base)
        for position, projection in ((5, "postgres"), (5, "vectors"), (9, "postgres")):
            receipts.record(conn, side.names.base, TENANT, f"user-{position}", position,
                            projection, {"items": position})
    async with _as(engines, side, Principal(TENANT, "admin")) as api:
        listed = await _get(api, "/v1/erasures")
    async with _as(engines, side, Principal(TENANT, "write")) as api:
        refused = await api.get("/v1/erasures")
    assert [(r["position"], r["subject_id"], r["complete"]) for r in listed["receipts"]] == [
        (9, "user-9", False), (5, "user-5", True)]
    assert listed["receipts"][1]["purged"] == {"postgres": {"items": 5},
                                               "vectors": {"items": 5}}
    assert refused.status_code == 403


async def test_bad_listing_parameters_are_refused_naming_the_field(
        api: httpx.AsyncClient) -> None:
    for params, field in (({"limit": 0}, "query.limit"), ({"status": "gone"}, "query.status"),
                          ({"after": "x" * 300}, "query.after")):
        response = await api.get("/v1/spaces", params=params)
        assert response.status_code == 422, params
        assert response.json()["error"]["fields"][0]["path"] == field


class _FixedGate(Gate):
    """Every request is made by one principal (the key checks are the auth tests' job)."""

    def __init__(self, who: Principal) -> None:
        super().__init__(None, TENANT)
        self.who = who

    def principal(self, authorization: str | None, tenant: str | None,
                  client: str | None = None) -> Principal:
        return self.who


class _As:
    def __init__(self, engines: Endpoints, side: ReadSide, who: Principal) -> None:
        self.pool: ConnectionPool[Any] = ConnectionPool(
            engines.postgres_dsn, min_size=1, max_size=2, kwargs={"autocommit": True},
            open=True)
        app = create_app(CountingReader(self.pool, side.names), side.store, None,
                         gate=_FixedGate(who))
        self.client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                        base_url="http://query",
                                        headers={TENANT_HEADER: who.tenant})

    async def __aenter__(self) -> httpx.AsyncClient:
        return self.client

    async def __aexit__(self, *_: object) -> None:
        await self.client.aclose()
        self.pool.close()


def _as(engines: Endpoints, side: ReadSide, who: Principal) -> _As:
    return _As(engines, side, who)
