"""Which client method and which gRPC method serve each HTTP route, and the routes (or the
interfaces of a route) left out on purpose, with the reason.

The parity test (``tests/unit/test_interface_parity.py``) reads both OpenAPI documents and
every route the two apps serve, and fails on a route that is in neither table, on a mapped
method that does not exist or does not reach its route, and on a parameter of the route that
the client method or the gRPC request lacks. ``docs/interfaces.md`` is made from these tables
(``make docs``).

Every command route is served by ``send`` (its command model) and ``Ingest.Submit`` (its
command name) by construction: those are checked, not listed.
"""

import functools
import re
from dataclasses import dataclass
from typing import Any, Literal

from memledger_client import Client
from memledger_ingest.entrypoints.http import ERASE_PATH, openapi
from memledger_query.bootstrap import unconnected_app

Route = tuple[str, str]
"""(HTTP method, path template as in the OpenAPI document)."""
Interface = Literal["client", "grpc"]
SUBMIT = "Ingest.Submit"


@dataclass(frozen=True)
class Served:
    """``client``: the name of the method of ``Client`` and ``AsyncClient``; ``grpc``:
    ``Service.Method``."""

    client: str | None
    grpc: str | None


ROUTES: dict[Route, Served] = {
    ("POST", "/v1/batch"): Served("batch", "Ingest.SubmitBatch"),
    ("POST", "/v1/subjects/{subject_id}/erase"): Served("erase_subject", "Ingest.Erase"),
    ("GET", "/v1/spaces/{space_id}/items/{item_id}"): Served("item", "Query.GetItem"),
    ("GET", "/v1/spaces/{space_id}/items"): Served("items", "Query.ListItems"),
    ("GET", "/v1/spaces/{space_id}/items/{item_id}/history"): Served("history",
                                                                     "Query.History"),
    ("GET", "/v1/spaces/{space_id}/changes"): Served("changes", "Query.Changes"),
    ("GET", "/v1/changes"): Served("changes", "Query.Changes"),
    ("GET", "/v1/spaces/{space_id}/sessions/{session_id}/messages"): Served(
        "messages", "Query.Messages"),
    ("GET", "/v1/spaces/{space_id}/sessions"): Served("sessions", "Query.ListSessions"),
    ("GET", "/v1/spaces/{space_id}/graph"): Served("graph", "Query.Graph"),
    ("GET", "/v1/spaces/{space_id}/entities/{entity_id}/neighbours"): Served(
        "neighbours", "Query.Neighbours"),
    ("GET", "/v1/spaces/{space_id}/entities/{entity_id}/items"): Served(
        "items_mentioning", "Query.ItemsMentioning"),
    ("GET", "/v1/spaces"): Served("spaces", "Query.ListSpaces"),
    ("GET", "/v1/agents"): Served("agents", "Query.ListAgents"),
    ("GET", "/v1/erasures"): Served("erasures", "Query.ListErasures"),
    ("GET", "/v1/spaces/{space_id}/stats"): Served("space_stats", "Query.SpaceStats"),
    ("POST", "/v1/search"): Served("search", "Query.Search"),
    ("POST", "/v1/context"): Served("context", "Query.Context"),
    ("GET", "/v1/query/vectors/summary"): Served("vectors_summary", "Query.VectorsSummary"),
    ("GET", "/v1/retrievals/{retrieval_id}"): Served("retrieval", "Query.GetRetrieval"),
    ("POST", "/v1/retrievals/{retrieval_id}/replay"): Served("replay_retrieval",
                                                             "Query.ReplayRetrieval"),
    ("GET", "/v1/spaces/{space_id}/items/{item_id}/chain"): Served("chain", "Query.Chain"),
    ("GET", "/v1/spaces/{space_id}/policies"): Served("policies", "Query.Policies"),
    ("GET", "/v1/spaces/{space_id}/merge-suggestions"): Served("merge_suggestions",
                                                               "Query.MergeSuggestions"),
    ("GET", "/v1/spaces/{space_id}/profiles/{subject}"): Served("profile", "Query.Profile"),
    ("GET", "/v1/spaces/{space_id}/themes"): Served("themes", "Query.Themes"),
    ("GET", "/health"): Served("health", None),
    ("GET", "/v1/query/health"): Served("query_health", None),
}

_CONSOLE = ("the operator console's page and assets, for a browser: no data of their own (the "
            "page reads the API with the operator's key)")
_HEALTH = ("a probe of the process for supervisors and load balancers; a gRPC channel's own "
           "connectivity state (or a call) is the probe there")
_SPEC = "the API's own description, read by tools; the protos are gRPC's"
_GRAPH = ("an operator's probe of the vector index's graph build (benchmarks wait on it), "
          "like the health probes: no data of a tenant")

EXCLUDED: dict[tuple[Route, Interface], str] = {
    (("GET", "/health"), "grpc"): _HEALTH,
    (("GET", "/v1/query/health"), "grpc"): _HEALTH,
    (("GET", "/v1/query/vectors/graph"), "client"): _GRAPH,
    (("GET", "/v1/query/vectors/graph"), "grpc"): _GRAPH,
    (("GET", "/openapi.json"), "client"): _SPEC,
    (("GET", "/openapi.json"), "grpc"): _SPEC,
    (("GET", "/v1/query/openapi.json"), "client"): _SPEC,
    (("GET", "/v1/query/openapi.json"), "grpc"): _SPEC,
    (("GET", "/console"), "client"): _CONSOLE,
    (("GET", "/console"), "grpc"): _CONSOLE,
    (("GET", "/console/"), "client"): _CONSOLE,
    (("GET", "/console/"), "grpc"): _CONSOLE,
    (("GET", "/console/{name}"), "client"): _CONSOLE,
    (("GET", "/console/{name}"), "grpc"): _CONSOLE,
}
"""The one table of what is left out on purpose: (route, interface) → why."""


@functools.cache
def documents() -> dict[str, dict[str, Any]]:
    """The OpenAPI documents of ingest (with its erasure route) and of query."""
    return {"ingest": openapi(ERASE_PATH), "query": unconnected_app().openapi()}


def documented() -> dict[Route, dict[str, Any]]:
    """Every operation of both documents, by route."""
    return {(method.upper(), path): operation
            for document in documents().values()
            for path, operations in document["paths"].items()
            for method, operation in operations.items()}


def undocumented_served() -> set[Route]:
    """The routes the query app serves that its document leaves out (ingest's serves
    exactly its document, being made from the same command models)."""
    served = {(method, path) for route in _flat(unconnected_app().routes)
              for path in [str(getattr(route, "path", ""))]
              for method in getattr(route, "methods", None) or () if method != "HEAD"}
    served.add(("GET", "/openapi.json"))
    return {(m, _template(p)) for m, p in served} - set(documented())


def _flat(routes: list[Any]) -> list[Any]:
    """Routes, with those of included routers (FastAPI keeps them apart) among them."""
    found = []
    for route in routes:
        inner = getattr(route, "original_router", None)
        found += _flat(list(inner.routes)) if inner is not None else [route]
    return found


def _template(path: str) -> str:
    """A served path as the document writes it (``{entity_id:path}`` → ``{entity_id}``)."""
    return re.sub(r"{(\w+):\w+}", r"{\1}", path)


def page() -> str:
    """``docs/interfaces.md``: every route with its client and gRPC methods."""
    lines = ["# Every route in every interface", "",
             "Each HTTP route, the method of the Python clients (`Client` and `AsyncClient`) "
             "and the gRPC method that serve it. Every command route is also served by "
             "`send(command)` and `Ingest.Submit` (its command name); those with a typed "
             "shortcut list it. A test fails when a route is added without them.", "",
             "| route | client | gRPC |", "|---|---|---|"]
    for (method, path), operation in sorted(documented().items(), key=lambda r: r[0][::-1]):
        client, grpc = _cells((method, path), operation)
        lines.append(f"| `{method} {path}` | {client} | {grpc} |")
    lines += ["", "## Left out on purpose", "", "| route | interface | why |", "|---|---|---|"]
    lines += [f"| `{method} {path}` | {interface} | {why} |"
              for ((method, path), interface), why in sorted(EXCLUDED.items())]
    return "\n".join(lines) + "\n"


def _cells(route: Route, operation: dict[str, Any]) -> tuple[str, str]:
    served = ROUTES.get(route)
    if served is None:  # a command route
        name = operation["operationId"]
        client = f"`{name}`, `send`" if hasattr(Client, name) else "`send`"
        return client, f"`{SUBMIT}` (`{name}`)"
    return (f"`{served.client}`" if served.client else "—",
            f"`{served.grpc}`" if served.grpc else "—")
