"""What the query gRPC methods share: a request read as the HTTP parameters it mirrors, an
answer converted field for field, and the HTTP read helpers' problems as refusals."""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeVar

from google.protobuf import json_format
from google.protobuf.message import Message
from pydantic import BaseModel, ValidationError

from memledger_platform.grpc_server import Refusal, refusal
from memledger_query.entrypoints.api import Problem

P = TypeVar("P", bound=BaseModel)
Msg = TypeVar("Msg", bound=Message)


def params(model: type[P], request: Message) -> P:
    """A request message read as the HTTP JSON body it mirrors, validated like it."""
    body = json_format.MessageToDict(request, preserving_proto_field_name=True)
    try:
        return model.model_validate(body)
    except ValidationError as error:
        fields = [{"path": ".".join(str(p) for p in e["loc"]), "reason": e["msg"]}
                  for e in error.errors(include_url=False)]
        text = "; ".join(f"{f['path'] or 'request'}: {f['reason']}" for f in fields)
        raise Refusal(422, {"error": {"status": 422, "code": "invalid_request",
                                      "message": text, "fields": fields}}) from None


def message(answer: BaseModel, into: Msg) -> Msg:
    """``answer`` (an HTTP DTO) as the message ``into``, field for field (a field the message
    lacks is a ``ParseError``: the parity test calls every method)."""
    return json_format.ParseDict(answer.model_dump(mode="json"), into)


@contextmanager
def refusing() -> Iterator[None]:
    """The HTTP read helpers' ``Problem`` as a refusal, its field path named after the request
    message's field (``query.after`` over HTTP is ``after`` here)."""
    try:
        yield
    except Problem as problem:
        raise refusal(problem.status, problem.code, problem.message,
                      _field(problem.path), **problem.extra) from None


def _field(path: str | None) -> str | None:
    if path is None:
        return None
    source, dot, name = path.partition(".")
    return name if dot and source in ("path", "query", "body") else path
