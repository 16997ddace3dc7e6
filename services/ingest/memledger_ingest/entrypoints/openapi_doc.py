"""What the ingest OpenAPI document says beyond the command models: the body each route takes,
what the request limits answer (413, 504), and the links between writes.

- A route's path parameters have their command fields' schemas (a space id's pattern, an
  item id's format), and its body is its command without them (the route takes them from the
  path; a body may repeat them, equal) and without ``actor`` (set from the credential,
  refused from a client). The commands' own schemas, which a batch and NATS intake take
  whole, are unchanged.
- Links say which writes can follow a committed one, given the ids its answer names (``ids``)
  and what its path named. A client, or a stateful fuzzer, follows them: create a space,
  write a memory in it, revise what it wrote, and so on.
"""

import re
from typing import Any

from memledger_schemas.commands import COMMANDS, INTERNAL_COMMANDS

SPACE = "$request.path.space_id"
SESSION = "$request.path.session_id"
NOT_FROM_CLIENTS = ("actor",)
REF = "#/components/schemas/"
LIMITS = {"413": "a body over MEMLEDGER_HTTP_MAX_BODY_BYTES",
          "504": "no answer within MEMLEDGER_HTTP_REQUEST_TIMEOUT_SECONDS (a write may still "
                 "commit: retry with the same idempotency key)"}
"""What the request limits in front of every route answer."""


def finish(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` (the document made from the command models, ``operationId`` the command's
    name) with each route's own body schema, the request limits' answers and the links
    between writes."""
    _route_bodies(doc)
    _add_limits(doc)
    _add_links(doc["paths"])
    return doc


def _add_limits(doc: dict[str, Any]) -> None:
    error = {"application/json": {"schema": {"$ref": f"{REF}ErrorBody"}}}
    for item in doc["paths"].values():
        for operation in item.values():
            for status, text in LIMITS.items():
                operation["responses"].setdefault(status, {"description": text,
                                                           "content": error})


def _path_parameters(path: str) -> list[str]:
    return re.findall(r"{(\w+)}", path)


def _route_bodies(doc: dict[str, Any]) -> None:
    components = doc["components"]["schemas"]
    for model in COMMANDS:
        operation = doc["paths"][model.http_path]["post"]
        body = operation["requestBody"]["content"]["application/json"]
        name = body["schema"]["$ref"].removeprefix(REF)
        fields = components[name]["properties"]
        for parameter in operation["parameters"]:
            if parameter["in"] == "path":
                parameter["schema"] = fields[parameter["name"]]
        left_out = {*_path_parameters(model.http_path), *NOT_FROM_CLIENTS}
        components[f"{name}Body"] = {
            **components[name],
            "properties": {k: v for k, v in fields.items() if k not in left_out},
            "required": [k for k in components[name].get("required", []) if k not in left_out]}
        body["schema"] = {"$ref": f"{REF}{name}Body"}


def _client_commands_naming(*parameters: str) -> list[str]:
    """The commands a client may send whose path names exactly ``parameters``."""
    return [name for model in COMMANDS
            if _path_parameters(model.http_path) == list(parameters)
            and (name := str(model.model_fields["command"].default)) not in INTERNAL_COMMANDS]


def _follows() -> dict[str, dict[str, dict[str, str]]]:
    """command → {a command that can follow it: {its path parameter: expression}}."""
    in_space = {"space_id": "$response.body#/ids/space_id"}
    on_item = {"space_id": SPACE, "item_id": "$response.body#/ids/item_id"}
    in_session = {"space_id": SPACE, "session_id": "$response.body#/ids/session_id"}
    item_writes = _client_commands_naming("space_id", "item_id")
    session_writes = _client_commands_naming("space_id", "session_id")
    return {
        "create_space": _each(_client_commands_naming("space_id"), in_space),
        **{name: _each(item_writes, on_item)
           for name in ("assert_memory", "revise_memory", "supersede_memory")},
        "start_session": _each(session_writes, in_session),
        "append_message": _each(session_writes, {**in_session, "session_id": SESSION}),
    }


def _each(commands: list[str], parameters: dict[str, str]) -> dict[str, dict[str, str]]:
    return {name: dict(parameters) for name in commands}


def _add_links(paths: dict[str, Any]) -> None:
    """A link on each write's committed answer (201) to every write that can follow it."""
    by_name = {op["operationId"]: op for item in paths.values() for op in item.values()}
    for source, targets in _follows().items():
        by_name[source]["responses"]["201"]["links"] = {
            target: {"operationId": target, "parameters": parameters,
                     "description": f"{target} with what {source} named"}
            for target, parameters in targets.items()}
