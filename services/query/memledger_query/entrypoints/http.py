"""The query HTTP API (FastAPI, OpenAPI at ``/v1/query/openapi.json``).

Every read is scoped by tenant (``X-Memledger-Tenant``) and space, answers with its basis, and
accepts ``min_position`` (read-your-writes: wait up to ``wait_ms`` for the projection to reach
the position a write returned). Time travel: ``valid_at`` (default now) and ``as_of_position``
or ``recorded_at`` (default: everything projected so far); ``source=replay`` answers an item
read by replaying the events instead (slow, authoritative).
"""

import asyncio
import base64
import binascii
import re
from collections.abc import Callable, Coroutine
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, TypeVar
from urllib.parse import parse_qsl
from uuid import UUID

import orjson
import psycopg
from fastapi import FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.routing import APIRoute
from pydantic import AfterValidator, BaseModel
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memledger_platform.auth import TENANT_HEADER, Denied, Gate, Principal, require
from memledger_platform.crypto import Opener
from memledger_platform.eventstore import EventStore
from memledger_platform.jsonbody import is_json, repeated_key
from memledger_platform.limits import retry_after
from memledger_platform.vectorindex.port import IndexUnavailable
from memledger_query.core import replay, views
from memledger_query.core.reader import NotYetVisible, Reader
from memledger_schemas.api.reads import (
    Basis,
    ChangePage,
    Conversation,
    Graph,
    History,
    Item,
    ItemAnswer,
    ItemList,
    Neighbours,
)
from memledger_schemas.types import SLUG_PATTERN

T = TypeVar("T")


class ErrorBody(BaseModel):
    """Every refusal: ``{"error": {"status", "code", "message", "fields": [{path, reason}]}}``."""

    error: dict[str, Any]


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": text} for status, text in (
        (400, "a cursor this service did not issue, or a body that is not UTF-8 JSON"),
        (401, "no API key, or an unknown or revoked one"),
        (403, "the key's role or space grants do not allow it"),
        (404, "unknown space, item or session (including another tenant's)"),
        (413, "a body over MEMLEDGER_HTTP_MAX_BODY_BYTES"),
        (415, "a body that is not labelled as JSON (Content-Type)"),
        (429, "over a rate limit: retry after Retry-After seconds"),
        (503, "not_yet_visible: the read models did not reach min_position within wait_ms; "
              "audit_failed: an audited search or context call could not be recorded"),
        (504, "no answer within MEMLEDGER_HTTP_REQUEST_TIMEOUT_SECONDS"))}
"""Documented on every route (found missing by schemathesis: the app answered them, the
OpenAPI document only listed 200 and 422)."""


RETRY_AFTER_SECONDS = 1.0
"""What a 503 asks a client to wait before trying again (a read model catching up, an audit
record that could not be written): a replica, or the same one a moment later, may answer."""


class Problem(Exception):
    def __init__(self, status: int, code: str, message: str, path: str | None = None,
                 **extra: Any) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.path, self.extra = (
            status, code, message, path, extra)

    def response(self) -> Response:
        fields = [{"path": self.path, "reason": self.message}] if self.path else []
        response = _body({"error": {"status": self.status, "code": self.code,
                                    "message": self.message, "fields": fields, **self.extra}},
                         self.status)
        if "retry_after_seconds" in self.extra:
            response.headers["Retry-After"] = retry_after(self.extra["retry_after_seconds"])
        return response


def _aware(value: datetime | None) -> datetime | None:
    if value is not None and value.tzinfo is None:
        raise ValueError("must carry a timezone offset, e.g. 2026-01-01T00:00:00Z")
    return value


Instant = Annotated[datetime | None, AfterValidator(_aware)]
Tenant = Annotated[str | None, Header(alias=TENANT_HEADER, pattern=SLUG_PATTERN)]
ValidAt = Annotated[Instant, Query(description="valid time (default: now)")]
AsOf = Annotated[int | None, Query(ge=0, description="system time as a global position")]
RecordedAt = Annotated[Instant, Query(description="system time as a timestamp")]
MinPosition = Annotated[int | None, Query(ge=0, description="wait until projected")]
WaitMs = Annotated[int, Query(ge=0, le=30_000)]
Depth = Annotated[int, Query(ge=1, le=views.MAX_DEPTH, description="relations away")]


def create_app(reader: Reader, store: EventStore, default_tenant: str | None,
               gate: Gate | None = None, opener: Opener | None = None) -> FastAPI:
    """The query app (``gate``: API keys; without one, authentication is off)."""
    app = FastAPI(title="memledger query", version="1", openapi_url="/v1/query/openapi.json",
                  docs_url=None, redoc_url=None, responses=ERROR_RESPONSES)
    app.router.route_class = _JsonBodyRoute  # before any route is added
    _errors(app)
    # Plain ASGI middleware: the decorator kind (BaseHTTPMiddleware) runs the rest of the
    # request in a task group of its own and streams the response through a queue, which
    # costs a search noticeably. The last added runs first.
    app.add_middleware(_WithinHead, reader=reader)
    app.add_middleware(_Authenticate, gate=gate or Gate(None, default_tenant))
    app.add_middleware(_LagHeaders, reader=reader)
    _routes(app, reader, store, default_tenant, opener)
    from memledger_query.entrypoints import (  # built on this
        console_http,
        listing,
        session_http,
        stats,
    )

    app.include_router(listing.router(reader))
    app.include_router(session_http.router(reader))
    app.include_router(stats.router(reader))
    app.include_router(console_http.router())
    return app


class _LagHeaders:
    """Every answer says how far the read models got and how far behind the log they are."""

    def __init__(self, app: ASGIApp, reader: Reader) -> None:
        self.app, self.reader = app, reader

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_lag(message: Message) -> None:
            if message["type"] == "http.response.start":
                projected, lag = self.reader.lag()
                headers = MutableHeaders(scope=message)
                headers["Memledger-Projected-Position"] = str(projected)
                headers["Memledger-Projection-Lag"] = str(lag)
            await send(message)

        await self.app(scope, receive, send_with_lag)


class _JsonBodyRoute(APIRoute):
    """A route that takes a body takes JSON: another ``Content-Type`` is 415, and a key given
    twice in one object 422 naming it, both before FastAPI parses the body."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()
        if self.body_field is None:
            return handle

        async def checked(request: Request) -> Response:
            problem = await _body_problem(request)
            return problem.response() if problem else await handle(request)

        return checked


async def _body_problem(request: Request) -> Problem | None:
    content_type = request.headers.get("content-type")
    if not is_json(content_type):
        return Problem(415, "unsupported_media_type", f"{content_type!r} is not JSON: send the "
                       "body as application/json", "header.Content-Type")
    raw = await request.body()  # kept by the request: FastAPI parses the same bytes
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None  # FastAPI refuses it in its own words
    twice = repeated_key(raw, parsed)
    return None if twice is None else Problem(
        422, "invalid_request", "this key appears twice in one JSON object; send it once",
        f"body.{twice}")


POSITIONS = ("as_of_position", "min_position")
"""The parameters that name a position of the event store."""


async def within_head(reader: Reader, prefix: str, positions: dict[str, int | None]) -> None:
    """``Problem`` (422 naming the field, with ``committed_position``) for a position no write
    has reached: waiting for it could only time out. Positions a write returned were committed
    before it answered, so one that is merely not projected yet still waits."""
    for name, position in positions.items():
        head = None if position is None else await reader.beyond_head(position)
        if head is not None:
            raise Problem(422, "invalid_request", f"position {position} has not been written: "
                          f"the last committed position is {head}", f"{prefix}{name}",
                          committed_position=head)


class _WithinHead:
    """``within_head`` for the positions in a request's query string (an invalid one is left
    to the route's validation)."""

    def __init__(self, app: ASGIApp, reader: Reader) -> None:
        self.app, self.reader = app, reader

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("query_string"):
            asked: dict[str, int | None] = {
                name: int(value) for name, value in parse_qsl(scope["query_string"].decode(
                    "latin-1")) if name in POSITIONS and value.isascii() and value.isdigit()}
            try:
                await within_head(self.reader, "query.", asked)
            except Problem as problem:
                await problem.response()(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _errors(app: FastAPI) -> None:
    @app.exception_handler(Problem)
    async def problem(_: Request, error: Problem) -> Response:
        return error.response()

    @app.exception_handler(IndexUnavailable)
    async def no_index(_: Request, error: IndexUnavailable) -> Response:
        # the vectors service is starting or restarting: a moment later, it answers
        return Problem(503, "index_unavailable", str(error),
                       retry_after_seconds=RETRY_AFTER_SECONDS).response()

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, error: RequestValidationError) -> Response:
        fields = [{"path": ".".join(str(p) for p in e["loc"]), "reason": e["msg"]}
                  for e in error.errors()]
        message = "; ".join(f"{f['path']}: {f['reason']}" for f in fields)
        return _body({"error": {"status": 422, "code": "invalid_request", "message": message,
                                "fields": fields}}, 422)

    @app.exception_handler(psycopg.DataError)
    async def unstorable(_: Request, error: psycopg.DataError) -> Response:
        # A parameter PostgreSQL cannot even compare with, e.g. a NUL character in
        # ``kind`` (found by schemathesis: it was a 500).
        return Problem(422, "invalid_request", f"a parameter the read models cannot hold: "
                       f"{error}").response()

    @app.exception_handler(StarletteHTTPException)
    async def refused(_: Request, error: StarletteHTTPException) -> Response:
        # FastAPI's own refusals (a body that is not UTF-8 JSON: 400; no such route: 404;
        # 405) in the same shape as every other error (schemathesis found {"detail": ...}).
        code = {404: "not_found", 405: "method_not_allowed"}.get(error.status_code,
                                                                 "invalid_request")
        path = "body" if error.status_code == 400 else None
        return Problem(error.status_code, code, str(error.detail), path).response()


_PUBLIC = frozenset({"/v1/query/openapi.json", "/v1/query/health"})
_SPACE_PATH = re.compile(r"^/v1/spaces/([^/]+)")
_PRINCIPAL: ContextVar[Principal] = ContextVar("principal")


def principal() -> Principal:
    """Who makes the request being answered (set by the authentication middleware)."""
    return _PRINCIPAL.get()


async def read_visible(reader: Reader, min_position: int | None, wait_ms: int,
                       fn: Callable[..., T], *args: Any) -> T:
    """Run the read function ``fn`` once the read models reached ``min_position`` (503
    ``not_yet_visible`` if they do not within ``wait_ms``)."""
    try:
        await reader.wait_for(min_position, wait_ms)
    except NotYetVisible as late:
        raise Problem(503, "not_yet_visible", str(late), "query.min_position",
                      projected_position=late.reached,
                      retry_after_seconds=RETRY_AFTER_SECONDS) from None
    return await asyncio.to_thread(reader.run, fn, *args)


class _Authenticate:
    """Every read needs the read role; a path naming a space needs a grant for it; the
    tenant-wide changes feed needs a key for the whole tenant. Search and context check the
    spaces in their bodies themselves."""

    def __init__(self, app: ASGIApp, gate: Gate) -> None:
        self.app, self.gate = app, gate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        path = request.url.path
        if path in _PUBLIC or path == "/console" or path.startswith("/console/"):
            await self.app(scope, receive, send)
            return
        try:
            found = await _resolve(self.gate, request)
            space = _SPACE_PATH.match(path)
            require(found, "read", [space.group(1)] if space else [], path="path.space_id")
            if path == "/v1/changes" and found.spaces is not None:
                raise Denied(403, "forbidden", "this key is limited to some spaces: read "
                             "/v1/spaces/{space_id}/changes instead", "header.Authorization")
        except Denied as denied:
            extra = {} if denied.retry_after is None else {
                "retry_after_seconds": denied.retry_after}
            await Problem(denied.status, denied.code, denied.message, denied.path,
                          **extra).response()(scope, receive, send)
            return
        token = _PRINCIPAL.set(found)
        try:
            await self.app(scope, receive, send)
        finally:
            _PRINCIPAL.reset(token)


async def _resolve(gate: Gate, request: Request) -> Principal:
    headers, client = request.headers, request.client and request.client.host
    if gate.required:  # a key store lookup: off the event loop
        return await asyncio.to_thread(gate.principal, headers.get("authorization"),
                                       headers.get(TENANT_HEADER), client)
    return gate.principal(None, headers.get(TENANT_HEADER), client)


def _routes(app: FastAPI, reader: Reader, store: EventStore, default: str | None,
            opener: Opener | None) -> None:
    def tenant_of(header: str | None) -> str:
        # Resolved (and checked against ``header``) by the middleware already.
        return principal().tenant

    async def read(min_position: int | None, wait_ms: int, fn: Callable[..., T], *args: Any
                   ) -> T:
        return await read_visible(reader, min_position, wait_ms, fn, *args)

    @app.get("/v1/spaces/{space_id}/items/{item_id}", response_model=ItemAnswer)
    async def get_item(space_id: str, item_id: str, x_tenant: Tenant = None,
                       valid_at: ValidAt = None, as_of_position: AsOf = None,
                       recorded_at: RecordedAt = None,
                       source: Literal["projection", "replay"] = "projection",
                       min_position: MinPosition = None, wait_ms: WaitMs = 2_000) -> Response:
        tenant, item = tenant_of(x_tenant), _uuid(item_id, "path.item_id")
        when = valid_at or datetime.now(UTC)
        if source == "replay":
            at, folded = await asyncio.to_thread(replay.basis, store, tenant, when,
                                                 as_of_position, recorded_at, opener)
            found = replay.item(folded, tenant, space_id, item, at)
        else:
            at, found = await read(_needs(min_position, as_of_position), wait_ms, _item,
                                   tenant, space_id, item, when, as_of_position, recorded_at)
        if found is None:
            raise Problem(404, "not_found", f"memory item {item!r} not found in space "
                          f"{space_id!r} at valid time {when.isoformat()} as of position "
                          f"{at.position}")
        return _json(ItemAnswer(basis=at, item=found))

    @app.get("/v1/spaces/{space_id}/items", response_model=ItemList)
    async def list_items(space_id: str, x_tenant: Tenant = None, valid_at: ValidAt = None,
                         as_of_position: AsOf = None, recorded_at: RecordedAt = None,
                         kind: Annotated[list[str] | None, Query()] = None,
                         tag: Annotated[list[str] | None, Query()] = None,
                         session_id: str | None = None, agent_id: str | None = None,
                         subject: str | None = None, predicate: str | None = None,
                         include_archived: bool = False,
                         limit: Annotated[int, Query(ge=1, le=1_000)] = 100,
                         after: str | None = None, min_position: MinPosition = None,
                         wait_ms: WaitMs = 2_000) -> Response:
        tenant = tenant_of(x_tenant)
        filters = {"kinds": kind, "tags": tag, "include_archived": include_archived,
                   "session_id": session_id and _uuid(session_id, "query.session_id"),
                   "agent_id": agent_id, "subject": subject, "predicate": predicate,
                   "limit": limit, "after": after and _uuid(after, "query.after")}
        at, found = await read(_needs(min_position, as_of_position), wait_ms, _items, tenant,
                               space_id, valid_at or datetime.now(UTC), as_of_position,
                               recorded_at, filters)
        return _json(ItemList(basis=at, items=found))

    @app.get("/v1/spaces/{space_id}/items/{item_id}/history", response_model=History)
    async def item_history(space_id: str, item_id: str, x_tenant: Tenant = None,
                           as_of_position: AsOf = None, min_position: MinPosition = None,
                           wait_ms: WaitMs = 2_000) -> Response:
        tenant, item = tenant_of(x_tenant), _uuid(item_id, "path.item_id")
        found = await read(_needs(min_position, as_of_position), wait_ms, _history, tenant,
                           space_id, item, as_of_position)
        if found is None:
            raise Problem(404, "not_found", f"memory item {item!r} not found in {space_id!r}")
        return _json(found)

    @app.get("/v1/spaces/{space_id}/changes", response_model=ChangePage)
    async def space_changes(space_id: str, x_tenant: Tenant = None, since: RecordedAt = None,
                            after: str | None = None,
                            limit: Annotated[int, Query(ge=1, le=1_000)] = 100,
                            min_position: MinPosition = None, wait_ms: WaitMs = 2_000
                            ) -> Response:
        return _json(await read(min_position, wait_ms, _changes, tenant_of(x_tenant),
                                space_id, since, _cursor(after), limit))

    @app.get("/v1/changes", response_model=ChangePage)
    async def tenant_changes(x_tenant: Tenant = None, since: RecordedAt = None,
                             after: str | None = None,
                             limit: Annotated[int, Query(ge=1, le=1_000)] = 100,
                             min_position: MinPosition = None, wait_ms: WaitMs = 2_000
                             ) -> Response:
        return _json(await read(min_position, wait_ms, _changes, tenant_of(x_tenant), None,
                                since, _cursor(after), limit))

    @app.get("/v1/spaces/{space_id}/sessions/{session_id}/messages",
             response_model=Conversation)
    async def messages(space_id: str, session_id: str, x_tenant: Tenant = None,
                       as_of_position: AsOf = None,
                       limit: Annotated[int, Query(ge=1, le=1_000)] = 200,
                       min_position: MinPosition = None, wait_ms: WaitMs = 2_000
                       ) -> Response:
        session = _uuid(session_id, "path.session_id")
        found = await read(_needs(min_position, as_of_position), wait_ms, _conversation,
                           tenant_of(x_tenant), space_id, session, as_of_position, limit)
        if found is None:
            raise Problem(404, "not_found", f"session {session!r} not found in {space_id!r}")
        return _json(found)

    @app.get("/v1/spaces/{space_id}/graph", response_model=Graph)
    async def graph(space_id: str, x_tenant: Tenant = None, valid_at: ValidAt = None,
                    as_of_position: AsOf = None, recorded_at: RecordedAt = None,
                    min_position: MinPosition = None, wait_ms: WaitMs = 2_000) -> Response:
        return _json(await read(_needs(min_position, as_of_position), wait_ms, _graph,
                                tenant_of(x_tenant), space_id, valid_at or datetime.now(UTC),
                                as_of_position, recorded_at))

    # ``:path``: an entity id may hold a "/" (ids are the client's, e.g. "wikidata/Q42").
    @app.get("/v1/spaces/{space_id}/entities/{entity_id:path}/neighbours",
             response_model=Neighbours)
    async def neighbours(space_id: str, entity_id: str, x_tenant: Tenant = None,
                         depth: Depth = 1, valid_at: ValidAt = None,
                         as_of_position: AsOf = None, recorded_at: RecordedAt = None,
                         min_position: MinPosition = None, wait_ms: WaitMs = 2_000
                         ) -> Response:
        at, found = await read(_needs(min_position, as_of_position), wait_ms, _neighbours,
                               tenant_of(x_tenant), space_id, entity_id, depth,
                               valid_at or datetime.now(UTC), as_of_position, recorded_at)
        if found is None:
            raise _no_entity(entity_id, space_id, at)
        return _json(found)

    @app.get("/v1/spaces/{space_id}/entities/{entity_id:path}/items", response_model=ItemList)
    async def items_mentioning(space_id: str, entity_id: str, x_tenant: Tenant = None,
                               valid_at: ValidAt = None, as_of_position: AsOf = None,
                               recorded_at: RecordedAt = None,
                               limit: Annotated[int, Query(ge=1, le=1_000)] = 100,
                               min_position: MinPosition = None, wait_ms: WaitMs = 2_000
                               ) -> Response:
        at, found = await read(_needs(min_position, as_of_position), wait_ms, _mentioning,
                               tenant_of(x_tenant), space_id, entity_id,
                               valid_at or datetime.now(UTC), as_of_position, recorded_at,
                               limit)
        if found is None:
            raise _no_entity(entity_id, space_id, at)
        return _json(ItemList(basis=at, items=found))

    @app.get("/v1/query/health")
    async def health() -> dict[str, Any]:
        return await asyncio.to_thread(reader.health, store)


# --- the read functions, run on a pooled connection by Reader.run ---------------------------

def _item(conn: Any, s: str, tenant: str, space: str, item: str, when: datetime,
          position: int | None, recorded_at: datetime | None) -> tuple[Basis, Any]:
    at = views.basis(conn, s, when, position, recorded_at)
    return at, views.item(conn, s, tenant, space, item, at)


def _items(conn: Any, s: str, tenant: str, space: str, when: datetime, position: int | None,
           recorded_at: datetime | None, filters: dict[str, Any]) -> tuple[Basis, Any]:
    at = views.basis(conn, s, when, position, recorded_at)
    found = views.items(conn, s, tenant, space, at, **filters)
    known_space(conn, s, tenant, space, empty=not found)
    return at, found


def _history(conn: Any, s: str, tenant: str, space: str, item: str, position: int | None
             ) -> History | None:
    at = views.basis(conn, s, datetime.now(UTC), position, None)
    return views.history(conn, s, tenant, space, item, at)


def _changes(conn: Any, s: str, tenant: str, space: str | None, since: datetime | None,
             after: int, limit: int) -> ChangePage:
    position, _ = views.checkpoint(conn, s)
    found = views.changes_after(conn, s, tenant, space, after_position=after, since=since,
                                limit=limit)
    if space is not None:
        known_space(conn, s, tenant, space, empty=not found)
    last = found[-1].position if found else max(after, position if since is None else after)
    return ChangePage(changes=found, next_cursor=encode_cursor(last), position=position)


def _conversation(conn: Any, s: str, tenant: str, space: str, session: str,
                  position: int | None, limit: int) -> Conversation | None:
    at = views.basis(conn, s, datetime.now(UTC), position, None)
    return views.conversation(conn, s, tenant, space, session, at, limit)


def _graph(conn: Any, s: str, tenant: str, space: str, when: datetime, position: int | None,
           recorded_at: datetime | None) -> Graph:
    found = views.graph(conn, s, tenant, space, views.basis(conn, s, when, position,
                                                            recorded_at))
    known_space(conn, s, tenant, space, empty=not (found.entities or found.relations))
    return found


def known_space(conn: Any, s: str, tenant: str, space: str, *, empty: bool) -> None:
    """An empty answer about a space the tenant does not have is 404, not an empty list
    (looked up only for an empty answer, so other reads pay nothing for it)."""
    if empty and not views.space_exists(conn, s, tenant, space):
        raise Problem(404, "not_found", f"space {space!r} not found")


def _neighbours(conn: Any, s: str, tenant: str, space: str, entity: str, depth: int,
                when: datetime, position: int | None, recorded_at: datetime | None
                ) -> tuple[Basis, Neighbours | None]:
    at = views.basis(conn, s, when, position, recorded_at)
    return at, views.neighbours(conn, s, tenant, space, entity, depth, at)


def _mentioning(conn: Any, s: str, tenant: str, space: str, entity: str, when: datetime,
                position: int | None, recorded_at: datetime | None, limit: int
                ) -> tuple[Basis, list[Item] | None]:
    at = views.basis(conn, s, when, position, recorded_at)
    return at, views.items_mentioning(conn, s, tenant, space, entity, at, limit)


def _no_entity(entity: str, space: str, at: Basis) -> Problem:
    return Problem(404, "not_found", f"entity {entity!r} not found in space {space!r} as of "
                   f"position {at.position}")


# --- small parsers ----------------------------------------------------------------------------

def _needs(min_position: int | None, as_of_position: int | None) -> int | None:
    # An as-of position the projection has not reached yet would name a basis the answer does
    # not reflect: wait for it like for min_position (503 if it never comes).
    wanted = [p for p in (min_position, as_of_position) if p is not None]
    return max(wanted) if wanted else None


def _body(content: dict[str, Any], status: int = 200) -> Response:
    return Response(orjson.dumps(content), status_code=status, media_type="application/json")


def _json(model: BaseModel) -> Response:
    # Serialised by the model itself; returning a Response also spares FastAPI validating
    # the answer a second time against the route's response_model (which documents it).
    return Response(model.model_dump_json(), media_type="application/json")


def encode_cursor(position: int) -> str:
    """An opaque, resumable position in the change feed."""
    return base64.urlsafe_b64encode(orjson.dumps({"v": 1, "p": position})).decode().rstrip("=")


def _cursor(value: str | None) -> int:
    if value is None:
        return 0
    try:
        decoded = orjson.loads(base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)))
        position = decoded["p"]
        if decoded.get("v") != 1 or not isinstance(position, int) or position < 0:
            raise ValueError(value)
    except (binascii.Error, orjson.JSONDecodeError, ValueError, KeyError, TypeError):
        raise Problem(400, "invalid_cursor", "not a cursor this service issued",
                      "query.after") from None
    return position


def _uuid(value: str, path: str) -> str:
    try:
        return str(UUID(value))
    except ValueError:
        raise Problem(422, "invalid_request", f"{value!r} is not a UUID", path) from None

