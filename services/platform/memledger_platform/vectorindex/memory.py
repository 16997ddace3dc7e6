"""An exact, in-memory ``VectorIndex``: for unit tests, and the ground truth of recall."""

from collections.abc import Sequence

import numpy as np

from memledger_platform.vectorindex.port import Hit, IndexedPoint, Scope, VectorIndex, in_scope


class InMemoryVectorIndex(VectorIndex):
    def __init__(self) -> None:
        self._points: dict[str, IndexedPoint] = {}

    def upsert(self, points: Sequence[IndexedPoint]) -> None:
        self._points.update({p.point_id: p for p in points})

    def delete(self, point_ids: Sequence[str]) -> None:
        for point_id in point_ids:
            self._points.pop(point_id, None)

    def search(self, vector: Sequence[float], scope: Scope, k: int) -> list[Hit]:
        query = _unit(vector)
        scored = [Hit(p.point_id, float(_unit(p.vector) @ query), p.payload)
                  for p in self._points.values() if in_scope(p.payload, scope)]
        return sorted(scored, key=lambda hit: (-hit.score, hit.point_id))[:k]

    def count(self) -> int:
        return len(self._points)


def _unit(vector: Sequence[float]) -> "np.typing.NDArray[np.float64]":
    array = np.asarray(vector, dtype=np.float64)
    norm = float(np.linalg.norm(array))
    return array / norm if norm else array
