"""Every HTTP route has a method in the sync client, in the async client and in the gRPC
services, which reaches that route and takes its parameters; or it is left out on purpose, in
the one table of ``memledger_cli.interfaces``, with the reason. Generated from both OpenAPI
documents and the routes the apps serve, so a new route without them fails here."""

import inspect
import re
import typing
from collections.abc import Callable
from typing import Any
from uuid import UUID

import httpx
import pytest
from google.protobuf.descriptor import Descriptor, MethodDescriptor

from memledger_cli import interfaces
from memledger_cli.interfaces import EXCLUDED, ROUTES, SUBMIT, Route
from memledger_client import AsyncClient, Client
from memledger_ingest.entrypoints.grpc_api import IngestServicer
from memledger_query.entrypoints.grpc_api import QueryServicer
from memledger_schemas.commands import BY_NAME, CreateSpace
from memledger_schemas.grpc.v1 import ingest_pb2, ingest_pb2_grpc, query_pb2, query_pb2_grpc

DOCUMENTED = interfaces.documented()
ALL_ROUTES = sorted(set(DOCUMENTED) | interfaces.undocumented_served())
MAPPED = sorted(ROUTES)
SERVICES: dict[str, tuple[Any, type, type]] = {
    "Ingest": (ingest_pb2.DESCRIPTOR.services_by_name["Ingest"], IngestServicer,
               ingest_pb2_grpc.IngestServicer),
    "Query": (query_pb2.DESCRIPTOR.services_by_name["Query"], QueryServicer,
              query_pb2_grpc.QueryServicer)}
RENAMED = {"kind": "kinds", "tag": "tags"}
"""HTTP query parameters repeated under a singular name, plural in the client and gRPC."""
SAMPLE = {"space_id": "ops", "item_id": UUID(int=1), "session_id": UUID(int=2),
          "entity_id": "wikidata/Q42", "subject": "alice", "retrieval_id": UUID(int=3),
          "subject_id": "user-7", "query": "backup",
          "commands": [CreateSpace(space_id="ops")]}
"""A value for each parameter a client method needs to be called (by name)."""


def _ids(routes: list[Route]) -> list[str]:
    return [f"{m} {p}" for m, p in routes]


def _is_command(route: Route) -> bool:
    return route not in ROUTES and DOCUMENTED.get(route, {}).get("operationId") in BY_NAME


def _parameters(route: Route) -> set[str]:
    """The route's path and query parameters and its JSON body's properties, by name."""
    operation = DOCUMENTED[route]
    names = {RENAMED.get(p["name"], p["name"]) for p in operation.get("parameters", ())
             if p["in"] in ("path", "query")}
    return names | set(_schema(route, operation.get("requestBody", {})).get("properties", {}))


def _schema(route: Route, holder: dict[str, Any]) -> dict[str, Any]:
    schema = holder.get("content", {}).get("application/json", {}).get("schema", {})
    ref = schema.get("$ref", "")
    if not ref:
        return dict(schema)
    document = next(d for d in interfaces.documents().values()
                    if route[0].lower() in d["paths"].get(route[1], {}))
    found: dict[str, Any] = document["components"]["schemas"][ref.rsplit("/", 1)[-1]]
    return found


def _grpc(route: Route) -> MethodDescriptor:
    served = ROUTES[route]
    assert served.grpc is not None
    service, _, name = served.grpc.partition(".")
    found: MethodDescriptor = SERVICES[service][0].methods_by_name[name]
    return found


@pytest.mark.parametrize("route", ALL_ROUTES, ids=_ids(ALL_ROUTES))
def test_every_route_is_served_by_both_clients_and_grpc_or_left_out_with_a_reason(
        route: Route) -> None:
    served = ROUTES.get(route)
    for interface in ("client", "grpc"):
        mapped = _is_command(route) or (served is not None and getattr(served, interface))
        why = EXCLUDED.get((route, interface))
        assert mapped or why, (f"{route} has no {interface} method: add one and map it in "
                               "memledger_cli.interfaces.ROUTES, or say why not in EXCLUDED")
        assert not (mapped and why), f"{route} is both served by {interface} and excluded"


def test_each_table_names_only_routes_that_exist() -> None:
    known = set(ALL_ROUTES)
    assert set(ROUTES) - known == set()
    assert {route for route, _ in EXCLUDED} - known == set()
    assert all(why.strip() for why in EXCLUDED.values())


@pytest.mark.parametrize("route", MAPPED, ids=_ids(MAPPED))
def test_the_mapped_client_methods_exist_in_both_clients(route: Route) -> None:
    name = ROUTES[route].client
    assert name is not None, f"{route}: the client leaves it out (see EXCLUDED)"
    assert callable(getattr(Client, name, None)), f"Client.{name} is missing"
    assert inspect.iscoroutinefunction(getattr(AsyncClient, name, None)), (
        f"AsyncClient.{name} is missing or not async")


@pytest.mark.parametrize("route", MAPPED, ids=_ids(MAPPED))
def test_the_sync_client_method_sends_its_route(route: Route) -> None:
    name = ROUTES[route].client
    assert name is not None
    sent = _sent(getattr(Client, name), route)
    pattern = re.sub(r"\\{\w+\\}", "[^/]+", re.escape(route[1]))
    assert sent[0] == route[0], (route, sent)
    assert re.fullmatch(pattern, sent[1]), (route, sent)


@pytest.mark.parametrize("route", [r for r in MAPPED if r[0] == "GET"],
                         ids=_ids([r for r in MAPPED if r[0] == "GET"]))
def test_the_client_method_takes_every_parameter_of_its_route(route: Route) -> None:
    name = ROUTES[route].client
    assert name is not None
    missing = _parameters(route) - _accepted(getattr(Client, name)) - {"space_id"}
    assert missing == set(), f"Client.{name} lacks {sorted(missing)}"


@pytest.mark.parametrize("route", [r for r in MAPPED if r[0] == "POST"],
                         ids=_ids([r for r in MAPPED if r[0] == "POST"]))
def test_a_client_method_with_a_body_takes_every_field_of_it(route: Route) -> None:
    name = ROUTES[route].client
    assert name is not None
    accepted = _accepted(getattr(Client, name)) | {"command", "idempotency_key"}
    assert _parameters(route) - accepted == set()


@pytest.mark.parametrize("route", [r for r in MAPPED if ROUTES[r].grpc],
                         ids=_ids([r for r in MAPPED if ROUTES[r].grpc]))
def test_the_grpc_method_exists_is_implemented_and_takes_every_parameter(route: Route) -> None:
    method = _grpc(route)
    _, servicer, generated = SERVICES[method.containing_service.name]
    assert getattr(servicer, method.name) is not getattr(generated, method.name), (
        f"{method.full_name} is in the protos but its servicer does not implement it")
    missing = _parameters(route) - _fields(method.input_type)
    assert missing == set(), f"{method.full_name}'s request lacks {sorted(missing)}"


@pytest.mark.parametrize("route", [r for r in MAPPED if ROUTES[r].grpc],
                         ids=_ids([r for r in MAPPED if ROUTES[r].grpc]))
def test_the_grpc_answer_has_every_field_of_the_http_answer(route: Route) -> None:
    responses = DOCUMENTED[route]["responses"]
    answer = _schema(route, responses.get("200") or responses["201"])
    missing = set(answer.get("properties", {})) - _fields(_grpc(route).output_type)
    assert missing == set(), f"{_grpc(route).full_name}'s answer lacks {sorted(missing)}"


def test_every_command_route_is_submitted_by_its_name_and_sent_by_its_model() -> None:
    commands = [r for r in DOCUMENTED if _is_command(r)]
    assert {DOCUMENTED[r]["operationId"] for r in commands} == set(BY_NAME)
    for route in commands:
        model = BY_NAME[DOCUMENTED[route]["operationId"]]
        assert (route[0], model.http_path) == route
    assert SERVICES["Ingest"][0].methods_by_name["Submit"].full_name == "memledger.v1." + SUBMIT


def test_every_grpc_method_serves_a_route() -> None:
    """The other way round: no gRPC method without its HTTP route (Replay exports the log,
    as ``memledger replay`` does, with no HTTP route)."""
    mapped = {s.grpc for s in ROUTES.values()} | {SUBMIT}
    methods = {f"{name}.{m.name}" for name, (service, _, _) in SERVICES.items()
               for m in service.methods}
    assert methods - mapped == {"Query.Replay"}


def _fields(message: Descriptor) -> set[str]:
    return {f.name for f in message.fields}


def _accepted(method: Callable[..., Any]) -> set[str]:
    """The names a client method takes: its parameters and its ``**kwargs: Unpack[...]``
    keys."""
    found = set()
    hints = typing.get_type_hints(method, include_extras=True)
    for name, parameter in inspect.signature(method).parameters.items():
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            found |= set(typing.get_type_hints(typing.get_args(hints[name])[0]))
        elif name != "self":
            found.add(name)
    return found


class _Sent(Exception):
    pass


def _sent(method: Callable[..., Any], route: Route) -> tuple[str, str]:
    """(method, path) of the request ``method`` sends, called with sample arguments."""
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        raise _Sent

    with Client("http://memledger", transport=httpx.MockTransport(record)) as client:
        in_path = set(re.findall(r"{(\w+)}", route[1]))
        required = [p for p in inspect.signature(method).parameters.values()
                    if (p.default is inspect.Parameter.empty or p.name in in_path)
                    and p.name != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD]
        with pytest.raises(_Sent):
            method(client, **{p.name: SAMPLE[p.name] for p in required})
    return seen[0].method, seen[0].url.raw_path.decode().partition("?")[0]
