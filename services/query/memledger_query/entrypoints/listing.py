"""Listings: the spaces and agents of a tenant, as of a position, a page at a time; and its
erasure receipts.

A key limited to some spaces lists only those; agents belong to the whole tenant, so listing
them needs a key for the whole tenant (as the tenant-wide changes feed does). Pages follow
the primary key (``after`` = the last id of the previous page), so a listing never skips or
repeats a row while new ones are written. Erasure receipts need the admin role.
"""

import asyncio
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import Response
from psycopg import Connection, sql

from memledger_platform import receipts
from memledger_platform.clock import Clock
from memledger_query.core import views
from memledger_query.core.reader import Reader
from memledger_query.entrypoints import api
from memledger_query.entrypoints.api import (
    AsOf,
    KeyHolder,
    Problem,
    Wait,
    json_answer,
    read_visible,
)
from memledger_schemas.api.reads import (
    AgentList,
    AgentSummary,
    Basis,
    ErasureList,
    ErasureReceipt,
    SpaceList,
    SpaceSummary,
)

Limit = Annotated[int, Query(ge=1, le=1_000)]
After = Annotated[str | None, Query(max_length=256, description="the last id of the page "
                                    "before (its next_cursor)")]
Status = Annotated[str | None, Query(pattern="^(active|archived)$")]

_SPACES = """SELECT space_id, name, description, status, policy_version, created_position,
       created_at FROM {s}.spaces
WHERE tenant_id = %(tenant)s AND created_position <= %(p)s AND space_id > %(after)s
  AND (%(granted)s::text[] IS NULL OR space_id = ANY(%(granted)s))
  AND (%(status)s::text IS NULL OR status = %(status)s)
ORDER BY space_id LIMIT %(limit)s"""
_AGENTS = """SELECT agent_id, name, description, registered_at, position FROM {s}.agents
WHERE tenant_id = %(tenant)s AND position <= %(p)s AND agent_id > %(after)s
ORDER BY agent_id LIMIT %(limit)s"""


def router(reader: Reader, clock: Clock) -> APIRouter:
    routes = api.router(tags=["listings"])

    @routes.get("/v1/spaces", response_model=SpaceList)
    async def list_spaces(who: KeyHolder, wait: Wait, as_of_position: AsOf = None,
                          status: Status = None, limit: Limit = 100, after: After = None
                          ) -> Response:
        granted = sorted(who.spaces) if who.spaces is not None else None
        page = Page(as_of_position, limit, after or "", clock.now())
        return json_answer(await read_visible(reader, wait.needing(as_of_position), spaces,
                                              who.tenant, granted, status, page))

    @routes.get("/v1/agents", response_model=AgentList)
    async def list_agents(who: KeyHolder, wait: Wait, as_of_position: AsOf = None,
                          limit: Limit = 100, after: After = None) -> Response:
        if who.spaces is not None:
            raise Problem(403, "forbidden", "agents belong to the whole tenant: this key is "
                          "limited to some spaces", "header.Authorization")
        page = Page(as_of_position, limit, after or "", clock.now())
        return json_answer(await read_visible(reader, wait.needing(as_of_position), agents,
                                              who.tenant, page))

    @routes.get("/v1/erasures", response_model=ErasureList)
    async def list_erasures(who: KeyHolder, limit: Limit = 100) -> Response:
        if not who.may("admin") or who.spaces is not None:
            raise Problem(403, "forbidden", "erasure receipts need an admin key for the whole "
                          "tenant", "header.Authorization")
        found = await asyncio.to_thread(reader.run, erasures, reader.base_schema,
                                        who.tenant, limit)
        return json_answer(found)

    return routes


def erasures(conn: Connection[Any], _: str, base: str, tenant: str, limit: int
             ) -> ErasureList:
    receipts.ensure(conn, base)
    found = receipts.recent(conn, base, tenant, limit)
    return ErasureList(receipts=[
        ErasureReceipt(position=p, subject_id=subject, recorded_at=at, purged=by,
                       complete=set(receipts.PROJECTIONS) <= set(by))
        for p, subject, at, by in found])


@dataclass(frozen=True)
class Page:
    """A page of a listing: as of ``position`` (default: everything projected), ``limit``
    rows after the id ``after``, valid at ``now``."""

    position: int | None
    limit: int
    after: str
    now: datetime


def spaces(conn: Connection[Any], s: str, tenant: str, granted: list[str] | None,
           status: str | None, page: Page) -> SpaceList:
    at = views.basis(conn, s, page.now, page.position, None)
    rows = _rows(conn, _SPACES, s, {"tenant": tenant, "granted": granted, "status": status},
                 at, page)
    found = [SpaceSummary(space_id=r[0], name=r[1], description=r[2], status=r[3],
                          policy_version=r[4], created_position=r[5], created_at=r[6])
             for r in rows]
    return SpaceList(basis=at, spaces=found, next_cursor=_next(found, page, "space_id"))


def agents(conn: Connection[Any], s: str, tenant: str, page: Page) -> AgentList:
    at = views.basis(conn, s, page.now, page.position, None)
    rows = _rows(conn, _AGENTS, s, {"tenant": tenant}, at, page)
    found = [AgentSummary(agent_id=r[0], name=r[1], description=r[2], registered_at=r[3],
                          position=r[4]) for r in rows]
    return AgentList(basis=at, agents=found, next_cursor=_next(found, page, "agent_id"))


def _rows(conn: Connection[Any], query: str, s: str, params: dict[str, Any], at: Basis,
          page: Page) -> list[tuple[Any, ...]]:
    statement = sql.SQL(query).format(s=sql.Identifier(s))
    return conn.execute(statement, {**params, "p": at.position, "after": page.after,
                                    "limit": page.limit}).fetchall()


def _next(found: list[Any], page: Page, key: str) -> str | None:
    return str(getattr(found[-1], key)) if len(found) == page.limit else None

