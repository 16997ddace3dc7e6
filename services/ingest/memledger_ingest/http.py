"""The ingest HTTP API: one POST route per command (its path on the command model), a batch
route, and ``/health``. Bodies are validated by the command models themselves so the field paths
in a 422 are the same as over NATS intake and in a batch."""

from collections.abc import Awaitable, Callable
import re
from typing import Any, TypeVar

import orjson
from fastapi import FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import Response
from pydantic import BaseModel, ValidationError

from memledger_schemas.commands import COMMANDS, CommandBase, CommandBatch
from memledger_schemas.types import SLUG_PATTERN

from memledger_ingest.domain.errors import DomainError
from memledger_ingest.problems import (
    Problem,
    batch_body,
    invalid_request,
    malformed,
    refused,
    result_body,
    unavailable,
)
from memledger_ingest.writer import CommandResult, GroupCommitWriter, Rejected

TENANT_HEADER = "X-Memledger-Tenant"
BATCH_PATH = "/v1/batch"
Health = Callable[[], Awaitable[dict[str, Any]]]
M = TypeVar("M", bound=BaseModel)


class HttpError(Exception):
    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


def create_app(writer: GroupCommitWriter, health: Health, default_tenant: str | None) -> FastAPI:
    """The ASGI app; nothing here connects to anything (the writer and health are given)."""
    app = FastAPI(title="memledger ingest", version="1", openapi_url="/openapi.json")
    tenant_of = _tenant_resolver(default_tenant)
    for model in COMMANDS:
        app.add_api_route(model.http_path, _command_route(model, writer, tenant_of),
                          methods=["POST"], name=_name(model), status_code=201,
                          openapi_extra=_body_doc(model), summary=model.__doc__)
    app.add_api_route(BATCH_PATH, _batch_route(writer, tenant_of), methods=["POST"],
                      name="batch", status_code=201, openapi_extra=_body_doc(CommandBatch))

    async def health_route() -> Response:
        return _json(200, await health())

    app.add_api_route("/health", health_route, methods=["GET"], name="health")
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def _command_route(model: type[CommandBase], writer: GroupCommitWriter,
                   tenant_of: Callable[[Request], str]) -> Callable[[Request], Awaitable[Response]]:
    async def route(request: Request) -> Response:
        try:
            tenant = tenant_of(request)
            body = _merge_path(await _json_body(request), request.path_params)
            command = _validate(model, body)
            results = await _submit(writer, tenant, [command], request, batch=False)
        except HttpError as error:
            return _json(error.problem.status, error.problem.body())
        return _json(200 if results[0].duplicate else 201, result_body(results[0]))

    return route


def _batch_route(writer: GroupCommitWriter, tenant_of: Callable[[Request], str]
                 ) -> Callable[[Request], Awaitable[Response]]:
    async def route(request: Request) -> Response:
        try:
            tenant = tenant_of(request)
            batch = _validate(CommandBatch, await _json_body(request))
            results = await _submit(writer, tenant, batch.commands, request, batch=True)
        except HttpError as error:
            return _json(error.problem.status, error.problem.body())
        return _json(201, batch_body(results))

    return route


async def _submit(writer: GroupCommitWriter, tenant: str, commands: list[Any],
                  request: Request, *, batch: bool) -> list[CommandResult]:
    try:
        return await writer.submit(tenant, commands, actor="http",
                                   traceparent=request.headers.get("traceparent"))
    except (Rejected, DomainError) as error:
        raise HttpError(refused(error, batch=batch)) from None
    except Exception as error:  # noqa: BLE001  (the store is down: say so, lose nothing)
        raise HttpError(unavailable(error)) from None


def _tenant_resolver(default: str | None) -> Callable[[Request], str]:
    pattern = re.compile(SLUG_PATTERN)

    def tenant_of(request: Request) -> str:
        tenant = request.headers.get(TENANT_HEADER) or default
        if tenant is None:
            raise HttpError(malformed(f"header.{TENANT_HEADER}", "required"))
        if not pattern.fullmatch(tenant):
            raise HttpError(malformed(f"header.{TENANT_HEADER}", "not a valid tenant id"))
        return tenant

    return tenant_of


async def _json_body(request: Request) -> dict[str, Any]:
    try:
        body = orjson.loads(await request.body())
    except orjson.JSONDecodeError as error:
        raise HttpError(malformed("body", f"not valid JSON: {error}")) from None
    if not isinstance(body, dict):
        raise HttpError(malformed("body", "must be a JSON object"))
    return body


def _merge_path(body: dict[str, Any], path: dict[str, str]) -> dict[str, Any]:
    for key, value in path.items():
        if key in body and str(body[key]) != value:
            raise HttpError(malformed(key, f"body says {body[key]!r} but the path says {value!r}"))
        body[key] = value
    return body


def _validate(model: type[M], body: dict[str, Any]) -> M:
    try:
        return model.model_validate(body)
    except ValidationError as error:
        raise HttpError(invalid_request(error)) from None


def _json(status: int, body: dict[str, Any]) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


def _name(model: type[CommandBase]) -> str:
    return str(model.model_fields["command"].default)


def _body_doc(model: type[BaseModel]) -> dict[str, Any]:
    schema = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {"requestBody": {"required": True,
                            "content": {"application/json": {"schema": schema}}}}


def _openapi(app: FastAPI) -> dict[str, Any]:
    if app.openapi_schema:
        return app.openapi_schema
    spec = get_openapi(title=app.title, version=app.version, routes=app.routes)
    components = spec.setdefault("components", {}).setdefault("schemas", {})
    for model in (*COMMANDS, CommandBatch):
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(schema.pop("$defs", {}))
        components[model.__name__] = schema
    app.openapi_schema = spec
    return spec
