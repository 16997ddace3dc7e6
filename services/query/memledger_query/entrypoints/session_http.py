"""``GET /v1/spaces/{space_id}/sessions``: a space's sessions, so that a message found by search
can be followed to its conversation (whose turns ``GET
/v1/spaces/{space_id}/sessions/{session_id}/messages`` reads).

Newest first, a page at a time: the cursor is the (started_at, session_id) of a page's last
session, so a listing never skips or repeats one while new sessions start. The listing is of
the sessions as projected now (the read model keeps no earlier state of a session).
"""

import base64
import binascii
from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from uuid import UUID

import orjson
from fastapi import APIRouter, Query
from fastapi.responses import Response

from memledger_query.core import message_views, views
from memledger_query.core.message_views import SessionFilters
from memledger_query.core.reader import Reader
from memledger_query.entrypoints.http import (
    Instant,
    MinPosition,
    Problem,
    Tenant,
    WaitMs,
    _json,
    known_space,
    principal,
    read_visible,
)
from memledger_schemas.api.reads import SessionList, SessionSummary

Bound = Annotated[Instant, Query(description="a window bound (from: included, to: not)")]
Cursor = tuple[datetime, str]


def router(reader: Reader) -> APIRouter:
    routes = APIRouter(tags=["conversations"])

    @routes.get("/v1/spaces/{space_id}/sessions", response_model=SessionList)
    async def list_sessions(
            space_id: str, x_tenant: Tenant = None,
            agent_id: Annotated[str | None, Query(max_length=64, description=(
                "the agent that started it"))] = None,
            participant: Annotated[str | None, Query(max_length=512, description=(
                "someone who said something in it"))] = None,
            status: Literal["active", "ended"] | None = None,
            started_from: Bound = None, started_to: Bound = None,
            ended_from: Bound = None, ended_to: Bound = None,
            limit: Annotated[int, Query(ge=1, le=1_000)] = 50,
            after: Annotated[str | None, Query(max_length=512, description=(
                "the next_cursor of the page before"))] = None,
            min_position: MinPosition = None, wait_ms: WaitMs = 2_000) -> Response:
        filters = SessionFilters(agent_id, participant, status, started_from, started_to,
                                 ended_from, ended_to)
        return _json(await read_visible(reader, min_position, wait_ms, sessions,
                                        principal().tenant, space_id, filters, limit,
                                        _after(after)))

    return routes


def sessions(conn: Any, s: str, tenant: str, space: str, filters: SessionFilters, limit: int,
             after: Cursor | None) -> SessionList:
    at = views.basis(conn, s, datetime.now(UTC), None, None)
    found = message_views.sessions(conn, s, tenant, space, filters, limit, after)
    known_space(conn, s, tenant, space, empty=not found)
    cursor = _cursor(found[-1]) if len(found) == limit else None
    return SessionList(basis=at, sessions=found, next_cursor=cursor)


def _cursor(last: SessionSummary) -> str:
    raw = orjson.dumps({"v": 1, "t": last.started_at.isoformat(), "id": last.session_id})
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _after(value: str | None) -> Cursor | None:
    if value is None:
        return None
    try:
        decoded = orjson.loads(base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)))
        if decoded.get("v") != 1:
            raise ValueError(value)
        return datetime.fromisoformat(decoded["t"]), str(UUID(str(decoded["id"])))
    except (binascii.Error, orjson.JSONDecodeError, ValueError, KeyError, TypeError,
            AttributeError):
        raise Problem(400, "invalid_cursor", "not a cursor this service issued",
                      "query.after") from None
