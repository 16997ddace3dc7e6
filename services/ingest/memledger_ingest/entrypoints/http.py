"""The ingest HTTP API: one POST route per command (its path on the command model), a batch
route, ``/health`` and ``/openapi.json``. Bodies are validated by the command models themselves
so the field paths in a 422 are the same as over NATS intake and in a batch.

Plain Starlette rather than FastAPI on this hot path: the routes do their own validation, and
FastAPI's dependency machinery cost about half of the CPU of a single write (docs/adr/0003)."""

import asyncio
import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, TypeAdapter, ValidationError
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route, Router
from starlette.types import ASGIApp, Receive, Scope, Send

from memledger_ingest.core.erasure import Erasure, LegalHold
from memledger_ingest.core.writer import CommandResult, GroupCommitWriter, Rejected
from memledger_ingest.domain.errors import DomainError
from memledger_ingest.entrypoints.access import actor_of, client_refusal
from memledger_ingest.entrypoints.openapi_doc import finish
from memledger_ingest.entrypoints.problems import (
    Problem,
    batch_body,
    invalid_request,
    malformed,
    not_json,
    refused,
    repeated,
    result_body,
    unavailable,
)
from memledger_platform import telemetry
from memledger_platform.auth import TENANT_HEADER, Denied, Gate, Principal, require
from memledger_platform.jsonbody import is_json, repeated_key
from memledger_platform.limits import retry_after
from memledger_schemas.api.erasure import ErasureReceipt
from memledger_schemas.commands import COMMANDS, NUL_FREE, CommandBase, CommandBatch, nul_free
from memledger_schemas.types import SLUG_PATTERN, ShortText

BATCH_PATH = "/v1/batch"
ERASE_PATH = "/v1/subjects/{subject_id:path}/erase"
"""A subject id may hold a "/" (ids are the client's); sent as %2F it arrives decoded."""
ERASURE_WAIT_SECONDS = 10.0
"""How long an erasure request waits for the read models' reports before answering (the
receipt then says ``"complete": false``; ``memledger erase`` can wait longer)."""
Health = Callable[[], Awaitable[dict[str, Any]]]
M = TypeVar("M", bound=BaseModel)


class HttpError(Exception):
    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


def create_app(writer: GroupCommitWriter, health: Health, default_tenant: str | None,
               gate: Gate | None = None, erasure: Erasure | None = None) -> Router:
    """The ASGI app; nothing here connects to anything (the writer, health and key gate are
    given; without a gate, authentication is off).

    A bare router: every route turns its own failures into a problem response, so the
    middleware layers of a full Starlette app would only add cost."""
    tenant_of = _tenant_resolver(gate or Gate(None, default_tenant))
    traced = [Middleware(telemetry.TracingMiddleware)]  # on ingest's routes, not on a mount
    routes = [Route(model.http_path, _command_route(model, writer, tenant_of), methods=["POST"],
                    name=_name(model), middleware=traced) for model in COMMANDS]
    routes.append(Route(BATCH_PATH, _batch_route(writer, tenant_of), methods=["POST"],
                        name="batch", middleware=traced))
    if erasure is not None:
        routes.append(Route(ERASE_PATH, _erase_route(erasure, tenant_of),
                            methods=["POST"], name="erase_subject", middleware=traced))
    spec = openapi(None if erasure is None else ERASE_PATH)

    async def health_route(_: Request) -> Response:
        found = await health()
        return _json(200 if found.get("status") == "ok" else 503, found)

    async def openapi_route(_: Request) -> Response:
        return _json(200, spec)

    routes.append(Route("/health", health_route, methods=["GET"], name="health"))
    routes.append(Route("/openapi.json", openapi_route, methods=["GET"], name="openapi"))
    return Router(routes=routes, default=_no_route)


def behind(app: Router, also: ASGIApp) -> None:
    """Serve ``also`` behind ``app``'s routes (the embedded mode: the query app behind
    ingest's), for every path: a mount's pattern takes no newline, and such a path would meet
    an ingest route of another method instead (a plain-text 405)."""
    mount = Mount("/", app=also)
    mount.path_regex = re.compile(mount.path_regex.pattern, re.DOTALL)
    app.routes.append(mount)


async def _no_route(scope: Scope, receive: Receive, send: Send) -> None:
    """A path no route takes (ingest on its own; ``behind`` takes the rest in the embedded
    mode): a problem like every other refusal, not Starlette's plain-text 404."""
    problem = Problem(404, "not_found", "no such route", ({"path": "path", "reason":
                                                           "no such route"},))
    await _json(404, problem.body())(scope, receive, send)


Resolver = Callable[[Request], Awaitable[Principal]]


def _command_route(model: type[CommandBase], writer: GroupCommitWriter,
                   tenant_of: Resolver) -> Callable[[Request], Awaitable[Response]]:
    async def route(request: Request) -> Response:
        try:
            principal = await tenant_of(request)
            raw, body = await _json_body(request)
            body = _merge_path(body, request.path_params)
            command = _validate(model, body, raw, request.path_params.values())
            _may_write(principal, [command], batch=False)
            results = await _submit(writer, principal, [command], request, batch=False)
        except HttpError as error:
            return _json(error.problem.status, error.problem.body())
        return _json(200 if results[0].duplicate else 201, result_body(results[0]))

    return route


def _batch_route(writer: GroupCommitWriter, tenant_of: Resolver
                 ) -> Callable[[Request], Awaitable[Response]]:
    async def route(request: Request) -> Response:
        try:
            principal = await tenant_of(request)
            raw, body = await _json_body(request)
            batch = _validate(CommandBatch, body, raw)
            _may_write(principal, batch.commands, batch=True)
            results = await _submit(writer, principal, batch.commands, request, batch=True)
        except HttpError as error:
            return _json(error.problem.status, error.problem.body())
        return _json(201, batch_body(results))

    return route


def _erase_route(erasure: Erasure, tenant_of: Resolver
                 ) -> Callable[[Request], Awaitable[Response]]:
    async def route(request: Request) -> Response:
        try:
            principal = await tenant_of(request)
            if not principal.may("admin") or principal.spaces is not None:
                raise HttpError(_denied(Denied(
                    403, "forbidden", "erasing a data subject needs an admin key for the "
                    "whole tenant", "header.Authorization")))
            subject = _subject_id(request.path_params["subject_id"])
            body = (await _json_body(request))[1] if await request.body() else {}
            reason = body.get("reason")
            if reason is not None and not isinstance(reason, str):
                raise HttpError(malformed("reason", "must be a string"))
            receipt = await erasure.erase(principal.tenant, subject,
                                          reason, actor=f"key:{principal.key_id or 'local'}",
                                          wait_seconds=ERASURE_WAIT_SECONDS)
        except LegalHold as hold:
            return _json(409, Problem(409, "legal_hold", str(hold), (
                {"path": "path.subject_id", "reason": str(hold)},)).body())
        except HttpError as error:
            return _json(error.problem.status, error.problem.body())
        return _json(200, receipt)

    return route


async def _submit(writer: GroupCommitWriter, principal: Principal, commands: list[Any],
                  request: Request, *, batch: bool) -> list[CommandResult]:
    try:
        # the request's span when tracing is on; the caller's header as it came otherwise
        traceparent = telemetry.current_traceparent() or request.headers.get("traceparent")
        return await writer.submit(principal.tenant, commands,
                                   actor=actor_of(principal, "http"), traceparent=traceparent)
    except (Rejected, DomainError) as error:
        raise HttpError(refused(error, batch=batch)) from None
    except Exception as error:
        raise HttpError(unavailable(error)) from None


def _tenant_resolver(gate: Gate) -> Resolver:
    async def tenant_of(request: Request) -> Principal:
        headers, client = request.headers, request.client and request.client.host
        try:
            if gate.required:  # a key store lookup: off the event loop
                return await asyncio.to_thread(gate.principal, headers.get("authorization"),
                                               headers.get(TENANT_HEADER), client)
            return gate.principal(None, headers.get(TENANT_HEADER), client)
        except Denied as denied:
            raise HttpError(_denied(denied)) from None

    return tenant_of


def _may_write(principal: Principal, commands: Sequence[CommandBase], *, batch: bool) -> None:
    """Writing needs the write role and a grant for every space written to; a command of no
    space (registering an agent) needs a key for the whole tenant; and ``access`` has the
    rest (no body actor, the services' commands, legal holds)."""
    spaces = [getattr(c, "space_id", None) for c in commands]
    try:
        require(principal, "write", [s for s in spaces if s is not None])
        if None in spaces and principal.spaces is not None:
            raise Denied(403, "forbidden", "this command concerns the whole tenant; this key "
                         "is limited to some spaces", "header.Authorization")
    except Denied as denied:
        raise HttpError(_denied(denied)) from None
    problem = client_refusal(principal, commands, batch=batch)
    if problem is not None:
        raise HttpError(problem)


def _denied(denied: Denied) -> Problem:
    extra = {} if denied.retry_after is None else {"retry_after_seconds": denied.retry_after}
    return Problem(denied.status, denied.code, denied.message,
                   ({"path": denied.path, "reason": denied.message},), extra)


async def _json_body(request: Request) -> tuple[bytes, dict[str, Any]]:
    """The body as sent, and as the JSON object it holds."""
    content_type = request.headers.get("content-type")
    if not is_json(content_type):
        raise HttpError(not_json(str(content_type)))
    raw = await request.body()
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise HttpError(malformed("body", f"not valid JSON: {error}")) from None
    if not isinstance(body, dict):
        raise HttpError(malformed("body", "must be a JSON object"))
    twice = repeated_key(raw, body)
    if twice is not None:
        raise HttpError(repeated(twice))
    return raw, body


_SUBJECT_ID = TypeAdapter(ShortText)
"""The subject ids commands accept (``subject_id``), so any subject written can be erased."""


def _subject_id(subject: str) -> str:
    if "\x00" in subject:  # as the commands refuse it: PostgreSQL's text cannot hold it
        raise HttpError(malformed("path.subject_id", "must not contain the NUL character"))
    try:
        return _SUBJECT_ID.validate_python(subject)
    except ValidationError as error:
        raise HttpError(invalid_request(error, ("path", "subject_id"))) from None


def _merge_path(body: dict[str, Any], path: dict[str, str]) -> dict[str, Any]:
    for key, value in path.items():
        if key in body and str(body[key]) != value:
            raise HttpError(malformed(key, f"body says {body[key]!r} but the path says {value!r}"))
        body[key] = value
    return body


def _validate(model: type[M], body: dict[str, Any], raw: bytes,
              path: Iterable[str] = ()) -> M:
    """``body`` (parsed from ``raw``, with the ``path``'s parameters) as a ``model``; its
    fields are not walked for a NUL character when neither ``raw`` nor the path can hold
    one (``commands.nul_free``)."""
    clean = nul_free(raw) and not any("\x00" in value for value in path)
    try:
        return model.model_validate(body, context={NUL_FREE: True} if clean else None)
    except ValidationError as error:
        raise HttpError(invalid_request(error)) from None


def _json(status: int, body: dict[str, Any]) -> Response:
    wait = body.get("error", {}).get("retry_after_seconds") if status in (429, 503) else None
    headers = None if wait is None else {"Retry-After": retry_after(wait)}
    return Response(orjson.dumps(body), status_code=status, media_type="application/json",
                    headers=headers)


def _name(model: type[CommandBase]) -> str:
    return str(model.model_fields["command"].default)


class WriteResult(BaseModel):
    """What a committed command wrote (``duplicate``: an idempotent retry, nothing new)."""

    command: str
    event_ids: list[str]
    position: int
    positions: list[int]
    stream_version: int
    ids: dict[str, str]
    duplicate: bool


class BatchResult(BaseModel):
    position: int
    results: list[WriteResult]


class ErrorBody(BaseModel):
    error: dict[str, Any]


class EraseRequest(BaseModel):
    """Erase a data subject: destroy its keys and record ``subject.erased``.

    Needs an admin key for the whole tenant."""

    reason: str | None = None


def openapi(erase_path: str | None = None) -> dict[str, Any]:
    """The OpenAPI 3.1 document, generated from the command models (``erase_path``: the
    erasure route's, served when personal data is sealed)."""
    paths: dict[str, Any] = {}
    for model in COMMANDS:
        paths[model.http_path] = {"post": _operation(model, WriteResult, _name(model))}
    paths[BATCH_PATH] = {"post": _operation(CommandBatch, BatchResult, "batch")}
    if erase_path is not None:
        erase = _operation(EraseRequest, ErasureReceipt, "erase_subject", erase_path)
        erase["requestBody"]["required"] = False
        responses = erase["responses"]
        responses["200"] = {**responses.pop("201"), "description": "the receipt"}
        responses["409"]["description"] = "the subject has data in a space under legal hold"
        paths[re.sub(r":\w+}", "}", erase_path)] = {"post": erase}  # no path converter
    paths["/health"] = {"get": {"operationId": "health", "responses": {
        "200": {"description": "the service, its writer and its relay lag"},
        "503": {"description": "the writer is stuck: a commit has run past its deadline"}}}}
    return finish({
        "openapi": "3.1.0", "info": {"title": "memledger ingest", "version": "1"},
        "paths": paths, "components": {"schemas": _components(), "securitySchemes": {
            "apiKey": {"type": "http", "scheme": "bearer",
                       "description": "mlk_… (MEMLEDGER_AUTH=required)"}}},
        "security": [{"apiKey": []}, {}]})


def _operation(body: type[BaseModel], result: type[BaseModel], name: str,
               path: str | None = None) -> dict[str, Any]:
    error = _content(ErrorBody)
    path_params = [{"name": p, "in": "path", "required": True, "schema": {"type": "string"}}
                   for p in re.findall(r"{(\w+)", path or str(getattr(body, "http_path", "")))]
    header = {"name": TENANT_HEADER, "in": "header", "required": False,
              "schema": {"type": "string", "pattern": SLUG_PATTERN}}
    return {"operationId": name, "summary": (body.__doc__ or name).strip().splitlines()[0],
            "parameters": [*path_params, header], "requestBody": {
                "required": True, "content": _content(body)},
            "responses": {"201": {"description": "committed", "content": _content(result)},
                          "200": {"description": "idempotent repeat", "content": _content(result)},
                          **{code: {"description": text, "content": error} for code, text in (
                              ("401", "no API key, or an unknown or revoked one"),
                              ("403", "the key's role or space grants do not allow it, or "
                                      "only memledger's own services send it"),
                              ("404", "unknown space, item, session or entity"),
                              ("409", "conflict with the current version"),
                              ("415", "a body not labelled as JSON (Content-Type)"),
                              ("422", "invalid request, with field paths"),
                              ("429", "over a rate limit: retry after Retry-After seconds"),
                              ("503", "event store unavailable, a commit past its deadline or a "
                                      "stop (retryable; Retry-After)"))}}}


def _content(model: type[BaseModel]) -> dict[str, Any]:
    return {"application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}


def _components() -> dict[str, Any]:
    components: dict[str, Any] = {}
    models: tuple[type[BaseModel], ...] = (*COMMANDS, CommandBatch, WriteResult, BatchResult,
                                           ErrorBody, EraseRequest, ErasureReceipt)
    for model in models:
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(schema.pop("$defs", {}))
        components[model.__name__] = schema
    return components
