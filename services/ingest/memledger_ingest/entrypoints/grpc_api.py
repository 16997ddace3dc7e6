"""The ingest gRPC API (``memledger.v1.Ingest``): the HTTP write routes over gRPC.

A ``CommandRequest`` names a command and carries the body its HTTP route takes; it is validated
by the same command models, refused with the same problems (``problems``) and committed by the
same writer, so results, field paths and idempotency are those of HTTP.
"""

from typing import Any, TypeVar

import grpc
import orjson
from google.protobuf import json_format
from pydantic import BaseModel, ValidationError
from typing_extensions import override

from memledger_ingest.core.erasure import Erasure, LegalHold
from memledger_ingest.core.writer import CommandResult, GroupCommitWriter, Rejected
from memledger_ingest.domain.errors import DomainError
from memledger_ingest.entrypoints.access import actor_of, client_refusal
from memledger_ingest.entrypoints.http import (
    ERASURE_WAIT_SECONDS,
    HttpError,
    _subject_id,
)
from memledger_ingest.entrypoints.problems import (
    Problem,
    invalid_request,
    malformed,
    refused,
    repeated,
    unavailable,
)
from memledger_platform.auth import Principal
from memledger_platform.grpc_server import (
    PrincipalResolver,
    Refusal,
    Register,
    RpcContext,
    caller,
    refusal,
    unary,
)
from memledger_platform.jsonbody import repeated_key
from memledger_schemas.api.erasure import ErasureReceipt
from memledger_schemas.commands import BY_NAME, CommandBase, CommandBatch
from memledger_schemas.grpc.v1 import ingest_pb2 as pb
from memledger_schemas.grpc.v1 import ingest_pb2_grpc

M = TypeVar("M", bound=BaseModel)
TRANSPORT = "grpc"
"""The actor of a write without an API key (HTTP writes ``http``)."""


class IngestServicer(ingest_pb2_grpc.IngestServicer):
    def __init__(self, writer: GroupCommitWriter, resolve: PrincipalResolver,
                 erasure: Erasure | None = None) -> None:
        self._writer = writer
        self._resolve = resolve
        self._erasure = erasure

    def register(self, server: grpc.aio.Server) -> None:
        ingest_pb2_grpc.add_IngestServicer_to_server(self, server)

    @override
    @unary
    async def Submit(self, request: pb.CommandRequest, context: RpcContext) -> pb.WriteResult:
        who = await caller(context, self._resolve)
        model = _model(request.command, "command")
        command = _validated(model, _body(request, ""))
        results = await self._submit(who, [command], context, batch=False)
        return _result(results[0])

    @override
    @unary
    async def SubmitBatch(self, request: pb.BatchRequest, context: RpcContext) -> pb.BatchResult:
        who = await caller(context, self._resolve)
        bodies = [_tagged(c, f"commands.{i}.") for i, c in enumerate(request.commands)]
        batch = _validated(CommandBatch, {"commands": bodies})
        results = await self._submit(who, batch.commands, context, batch=True)
        return pb.BatchResult(position=max(r.position for r in results),
                              results=[_result(r) for r in results])

    @override
    @unary
    async def Erase(self, request: pb.EraseRequest, context: RpcContext) -> pb.ErasureReceipt:
        who = await caller(context, self._resolve)
        if self._erasure is None:
            raise refusal(404, "not_found", "erasure is served only where personal data is "
                          "sealed (MEMLEDGER_SEAL_PERSONAL_DATA)")
        if not who.may("admin"):
            raise refusal(403, "forbidden", "erasing a data subject needs an admin key",
                          "metadata.authorization")
        try:
            subject = _subject_id(request.subject_id)
            receipt = await self._erasure.erase(
                who.tenant, subject, request.reason if request.HasField("reason") else None,
                actor=f"key:{who.key_id or 'local'}", wait_seconds=ERASURE_WAIT_SECONDS)
        except HttpError as error:  # the subject id, named as this request's field
            body = error.problem.body()
            for field in body["error"]["fields"]:
                field["path"] = str(field["path"]).removeprefix("path.")
            raise Refusal(error.problem.status, body) from None
        except LegalHold as hold:
            raise refusal(409, "legal_hold", str(hold), "subject_id") from None
        return json_format.ParseDict(ErasureReceipt.model_validate(receipt).model_dump(
            mode="json"), pb.ErasureReceipt())

    async def _submit(self, who: Principal, commands: list[Any], context: RpcContext, *,
                      batch: bool) -> list[CommandResult]:
        problem = client_refusal(who, commands, batch=batch)
        if problem is not None:
            raise _refusal(problem)
        traceparent = next((v for k, v in context.invocation_metadata() or ()
                            if k == "traceparent" and isinstance(v, str)), None)
        try:
            return await self._writer.submit(who.tenant, commands,
                                             actor=actor_of(who, TRANSPORT),
                                             traceparent=traceparent)
        except (Rejected, DomainError) as error:
            raise _refusal(refused(error, batch=batch)) from None
        except Exception as error:
            raise _refusal(unavailable(error)) from None


def registrar(writer: GroupCommitWriter, resolve: PrincipalResolver,
              erasure: Erasure | None = None) -> Register:
    """What a gRPC server needs to serve ingest (``resolve``: a caller check needing the write
    role, ``grpc_server.principal_resolver``; ``erasure``: where personal data is sealed)."""
    return IngestServicer(writer, resolve, erasure).register


def _model(name: str, path: str) -> type[CommandBase]:
    model = BY_NAME.get(name)
    if model is None:
        raise _refusal(malformed(path, f"unknown command {name!r}; one of: "
                                       f"{', '.join(sorted(BY_NAME))}"))
    return model


def _body(request: pb.CommandRequest, prefix: str) -> dict[str, Any]:
    """The command's JSON body, with the request's idempotency key merged in."""
    raw = (request.json_body or "{}").encode()
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise _refusal(malformed(f"{prefix}json_body", f"not valid JSON: {error}")) from None
    if not isinstance(body, dict):
        raise _refusal(malformed(f"{prefix}json_body", "must be a JSON object"))
    twice = repeated_key(raw, body)
    if twice is not None:
        raise _refusal(repeated(prefix + twice))
    if request.HasField("idempotency_key"):
        key = body.setdefault("idempotency_key", request.idempotency_key)
        if key != request.idempotency_key:
            raise _refusal(malformed(f"{prefix}idempotency_key", f"json_body says {key!r} but "
                                     f"the request says {request.idempotency_key!r}"))
    return body


def _tagged(request: pb.CommandRequest, prefix: str) -> dict[str, Any]:
    """A batch member as the HTTP batch body has it: its body tagged with its command."""
    _model(request.command, f"{prefix}command")
    body = _body(request, prefix)
    if body.setdefault("command", request.command) != request.command:
        raise _refusal(malformed(f"{prefix}command", f"json_body says {body['command']!r} "
                                 f"but the request says {request.command!r}"))
    return body


def _validated(model: type[M], body: dict[str, Any]) -> M:
    try:
        return model.model_validate(body)
    except ValidationError as error:
        raise _refusal(invalid_request(error)) from None


def _result(result: CommandResult) -> pb.WriteResult:
    return pb.WriteResult(command=result.command, event_ids=result.event_ids,
                          position=result.position, positions=result.positions,
                          stream_version=result.stream_version, ids=result.ids,
                          duplicate=result.duplicate)


def _refusal(problem: Problem) -> Refusal:
    return Refusal(problem.status, problem.body())
