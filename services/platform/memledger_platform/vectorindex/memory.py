"""An exact, in-memory ``VectorIndex``: for unit tests, and the ground truth of recall."""

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from memledger_platform.vectorindex.port import (
    Hit,
    IndexedPoint,
    Scope,
    SparseVector,
    Vector,
    VectorIndex,
    idf,
    in_scope,
    matches,
    oldest_first,
    session_conditions,
    stored_payload,
)


class InMemoryVectorIndex(VectorIndex):
    def __init__(self) -> None:
        self._points: dict[str, IndexedPoint] = {}

    def upsert(self, points: Sequence[IndexedPoint]) -> None:
        self._points.update({p.point_id: _stored(p) for p in points})

    def delete(self, point_ids: Sequence[str]) -> None:
        for point_id in point_ids:
            self._points.pop(point_id, None)

    def search(self, vector: Sequence[float], scope: Scope, k: int,
               fields: Sequence[str] | None = None) -> list[Hit]:
        query = _unit(vector)
        scored = [Hit(p.point_id, float(_unit(p.vector) @ query), _only(p.payload, fields))
                  for p in self._points.values()
                  if p.vector is not None and in_scope(p.payload, scope)]
        return _best(scored, k)

    def search_sparse(self, query: SparseVector, scope: Scope, k: int,
                      fields: Sequence[str] | None = None) -> list[Hit]:
        weights = self._idf_weighted(query)
        scored = [Hit(p.point_id, _dot(weights, p.sparse), _only(p.payload, fields))
                  for p in self._points.values()
                  if p.sparse is not None and in_scope(p.payload, scope)]
        return _best([h for h in scored if h.score > 0], k)

    def vectors(self, point_ids: Sequence[str]) -> dict[str, Vector]:
        found = (self._points.get(point_id) for point_id in point_ids)
        return {p.point_id: np.asarray(p.vector, np.float32)
                for p in found if p is not None and p.vector is not None}

    def payloads(self, point_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        found = (self._points.get(point_id) for point_id in point_ids)
        return {p.point_id: dict(p.payload) for p in found if p is not None}

    def points(self, tenant: str, item_id: str) -> list[IndexedPoint]:
        return sorted((p for p in self._points.values()
                       if p.payload["tenant"] == tenant and p.payload.get("item_id") == item_id),
                      key=lambda p: p.point_id)

    def session_messages(self, tenant: str, session: str, before: int) -> list[IndexedPoint]:
        return oldest_first([p for p in self._points.values()
                             if matches(p.payload, session_conditions(tenant, session, before))])

    def delete_subject(self, tenant: str, subject_id: str) -> int:
        gone = [k for k, p in self._points.items()
                if p.payload["tenant"] == tenant and p.payload.get("subject_id") == subject_id]
        for point_id in gone:
            del self._points[point_id]
        return len(gone)

    def count(self) -> int:
        return len(self._points)

    def _idf_weighted(self, query: SparseVector) -> dict[int, float]:
        """The query's weights times each term's IDF, over every point with a sparse vector
        (all tenants: the statistics Qdrant's IDF modifier keeps)."""
        corpus = [p.sparse for p in self._points.values() if p.sparse is not None]
        terms = set(query.indices)
        containing = Counter(i for s in corpus for i in s.indices if i in terms)
        return {i: w * idf(len(corpus), containing[i])
                for i, w in zip(query.indices, query.values, strict=True)}


def _stored(point: IndexedPoint) -> IndexedPoint:
    """``point`` as Qdrant keeps it: the dense vector unit-length (cosine keeps only its
    direction), an empty sparse vector as none (so it never counts in the IDF statistics)."""
    vector = _unit_list(point.vector) if point.vector is not None else None
    sparse = point.sparse if point.sparse is not None and point.sparse.indices else None
    return replace(point, vector=vector, payload=stored_payload(point.payload), sparse=sparse)


def _unit_list(vector: Sequence[float]) -> list[float]:
    return [float(x) for x in _unit(vector)]


def _dot(weights: dict[int, float], sparse: SparseVector | None) -> float:
    pairs = zip(sparse.indices, sparse.values, strict=True) if sparse is not None else ()
    return sum(weights.get(i, 0.0) * v for i, v in pairs)


def _best(hits: list[Hit], k: int) -> list[Hit]:
    return sorted(hits, key=lambda hit: (-hit.score, hit.point_id))[:k]


def _unit(vector: Sequence[float]) -> "np.typing.NDArray[np.float64]":
    array = np.asarray(vector, dtype=np.float64)
    norm = float(np.linalg.norm(array))
    return array / norm if norm else array


def _only(payload: dict[str, Any], fields: Sequence[str] | None) -> dict[str, Any]:
    """``payload``'s ``fields`` (those it has), or all of it (``None``)."""
    if fields is None:
        return dict(payload)
    return {key: payload[key] for key in fields if key in payload}
