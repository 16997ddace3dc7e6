"""HTTP for conversations: ``GET /v1/spaces/{space_id}/sessions`` lists a space's sessions, so
that a message found by search can be followed to its conversation (whose turns
``GET /v1/spaces/{space_id}/sessions/{session_id}/messages`` reads)."""

import base64
import binascii
from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

import orjson
from fastapi import FastAPI, Query

from memledger_query import message_views, views
from memledger_query.dto import SessionList, SessionSummary
from memledger_query.http import (
    Instant,
    MinPosition,
    Problem,
    Tenant,
    WaitMs,
    _json,
    read_visible,
)
from memledger_query.http import principal as _principal
from memledger_query.message_views import SessionFilters
from memledger_query.reader import Reader

Window = Annotated[Instant, Query()]


def add_routes(app: FastAPI, reader: Reader) -> None:
    @app.get("/v1/spaces/{space_id}/sessions", response_model=SessionList)
    async def list_sessions(
            space_id: str, x_tenant: Tenant = None,
            agent_id: Annotated[str | None, Query(max_length=64)] = None,
            participant: Annotated[str | None, Query(max_length=512)] = None,
            status: Literal["active", "ended"] | None = None,
            started_from: Window = None, started_to: Window = None,
            ended_from: Window = None, ended_to: Window = None,
            limit: Annotated[int, Query(ge=1, le=1_000)] = 50, after: str | None = None,
            min_position: MinPosition = None, wait_ms: WaitMs = 2_000) -> Any:
        """The space's sessions, most recently started first, a page at a time (pass
        ``next_cursor`` as ``after``). ``agent_id``: the agent that started it;
        ``participant``: someone who said something in it; the started and ended windows
        are half-open (``from`` included, ``to`` not)."""
        filters = SessionFilters(agent_id, participant, status, started_from, started_to,
                                 ended_from, ended_to)
        return _json(await read_visible(reader, min_position, wait_ms, _sessions,
                                        _principal().tenant, space_id, filters, limit,
                                        _after(after)))


def _sessions(conn: Any, s: str, tenant: str, space: str, filters: SessionFilters, limit: int,
              after: tuple[datetime, str] | None) -> SessionList:
    position, _ = views.checkpoint(conn, s)
    found = message_views.sessions(conn, s, tenant, space, filters, limit, after)
    cursor = _cursor(found[-1]) if len(found) == limit else None
    return SessionList(sessions=found, next_cursor=cursor, position=position)


def _cursor(last: SessionSummary) -> str:
    raw = orjson.dumps({"v": 1, "t": last.started_at.isoformat(), "id": last.session_id})
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _after(value: str | None) -> tuple[datetime, str] | None:
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
