"""Conversations: ``GET /v1/spaces/{space_id}/sessions``, a space's sessions, so that a message
found by search can be followed to its conversation, whose turns ``GET
/v1/spaces/{space_id}/sessions/{session_id}/messages`` reads.

Newest first, a page at a time: the cursor is the (started_at, session_id) of a page's last
session, so a listing never skips or repeats one while new sessions start. The listing is of
the sessions as projected now (the read model keeps no earlier state of a session).
"""

import base64
import binascii
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

import orjson
from fastapi import APIRouter, Query
from fastapi.responses import Response

from memledger_platform.clock import Clock
from memledger_query.core import message_views, views
from memledger_query.core.message_views import SessionFilters
from memledger_query.core.reader import Reader
from memledger_query.entrypoints import api, reads
from memledger_query.entrypoints.api import AsOf as AsOfPosition
from memledger_query.entrypoints.api import (
    At,
    Caller,
    Instant,
    Problem,
    Wait,
    json_answer,
    read_visible,
    uuid_of,
)
from memledger_schemas.api.reads import Conversation, SessionList, SessionSummary

Bound = Annotated[Instant, Query(description="a window bound (from: included, to: not)")]
Cursor = tuple[datetime, str]


@dataclass(frozen=True)
class SessionQuery:
    """A session listing's filters, as its query parameters."""

    agent_id: Annotated[str | None, Query(max_length=64, description=(
        "the agent that started it"))] = None
    participant: Annotated[str | None, Query(max_length=512, description=(
        "someone who said something in it"))] = None
    status: Literal["active", "ended"] | None = None
    started_from: Bound = None
    started_to: Bound = None
    ended_from: Bound = None
    ended_to: Bound = None

    def filters(self) -> SessionFilters:
        return SessionFilters(self.agent_id, self.participant, self.status, self.started_from,
                              self.started_to, self.ended_from, self.ended_to)


def router(reader: Reader, clock: Clock) -> APIRouter:
    routes = api.router(tags=["conversations"])

    @routes.get("/v1/spaces/{space_id}/sessions", response_model=SessionList)
    async def list_sessions(
            space_id: str, who: Caller, wait: Wait,
            asked: Annotated[SessionQuery, api.query_model(SessionQuery)],
            limit: Annotated[int, Query(ge=1, le=1_000)] = 50,
            after: Annotated[str | None, Query(max_length=512, description=(
                "the next_cursor of the page before"))] = None) -> Response:
        page = Page(limit, decode_after(after))
        return json_answer(await read_visible(reader, wait, sessions, who.tenant, space_id,
                                              asked.filters(), page, clock.now()))

    return routes


def messages_router(reader: Reader, clock: Clock) -> APIRouter:
    """A session's turns (documented without a tag, as it always was)."""
    routes = api.router()

    @routes.get("/v1/spaces/{space_id}/sessions/{session_id}/messages",
                response_model=Conversation)
    async def messages(space_id: str, session_id: str, who: Caller, wait: Wait,
                       as_of_position: AsOfPosition = None,
                       limit: Annotated[int, Query(ge=1, le=1_000)] = 200) -> Response:
        session = uuid_of(session_id, "path.session_id")
        found = await read_visible(reader, wait.needing(as_of_position), reads.conversation,
                                   who.tenant, space_id, session,
                                   At(clock.now(), as_of_position), limit)
        if found is None:
            raise Problem(404, "not_found", f"session {session!r} not found in {space_id!r}")
        return json_answer(found)

    return routes


@dataclass(frozen=True)
class Page:
    """A page of sessions: how many, after which (``None``: the first page)."""

    limit: int
    after: Cursor | None = None


def sessions(conn: Any, s: str, tenant: str, space: str, filters: SessionFilters, page: Page,
             now: datetime) -> SessionList:
    """A page of the space's sessions, newest first (``now``: the answer's valid time)."""
    at = views.basis(conn, s, now, None, None)
    found = message_views.sessions(conn, s, tenant, space, filters, page.limit, page.after)
    reads.known_space(conn, s, tenant, space, empty=not found)
    cursor = _cursor(found[-1]) if len(found) == page.limit else None
    return SessionList(basis=at, sessions=found, next_cursor=cursor)


def _cursor(last: SessionSummary) -> str:
    raw = orjson.dumps({"v": 1, "t": last.started_at.isoformat(), "id": last.session_id})
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_after(value: str | None) -> Cursor | None:
    """The cursor a page's ``next_cursor`` holds (400 ``invalid_cursor`` if not one)."""
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
