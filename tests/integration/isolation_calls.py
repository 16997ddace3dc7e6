"""Calling a case of the isolation matrix over HTTP or gRPC, and looking through the answer for
another tenant's strings."""

import asyncio
import base64
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import orjson
from google.protobuf import json_format, message_factory
from google.protobuf.message import Message

from memledger_platform.grpc_server import TENANT_METADATA, error_body
from tests.integration.isolation_cases import Fill, GrpcCase, HttpCase
from tests.integration.isolation_system import Owned, System


@dataclass(frozen=True)
class Answer:
    status: str
    """The HTTP status as a number, or the gRPC status code's name."""
    text: str
    """The body (gRPC: every message as JSON, or the error's details and body)."""
    sent: str
    """The request as sent (what it names itself is no leak when it comes back)."""


async def call_http(system: System, case: HttpCase, fill: Fill, token: str | None,
                    tenant: str | None = None) -> Answer:
    path, params, body = case.request(fill)
    sent = orjson.dumps([path, params, body]).decode()
    client = system.caller(token, tenant)
    for _ in range(20):  # a rate limit is a wait, not an answer
        response = await client.request(case.method, path, params=params, json=body)
        if response.status_code != 429:
            break
        await asyncio.sleep(float(response.headers.get("retry-after", "1")))
    return Answer(str(response.status_code), response.text, sent)


async def call_grpc(channel: grpc.aio.Channel, case: GrpcCase, fill: Fill, token: str | None,
                    tenant: str | None = None) -> Answer:
    request = case.request(fill)
    metadata = [(k, v) for k, v in (("authorization", token and f"Bearer {token}"),
                                    (TENANT_METADATA, tenant)) if v]
    answer = message_factory.GetMessageClass(case.method.output_type)
    path = f"/{case.method.containing_service.full_name}/{case.method.name}"
    sent = json_format.MessageToJson(request)
    try:
        if case.method.server_streaming:
            stream = channel.unary_stream(path, request_serializer=_serialized,
                                          response_deserializer=answer.FromString)
            found = [m async for m in stream(request, metadata=metadata, timeout=30)]
        else:
            unary = channel.unary_unary(path, request_serializer=_serialized,
                                        response_deserializer=answer.FromString)
            found = [await unary(request, metadata=metadata, timeout=30)]
    except grpc.aio.AioRpcError as error:
        body = orjson.dumps(error_body(error)).decode()
        return Answer(error.code().name, f"{error.details()}\n{body}", sent)
    return Answer("OK", "\n".join(json_format.MessageToJson(m, preserving_proto_field_name=True)
                                  for m in found), sent)


def _serialized(message: Message) -> bytes:
    return message.SerializeToString()


# --- whose strings ----------------------------------------------------------------------------

_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_DIGEST = re.compile(r"^[0-9a-f]{16}$")


def strings_in(text: str) -> set[str]:
    """Every string (keys included) in an answer's JSON (a gRPC stream: one per line run)."""
    try:
        documents: list[Any] = [orjson.loads(text)]
    except orjson.JSONDecodeError:
        documents = [orjson.loads(part) for part in re.split(r"\n(?=\{)", text)
                     if part.startswith("{")] if text.startswith("{") else [text]
    return set(_leaves(documents))


def _leaves(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, inner in value.items():
            yield key
            yield from _leaves(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _leaves(inner)


def distinctive(texts: set[str], owned: list[Owned]) -> set[str]:
    """The strings that say whose they are: a space's marker in them, an id, a digest (of the
    vector index's contents), a cursor."""
    markers = [o.marker for o in owned]
    return {t for t in texts if any(m in t for m in markers) or _UUID.match(t)
            or _DIGEST.match(t) or _is_cursor(t)}


def _is_cursor(text: str) -> bool:
    try:
        decoded = orjson.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (ValueError, orjson.JSONDecodeError):
        return False
    return isinstance(decoded, dict) and set(decoded) == {"v", "p"}


def leaks(answer: Answer, secrets: set[str], sent: str = "") -> list[str]:
    """The victim's strings in ``answer`` that the caller did not send itself (in this
    request, or in ``sent``: its earlier ones)."""
    return sorted(s for s in secrets if s in answer.text and s not in answer.sent
                  and s not in sent)
