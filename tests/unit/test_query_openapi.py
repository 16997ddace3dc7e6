"""The query service's OpenAPI document is a published contract: however its routes are
arranged in code, the document stays what ``snapshots/query_openapi.json`` holds (paths,
operation ids, parameters, bodies, answers and schemas). A deliberate change to the API
regenerates the snapshot in the same commit."""

import json
from pathlib import Path
from typing import Any

from memledger_query.bootstrap import unconnected_app

SNAPSHOT = Path(__file__).parent / "snapshots" / "query_openapi.json"


def _normal(document: dict[str, Any]) -> dict[str, Any]:
    """The document with each operation's parameters keyed by where and what they are (their
    order in the list carries no meaning)."""
    paths = {
        path: {method: {**op, "parameters": {f"{p['in']}:{p['name']}": p
                                             for p in op.get("parameters", [])}}
               for method, op in operations.items()}
        for path, operations in document["paths"].items()}
    return {**document, "paths": paths}


def test_the_query_openapi_document_is_the_one_published() -> None:
    expected = _normal(json.loads(SNAPSHOT.read_text()))
    actual = _normal(json.loads(json.dumps(unconnected_app().openapi())))
    assert sorted(actual["paths"]) == sorted(expected["paths"])
    for path, operations in expected["paths"].items():
        assert actual["paths"][path] == operations, path
    assert actual == expected


def test_every_query_operation_keeps_its_operation_id() -> None:
    document = json.loads(SNAPSHOT.read_text())
    expected = {op["operationId"] for ops in document["paths"].values() for op in ops.values()}
    served = unconnected_app().openapi()["paths"].values()
    assert {op["operationId"] for ops in served for op in ops.values()} == expected
