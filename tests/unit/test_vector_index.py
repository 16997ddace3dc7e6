"""The VectorIndex contract, run against every adapter: the exact in-memory one, Qdrant Edge
(in process) and the Qdrant server adapter on qdrant-client's local mode (no network)."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from qdrant_client import QdrantClient

from memledger_platform.vectorindex.memory import InMemoryVectorIndex
from memledger_platform.vectorindex.port import OPEN, IndexedPoint, Scope, VectorIndex
from memledger_platform.vectorindex.qdrant_edge import QdrantEdgeVectorIndex
from memledger_platform.vectorindex.qdrant_server import QdrantServerVectorIndex

T2020, T2022, T2024, NOW = 1.58e9, 1.64e9, 1.70e9, 1.79e9


@pytest.fixture(params=["memory", "qdrant-edge", "qdrant-client-local"])
def index(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VectorIndex]:
    made: VectorIndex
    if request.param == "memory":
        made = InMemoryVectorIndex()
    elif request.param == "qdrant-edge":
        made = QdrantEdgeVectorIndex(tmp_path / "vectors", dims=3)
    else:  # the distributed-mode adapter, on qdrant-client's local mode
        made = QdrantServerVectorIndex(QdrantClient(location=":memory:"), "memories", dims=3)
    yield made
    made.close()


def point(point_id: str, vector: list[float], **payload: Any) -> IndexedPoint:
    base = {"tenant": "acme", "space": "s", "kind": "fact", "tags": [], "item_id": point_id,
            "valid_from": T2020, "valid_to": OPEN, "sys_from": 1, "sys_to": OPEN}
    return IndexedPoint(f"00000000-0000-0000-0000-{int(point_id):012d}", vector,
                        {**base, **payload})


def ids(index: VectorIndex, scope: Scope, vector: list[float] | None = None) -> list[str]:
    return [h.payload["item_id"] for h in index.search(vector or [1.0, 0.0, 0.0], scope, 10)]


def now(**scope: Any) -> Scope:
    return Scope(tenant=scope.pop("tenant", "acme"), valid_at=scope.pop("valid_at", NOW),
                 **scope)


def test_hits_come_best_first_and_at_most_k(index: VectorIndex) -> None:
    index.upsert([point("1", [1, 0, 0]), point("2", [0.9, 0.1, 0]), point("3", [0, 1, 0])])
    hits = index.search([1.0, 0.0, 0.0], now(), 2)
    assert [h.payload["item_id"] for h in hits] == ["1", "2"]
    assert hits[0].score >= hits[1].score


def test_another_tenant_never_sees_a_point(index: VectorIndex) -> None:
    index.upsert([point("1", [1, 0, 0]), point("2", [1, 0, 0], tenant="globex")])
    assert ids(index, now()) == ["1"]
    assert ids(index, now(tenant="globex")) == ["2"]
    assert ids(index, now(tenant="nobody")) == []


def test_spaces_kinds_tags_session_and_agent_narrow_the_scope(index: VectorIndex) -> None:
    index.upsert([point("1", [1, 0, 0], space="a", kind="fact", tags=["x"], session="s1",
                        agent="bot"),
                  point("2", [1, 0, 0], space="b", kind="decision", tags=["y", "z"])])
    assert ids(index, now(spaces=("a",))) == ["1"]
    assert ids(index, now(kinds=("decision",))) == ["2"]
    assert ids(index, now(tags=("z", "q"))) == ["2"]
    assert ids(index, now(session="s1")) == ["1"]
    assert ids(index, now(agent="bot")) == ["1"]


def test_current_only_by_default_and_as_of_a_position_on_request(index: VectorIndex) -> None:
    index.upsert([point("1", [1, 0, 0], sys_from=1, sys_to=5),  # replaced at position 5
                  point("2", [1, 0, 0], sys_from=5)])
    assert ids(index, now()) == ["2"]
    assert ids(index, now(position=3)) == ["1"]
    assert ids(index, now(position=5)) == ["2"]


def test_valid_time_bounds_are_half_open(index: VectorIndex) -> None:
    index.upsert([point("1", [1, 0, 0], valid_from=T2020, valid_to=T2022),
                  point("2", [1, 0, 0], valid_from=T2022)])
    assert ids(index, now(valid_at=T2020)) == ["1"]
    assert ids(index, now(valid_at=T2022)) == ["2"]
    assert ids(index, now(valid_at=T2020 - 1)) == []


def test_an_upsert_of_the_same_id_replaces_and_a_delete_removes(index: VectorIndex) -> None:
    index.upsert([point("1", [1, 0, 0])])
    index.upsert([point("1", [0, 1, 0], kind="decision")])
    assert index.count() == 1
    assert ids(index, now(kinds=("decision",))) == ["1"]
    index.delete([point("1", [0, 0, 1]).point_id, "00000000-0000-0000-0000-000000000999"])
    assert index.count() == 0
