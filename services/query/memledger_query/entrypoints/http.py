"""The query HTTP API (FastAPI, OpenAPI at ``/v1/query/openapi.json``).

Every read is scoped by tenant (``X-Memledger-Tenant``) and space, answers with its basis, and
accepts ``min_position`` (read-your-writes: wait up to ``wait_ms`` for the projection to reach
the position a write returned). Time travel: ``valid_at`` (default now) and ``as_of_position``
or ``recorded_at`` (default: everything projected so far); ``source=replay`` answers an item
read by replaying the events instead (slow, authoritative).
"""

import asyncio
import re
from urllib.parse import parse_qsl

import psycopg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memledger_platform import partitions
from memledger_platform.auth import TENANT_HEADER, Denied, Gate, Principal, require
from memledger_platform.clock import Clock, SystemClock
from memledger_platform.crypto import Opener
from memledger_platform.eventstore import EventStore
from memledger_platform.vectorindex.port import IndexUnavailable
from memledger_query.core.reader import Reader
from memledger_query.entrypoints import (
    changes_http,
    console_http,
    graph_http,
    health_http,
    items_http,
    listing,
    session_http,
    stats,
)
from memledger_query.entrypoints.api import (
    ERROR_RESPONSES,
    PRINCIPAL,
    RETRY_AFTER_SECONDS,
    JsonBodyRoute,
    Problem,
    body,
    within_head,
)

__all__ = ["Problem", "create_app"]


def create_app(reader: Reader, store: EventStore, default_tenant: str | None,
               gate: Gate | None = None, opener: Opener | None = None,
               clock: Clock | None = None) -> FastAPI:
    """The query app (``gate``: API keys; without one, authentication is off; ``clock``: what
    "now" is, the default valid time of a read)."""
    app = FastAPI(title="memledger query", version="1", openapi_url="/v1/query/openapi.json",
                  docs_url=None, redoc_url=None, responses=ERROR_RESPONSES)
    app.router.route_class = JsonBodyRoute  # before any route is added
    _errors(app)
    # Plain ASGI middleware: the decorator kind (BaseHTTPMiddleware) runs the rest of the
    # request in a task group of its own and streams the response through a queue, which
    # costs a search noticeably. The last added runs first.
    app.add_middleware(_WithinHead, reader=reader)
    app.add_middleware(_Authenticate, gate=gate or Gate(None, default_tenant))
    app.add_middleware(_LagHeaders, reader=reader)
    now = clock or SystemClock()
    for router in (items_http.router(items_http.ItemReads(reader, store, opener, now)),
                   changes_http.router(reader), session_http.messages_router(reader, now),
                   graph_http.router(reader, now), health_http.router(reader, store),
                   listing.router(reader, now), session_http.router(reader, now),
                   stats.router(reader, now), console_http.router()):
        app.include_router(router)
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


POSITIONS = ("as_of_position", "min_position")
"""The parameters that name a position of the event store."""


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
        return body({"error": {"status": 422, "code": "invalid_request", "message": message,
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
        setattr(request.state, PRINCIPAL, found)  # for the routes' ``Caller``
        partitions.reading_for(found.tenant)  # the request reads its tenant's partition
        await self.app(scope, receive, send)


async def _resolve(gate: Gate, request: Request) -> Principal:
    headers, client = request.headers, request.client and request.client.host
    if gate.required:  # a key store lookup: off the event loop
        return await asyncio.to_thread(gate.principal, headers.get("authorization"),
                                       headers.get(TENANT_HEADER), client)
    return gate.principal(None, headers.get(TENANT_HEADER), client)
