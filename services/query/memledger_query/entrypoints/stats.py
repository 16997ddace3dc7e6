"""``GET /v1/spaces/{space_id}/stats``: counts of what a space holds, read in one round trip
(an agent or an operator sizing a space would otherwise page through every listing).

Items, messages, entities and relations are counted at the answer's basis (their positions
say when each was written and ended); sessions as projected now (the read model keeps no
earlier state of a session).
"""

from collections import defaultdict
from datetime import datetime
from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response
from psycopg import Connection, sql

from memledger_platform.clock import Clock
from memledger_query.core import views
from memledger_query.core.reader import Reader
from memledger_query.entrypoints import api
from memledger_query.entrypoints.api import Caller, Wait, json_answer, read_visible
from memledger_query.entrypoints.reads import known_space
from memledger_schemas.api.reads import SpaceStats

TOP_TAGS = 50

_STATUS = """CASE WHEN i.archived_position <= %(p)s THEN 'archived'
    WHEN i.superseded_position <= %(p)s THEN 'superseded'
    WHEN i.retracted_position <= %(p)s THEN 'retracted' ELSE 'active' END"""
_ITEMS = """SELECT i.kind, {status} AS status, count(*) FROM {s}.items i
WHERE i.tenant_id = %(tenant)s AND i.space_id = %(space)s AND i.created_position <= %(p)s
GROUP BY 1, 2"""
_TAGS = """SELECT tag, count(*) FROM {s}.item_versions v
JOIN {s}.items i ON i.tenant_id = v.tenant_id AND i.item_id = v.item_id
CROSS JOIN LATERAL jsonb_array_elements_text(coalesce(v.attrs->'tags', '[]')) AS tag
WHERE v.tenant_id = %(tenant)s AND i.space_id = %(space)s AND v.valid @> %(now)s
  AND v.sys_from <= %(p)s AND (v.sys_to IS NULL OR v.sys_to > %(p)s)
  AND i.created_position <= %(p)s AND {status} = 'active'
GROUP BY tag ORDER BY count(*) DESC, tag LIMIT %(top)s"""
_SESSIONS = """SELECT status, count(*) FROM {s}.sessions
WHERE tenant_id = %(tenant)s AND space_id = %(space)s GROUP BY status"""
_MESSAGES = """SELECT count(*) FROM {s}.messages
WHERE tenant_id = %(tenant)s AND space_id = %(space)s AND position <= %(p)s"""
_ENTITIES = """SELECT count(*) FROM {s}.entities
WHERE tenant_id = %(tenant)s AND space_id = %(space)s AND created_position <= %(p)s"""
_RELATIONS = """SELECT CASE WHEN retracted_position <= %(p)s THEN 'retracted' ELSE 'active'
    END, count(*) FROM {s}.relations
WHERE tenant_id = %(tenant)s AND space_id = %(space)s AND asserted_position <= %(p)s
GROUP BY 1"""


def router(reader: Reader, clock: Clock) -> APIRouter:
    routes = api.router(tags=["listings"])

    @routes.get("/v1/spaces/{space_id}/stats", response_model=SpaceStats)
    async def space_stats(space_id: str, who: Caller, wait: Wait) -> Response:
        return json_answer(await read_visible(reader, wait, stats, who.tenant, space_id,
                                              clock.now()))

    return routes


def stats(conn: Connection[Any], s: str, tenant: str, space: str, now: datetime
          ) -> SpaceStats:
    """The counts of ``space`` at the latest projected position, valid at ``now`` (404 for a
    space the tenant does not have)."""
    known_space(conn, s, tenant, space, empty=True)
    at = views.basis(conn, s, now, None, None)
    params = {"tenant": tenant, "space": space, "p": at.position, "now": at.valid_at,
              "top": TOP_TAGS}
    items: dict[str, dict[str, int]] = defaultdict(dict)
    for kind, status, count in _rows(conn, _ITEMS, s, params):
        items[kind][status] = count
    return SpaceStats(
        basis=at, space_id=space, items=dict(items),
        tags=dict(_rows(conn, _TAGS, s, params)),
        sessions=dict(_rows(conn, _SESSIONS, s, params)),
        messages=_count(conn, _MESSAGES, s, params),
        entities=_count(conn, _ENTITIES, s, params),
        relations=dict(_rows(conn, _RELATIONS, s, params)))


def _rows(conn: Connection[Any], query: str, s: str, params: dict[str, Any]
          ) -> list[tuple[Any, ...]]:
    statement = sql.SQL(query).format(s=sql.Identifier(s), status=sql.SQL(_STATUS))
    return conn.execute(statement, params).fetchall()


def _count(conn: Connection[Any], query: str, s: str, params: dict[str, Any]) -> int:
    return int(_rows(conn, query, s, params)[0][0])

