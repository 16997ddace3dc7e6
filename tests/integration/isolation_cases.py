"""The cases of the isolation matrix, generated rather than listed: one per operation of the
OpenAPI documents the service serves (ingest's and the query service's) and one per method of
the proto services (``Submit`` once per command), so a new route or method is in the matrix by
construction.

A case builds its request from a ``Fill``: the ids of one tenant's space, named as the
parameters and body properties that carry them. Bodies are the smallest instance of the
operation's JSON Schema, with the ids filled in and a few ``OVERRIDES`` where a schema cannot
say what is valid (a vector as long as its ``dims``). A parameter the fill does not know, or a
schema it cannot make an instance of, raises ``Unfillable``, naming what to add where.
"""

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import orjson
from google.protobuf import message_factory
from google.protobuf.descriptor import FieldDescriptor, MethodDescriptor
from google.protobuf.message import Message

from memledger_schemas.grpc.v1 import ingest_pb2, query_pb2

Fill = dict[str, Any]
"""Values by the name of the parameter, property or proto field that carries them."""


class Unfillable(Exception):
    """The matrix cannot build a request for a case: the tables below need an entry."""


PATH_PARAMETERS = ("space_id", "item_id", "session_id", "message_id", "entity_id",
                   "relation_id", "retrieval_id", "subject_id")
"""The path parameters a fill must give (a route with another one fails the matrix)."""

ADDRESS_ONLY = ("subject",)
"""Path parameters that are also optional filters elsewhere (search's and a listing's
``subject``): filled only where they address the call, so that the filters stay open."""

BODY_PROPERTIES = (*PATH_PARAMETERS, "spaces", "superseded_by", "similar_to",
                   "merged_item_ids", "source_item_id", "source_entity", "target_entity",
                   "query", "threshold")
"""Body properties (and proto fields) filled with the fill's value wherever a schema has them,
optional or not: a request is then about the other tenant's things."""

QUERY_PARAMETERS: dict[str, Callable[[str, Fill], Any]] = {
    # name → its value for a path (None: left out)
    "after": lambda path, fill: fill["cursor"] if path.endswith("changes") else None,
    "session_id": lambda path, fill: fill["session_id"],
    "include_archived": lambda path, fill: "true",
}

OVERRIDES: dict[str, dict[str, Any]] = {
    # operationId → properties its schema cannot tell
    "record_embedding": {"dims": 2, "vector": [0.6, 0.8]},
    "record_message_embedding": {"dims": 2, "vector": [0.6, 0.8]},
    # the model and size of the matrix's vector index (the hashing embedder)
    "import_memory": {"model": "hashing/v1", "dims": 64, "vector": [0.125] * 64},
    "import_revision": {"content": "a correction", "model": "hashing/v1", "dims": 64,
                        "vector": [0.125] * 64},
    "record_feedback": {"signal": "used"},
    "revise_memory": {"content": "a correction"},
    "merge_memories": {"similarity": 0.99},
}

PUBLIC = frozenset({("GET", "/health"), ("GET", "/openapi.json"),
                    ("GET", "/v1/query/health"), ("GET", "/v1/query/openapi.json")})
"""Routes anyone may call (still checked for the other tenant's data)."""

TENANTLESS = frozenset({("GET", "/v1/query/vectors/graph")})
"""Routes that answer about the whole service, no tenant's data (still attacked: no answer of
theirs may show the other tenant's data either), so a victim's own answer shows none too."""


@dataclass(frozen=True)
class HttpCase:
    method: str
    path: str
    operation: dict[str, Any]
    components: dict[str, Any]
    writes: bool
    """From ingest's document: a command (a read role must not send it)."""
    batch: tuple["HttpCase", ...] = ()
    """A batch route: the command routes whose bodies it sends together."""

    @property
    def name(self) -> str:
        return f"{self.method} {self.path}"

    @property
    def public(self) -> bool:
        return (self.method, self.path) in PUBLIC

    @property
    def tenantless(self) -> bool:
        return (self.method, self.path) in TENANTLESS

    @property
    def names_a_space(self) -> bool:
        return "{space_id}" in self.path

    @property
    def archives(self) -> bool:
        """Whether it archives what it names (run last: an attacker archiving its own space
        would turn every later write into a 409 before it reached the ids it names)."""
        return self.path.endswith("/archive")

    def request(self, fill: Fill) -> tuple[str, dict[str, Any], Any]:
        """(path, query parameters, JSON body or None) about the things in ``fill``."""
        path = re.sub(r"{(\w+)}", lambda m: str(_given(fill, m.group(1), self.name)),
                      self.path)
        return path, self._query(fill), self._body(fill)

    def _query(self, fill: Fill) -> dict[str, Any]:
        found = {}
        for parameter in self.operation.get("parameters", []):
            name, where = parameter["name"], parameter["in"]
            value = QUERY_PARAMETERS[name](self.path, fill) if (
                where == "query" and name in QUERY_PARAMETERS) else None
            if where == "query" and value is not None:
                found[name] = value
            elif parameter.get("required") and where != "path":
                raise Unfillable(f"{self.name}: required {where} parameter {name!r}: add it "
                                 "to QUERY_PARAMETERS in tests/integration/isolation_cases.py")
        return found

    def command_body(self, fill: Fill) -> dict[str, Any]:
        """The command as a batch or gRPC sends it: the route's body with what its path names
        (a route's body leaves those out: the path carries them)."""
        named = {name: _given(fill, name, self.name) for name in re.findall(r"{(\w+)}", self.path)}
        body = self.request(fill)[2] or {}
        return {**body, **named}

    def body_schema(self) -> dict[str, Any]:
        """The request body's schema, resolved ({} for none)."""
        content = self.operation.get("requestBody", {}).get("content", {})
        schema = content.get("application/json", {}).get("schema")
        return {} if schema is None else Instances(self.components, {}, self.name).resolved(
            schema)

    def _body(self, fill: Fill) -> Any:
        schema = self.body_schema()
        if not schema:
            return None
        if self.batch:
            return {"commands": [{**c.command_body(fill), "command": c.operation["operationId"]}
                                 for c in self.batch]}
        body = Instances(self.components, fill, self.name).of(schema)
        if isinstance(body, dict):
            body.update(OVERRIDES.get(self.operation.get("operationId", ""), {}))
        return body


BATCH = ("archive_memory", "revise_memory")
"""The commands a batch (HTTP and gRPC) sends: about the same item, all or none."""


def http_cases(documents: list[tuple[dict[str, Any], bool]]) -> list[HttpCase]:
    """A case per operation of each (OpenAPI document, whether its operations write); a
    batch route sends the ``BATCH`` commands."""
    cases = [HttpCase(method.upper(), path, operation, document.get("components", {}), writes)
             for document, writes in documents
             for path, operations in document["paths"].items()
             for method, operation in operations.items()
             if method in ("get", "post", "put", "patch", "delete")]
    batched = tuple(c for c in command_routes(cases) if c.operation["operationId"] in BATCH)
    return [replace(c, batch=batched) if _is_batch(c) else c for c in cases]


def _is_batch(case: HttpCase) -> bool:
    schema = case.body_schema()
    return case.writes and "commands" in schema.get("properties", {})


def _given(fill: Fill, name: str, case: str) -> Any:
    if name not in (*PATH_PARAMETERS, *ADDRESS_ONLY) or name not in fill:
        raise Unfillable(f"{case}: no value for path parameter {name!r}: add it to "
                         "PATH_PARAMETERS in tests/integration/isolation_cases.py and to "
                         "the fill of tests/integration/isolation_system.py")
    return fill[name]


# --- the smallest valid instance of a JSON Schema ---------------------------------------------

_STRINGS = ("x", "x1", "0123456789abcdef", "a@b.c")
"""Tried in turn against a string's pattern."""


def _admits(schema: dict[str, Any], value: Any) -> bool:
    """Whether a number's bounds admit ``value`` (search's threshold 0 is not a theme's, which
    must be above 0): a fill the schema refuses would be refused before the call is judged."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return True
    return not (value <= schema.get("exclusiveMinimum", float("-inf"))
                or value < schema.get("minimum", float("-inf")))


@dataclass
class Instances:
    components: dict[str, Any]
    fill: Fill
    case: str

    def of(self, schema: dict[str, Any], name: str | None = None) -> Any:
        schema = self.resolved(schema)
        if name in BODY_PROPERTIES and name in self.fill and _admits(schema, self.fill[name]):
            return self.fill[name]
        for key in ("const", "default"):
            if key in schema and schema[key] is not None:
                return schema[key]
        if "enum" in schema:
            return schema["enum"][0]
        branches = schema.get("anyOf") or schema.get("oneOf")
        if branches:
            return self.of(next(b for b in branches if b.get("type") != "null"), name)
        return self._typed(schema, name)

    def _typed(self, schema: dict[str, Any], name: str | None) -> Any:
        kind = schema.get("type")
        if kind == "object" or "properties" in schema:
            properties = schema.get("properties", {})
            wanted = [p for p in properties if p in schema.get("required", ()) or (
                p in BODY_PROPERTIES and p in self.fill)]
            return {p: self.of(properties[p], p) for p in wanted}
        if kind == "array":
            return [self.of(schema.get("items", {})) for _ in range(schema.get("minItems", 0))]
        if kind in ("integer", "number"):
            low = schema.get("minimum", schema.get("exclusiveMinimum", 0) + 1)
            return min(max(low, 1), schema.get("maximum", 1))
        if kind == "boolean":
            return False
        if kind == "string":
            return self._string(schema)
        raise Unfillable(f"{self.case}: cannot make an instance of {schema} ({name}): add "
                         "the property to OVERRIDES in tests/integration/isolation_cases.py")

    def _string(self, schema: dict[str, Any]) -> str:
        if schema.get("format") == "uuid":
            return str(uuid.uuid4())
        if schema.get("format") == "date-time":
            return "2026-01-01T00:00:00Z"
        pattern, length = schema.get("pattern"), int(schema.get("minLength", 1))
        for candidate in _STRINGS:
            text = (candidate * length)[:max(length, len(candidate))]
            if pattern is None or re.search(pattern, text):
                return text
        raise Unfillable(f"{self.case}: no string matches {pattern!r}: add the property to "
                         "OVERRIDES in tests/integration/isolation_cases.py")

    def resolved(self, schema: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in schema:
            schema = self.components["schemas"][schema["$ref"].rsplit("/", 1)[1]]
        if "allOf" in schema and len(schema["allOf"]) == 1:
            return self.resolved(schema["allOf"][0])
        return schema


# --- gRPC -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class GrpcCase:
    service: str
    method: MethodDescriptor
    commands: tuple[HttpCase, ...] = ()
    """``Submit``: the command route whose body it sends; ``SubmitBatch``: the batch's."""

    @property
    def name(self) -> str:
        what = f" {self.commands[0].operation['operationId']}" if (
            self.method.name == "Submit") else ""
        return f"{self.service}.{self.method.name}{what}"

    @property
    def writes(self) -> bool:
        return self.service == "Ingest"

    @property
    def archives(self) -> bool:
        return any(c.archives for c in self.commands)

    def request(self, fill: Fill) -> Message:
        if self.method.name == "Submit":
            return _command_request(self.commands[0], fill)
        if self.method.name == "SubmitBatch":
            return ingest_pb2.BatchRequest(
                commands=[_command_request(c, fill) for c in self.commands])
        request = message_factory.GetMessageClass(self.method.input_type)()
        for field in self.method.input_type.fields:
            _set(request, field, fill, self.name)
        return request


def _command_request(case: HttpCase, fill: Fill) -> ingest_pb2.CommandRequest:
    return ingest_pb2.CommandRequest(command=case.operation["operationId"],
                                     json_body=orjson.dumps(case.command_body(fill)).decode())


def _set(request: Message, field: FieldDescriptor, fill: Fill, case: str) -> None:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return  # time travel and limits: their defaults
    if field.name == "after":
        value = fill["cursor"] if case.endswith("Changes") else None
    elif field.name in ADDRESS_ONLY and not field.has_presence:
        value = fill.get(field.name)
    else:
        value = fill.get(field.name) if field.name in BODY_PROPERTIES else None
    if value is None:
        # A field that must be set (no presence of its own) naming a thing is the address
        # of the call, like a path parameter: the fill must know it.
        if field.name.endswith("_id") and not field.has_presence and not field.is_repeated:
            raise Unfillable(f"{case}: no value for field {field.name!r}: add it to "
                             "BODY_PROPERTIES in tests/integration/isolation_cases.py")
        return
    if field.is_repeated:
        getattr(request, field.name).extend(value if isinstance(value, list) else [value])
    else:
        setattr(request, field.name, value)


def grpc_cases(http: list[HttpCase]) -> list[GrpcCase]:
    """A case per method of the proto services: ``Submit`` once per command route,
    ``SubmitBatch`` with the ``BATCH`` commands."""
    commands = command_routes(http)
    batch = tuple(c for c in commands if c.operation["operationId"] in BATCH)
    found = []
    for module in (ingest_pb2, query_pb2):
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                if method.name == "Submit":
                    found += [GrpcCase(service.name, method, (c,)) for c in commands]
                else:
                    found.append(GrpcCase(service.name, method, batch if (
                        method.name == "SubmitBatch") else ()))
    return found


def command_routes(cases: list[HttpCase]) -> list[HttpCase]:
    """The write routes that take one command (their body names it)."""
    return [c for c in cases if c.writes and c.method == "POST" and _is_command(c)]


def _is_command(case: HttpCase) -> bool:
    content = case.operation.get("requestBody", {}).get("content", {})
    ref = content.get("application/json", {}).get("schema", {}).get("$ref", "")
    schema = case.components.get("schemas", {}).get(ref.rsplit("/", 1)[-1], {})
    return "command" in schema.get("properties", {})
