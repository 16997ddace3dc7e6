"""What every query route shares: the refusal (``Problem``) and the statuses each route
documents, the annotated parameter types, the caller dependency, and waiting for the read
models (read-your-writes)."""

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, TypeVar
from uuid import UUID

import orjson
from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import Response
from fastapi.routing import APIRoute
from pydantic import AfterValidator, BaseModel

from memledger_platform.auth import TENANT_HEADER, Principal
from memledger_platform.jsonbody import is_json, repeated_key
from memledger_platform.limits import retry_after
from memledger_query.core import views
from memledger_query.core.reader import NotYetVisible, Reader
from memledger_schemas.api.reads import Basis
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
        response = body({"error": {"status": self.status, "code": self.code,
                                   "message": self.message, "fields": fields, **self.extra}},
                        self.status)
        if "retry_after_seconds" in self.extra:
            response.headers["Retry-After"] = retry_after(self.extra["retry_after_seconds"])
        return response


class JsonBodyRoute(APIRoute):
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


def router(**options: Any) -> APIRouter:
    """An ``APIRouter`` whose routes check their JSON bodies (``JsonBodyRoute``): a router's
    routes keep their own class when an app includes them."""
    return APIRouter(route_class=JsonBodyRoute, **options)


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
Limit = Annotated[int, Query(ge=1, le=1_000)]

PRINCIPAL = "principal"
"""Where the authentication middleware leaves the caller in the request's state."""


async def key_holder(request: Request) -> Principal:
    """The caller, as the authentication middleware resolved it (its API key and the tenant
    header)."""
    found: Principal = getattr(request.state, PRINCIPAL)
    return found


async def caller(request: Request, x_tenant: Tenant = None) -> Principal:
    """The caller, for a route that documents the tenant header: the header is validated here
    (a value that is not a slug is 422 naming it) and was resolved against the key by the
    authentication middleware."""
    return await key_holder(request)


Caller = Annotated[Principal, Depends(caller)]
"""The caller of a route whose OpenAPI document names the tenant header."""
KeyHolder = Annotated[Principal, Depends(key_holder)]
"""The caller of a tenant-wide listing (its tenant is its key's)."""


@dataclass(frozen=True)
class Visible:
    """Read-your-writes: wait until the read models reached ``min_position`` (up to
    ``wait_ms``)."""

    min_position: MinPosition = None
    wait_ms: WaitMs = 2_000

    def needing(self, as_of_position: int | None) -> "Visible":
        """Waiting for ``as_of_position`` too: an as-of position the projection has not
        reached yet would name a basis the answer does not reflect (503 if it never comes)."""
        return Visible(needs(self.min_position, as_of_position), self.wait_ms)


@dataclass(frozen=True)
class At:
    """A basis asked for, valid time fixed: ``views.basis`` finds it on a connection."""

    valid_at: datetime
    position: int | None = None
    recorded_at: datetime | None = None

    def basis(self, conn: Any, s: str) -> Basis:
        return views.basis(conn, s, self.valid_at, self.position, self.recorded_at)


@dataclass(frozen=True)
class TimeQuery:
    """The basis a read asks for: valid time (default now) and system time (a position or a
    timestamp; default everything projected so far)."""

    valid_at: ValidAt = None
    as_of_position: AsOf = None
    recorded_at: RecordedAt = None

    def at(self, now: datetime) -> At:
        return At(self.valid_at or now, self.as_of_position, self.recorded_at)


def query_model(cls: Callable[..., T]) -> Any:
    """A dependency that builds ``cls`` (a dataclass of query parameters) from the request's
    parameters, awaited in the event loop: a class given to ``Depends`` as it is would be
    called on the thread pool, one thread hop for each such parameter of each request."""

    async def build(**parameters: Any) -> T:
        return cls(**parameters)

    built: Callable[..., Awaitable[T]] = build
    built.__signature__ = inspect.signature(cls).replace(  # type: ignore[attr-defined]
        return_annotation=cls)
    return Depends(built)


Wait = Annotated[Visible, query_model(Visible)]
Travel = Annotated[TimeQuery, query_model(TimeQuery)]


def needs(min_position: int | None, as_of_position: int | None) -> int | None:
    """The position a read waits for: the later of the two it names."""
    return max([p for p in (min_position, as_of_position) if p is not None], default=None)


async def read_visible(reader: Reader, wait: Visible, fn: Callable[..., T], *args: Any) -> T:
    """Run the read function ``fn`` once the read models reached ``wait.min_position`` (503
    ``not_yet_visible`` if they do not within ``wait.wait_ms``)."""
    try:
        await reader.wait_for(wait.min_position, wait.wait_ms)
    except NotYetVisible as late:
        raise Problem(503, "not_yet_visible", str(late), "query.min_position",
                      projected_position=late.reached,
                      retry_after_seconds=RETRY_AFTER_SECONDS) from None
    return await asyncio.to_thread(reader.run, fn, *args)


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


def body(content: dict[str, Any], status: int = 200) -> Response:
    return Response(orjson.dumps(content), status_code=status, media_type="application/json")


def json_answer(model: BaseModel) -> Response:
    """``model`` serialised by itself; returning a Response also spares FastAPI validating
    the answer a second time against the route's response_model (which documents it)."""
    return Response(model.model_dump_json(), media_type="application/json")


def uuid_of(value: str, path: str) -> str:
    """``value`` as a canonical UUID (422 naming ``path`` if it is not one)."""
    try:
        return str(UUID(value))
    except ValueError:
        raise Problem(422, "invalid_request", f"{value!r} is not a UUID", path) from None
