"""``VectorIndex`` on Qdrant Edge (``qdrant-edge-py``): the Qdrant engine in process, HNSW,
kept under a directory of its own."""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import qdrant_edge as qe

from memledger_platform.vectorindex.port import (
    Condition,
    Hit,
    IndexedPoint,
    Scope,
    VectorIndex,
    conditions,
)


class QdrantEdgeVectorIndex(VectorIndex):
    def __init__(self, path: Path, dims: int) -> None:
        path.mkdir(parents=True, exist_ok=True)
        config = qe.EdgeConfig(vectors=qe.EdgeVectorParams(size=dims, distance=qe.Distance.Cosine))
        try:
            self._shard = qe.EdgeShard.load(str(path), config)
        except Exception:
            self._shard = qe.EdgeShard.create(str(path), config)

    def upsert(self, points: Sequence[IndexedPoint]) -> None:
        if points:
            self._shard.update(qe.UpdateOperation.upsert_points(
                [qe.Point(id=p.point_id, vector=list(p.vector), payload=p.payload)
                 for p in points]))

    def delete(self, point_ids: Sequence[str]) -> None:
        if point_ids:
            self._shard.update(qe.UpdateOperation.delete_points(list(point_ids)))

    def search(self, vector: Sequence[float], scope: Scope, k: int) -> list[Hit]:
        found = self._shard.query(qe.QueryRequest(
            limit=k, query=qe.Query.Nearest(list(vector)), filter=_filter(scope),
            with_payload=True))
        return [Hit(str(p.id), float(p.score), dict(p.payload or {})) for p in found]

    def count(self) -> int:
        return int(self._shard.count(qe.CountRequest(filter=None, exact=True)))

    def optimize(self) -> None:
        """Build the HNSW graph for what was added (search is exact until then)."""
        self._shard.optimize()

    def close(self) -> None:
        self._shard.flush()
        self._shard.close()


def _filter(scope: Scope) -> Any:
    return qe.Filter(must=[_condition(c) for c in conditions(scope)])


def _condition(c: Condition) -> Any:
    if c.op == "eq":
        return qe.FieldCondition(key=c.key, match=qe.MatchValue(c.value))
    if c.op == "any":
        return qe.FieldCondition(key=c.key, match=qe.MatchAny(c.value))
    bound = qe.RangeFloat(lte=c.value) if c.op == "lte" else qe.RangeFloat(gt=c.value)
    return qe.FieldCondition(key=c.key, range=bound)
